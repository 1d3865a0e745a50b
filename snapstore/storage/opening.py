"""Where a store is and what its meta table says: the checks behind ``Store.init``, ``open``
and ``find`` that need no Store (the facade only builds the object from what they return).

A store is refused before anything is read from it when it is of another format or chunker, or
when its recorded compression level is out of range; a command run outside the store's tree is
refused with the way to re-point the store (``relocate``).
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

import msgpack

from snapstore.errors import (
    CorruptError,
    FormatVersionError,
    StoreExistsError,
    StoreNotFoundError,
    TreeIOError,
    UnsafePathError,
    UsageError,
)
from snapstore.storage import chunker, discovery, lmdb_generations
from snapstore.storage.backend import Backend
from snapstore.storage.discovery import STORE_DIRNAME

FORMAT_VERSION = 3
#: Formats this snapstore reads (1: one value per chunk; 2: packs; 3: packs and compact
#: conversation records, see docs/format.md).
READABLE_FORMATS = (1, 2, 3)


def new_store(root: str, store: str | None, level: int) -> tuple[str, str, dict[bytes, bytes]]:
    """``(root, store_dir, meta rows)`` of a store to create for the tree at ``root`` (in
    ``root/.snapstore`` unless ``store``); refuses what ``init`` must not make."""
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        raise TreeIOError(f"{root} is not a directory")
    store_dir = os.path.join(root, STORE_DIRNAME) if store is None else os.path.abspath(store)
    if lmdb_generations.is_store(store_dir):
        raise StoreExistsError(f"a store already exists at {store_dir}")
    if os.path.realpath(store_dir) == os.path.realpath(root):
        raise UsageError(  # its live files would be snapshotted and rewritten by restore
            f"the store cannot be the tree's root ({root}): use a subdirectory or another path"
        )
    if not 1 <= level <= 22:
        raise UsageError("the compression level must be between 1 and 22")
    return root, store_dir, {
        b"format": str(FORMAT_VERSION).encode(),
        b"root": os.fsencode(root),
        b"layout": b"inside" if store is None else b"outside",
        b"chunker": msgpack.packb(chunker.PARAMS),
        b"compression": str(level).encode(),
        b"created": str(time.time_ns()).encode(),
    }


def existing_store(root: str | None, store: str | None) -> str:
    """The store directory ``Store.open`` opens: ``store``, or the store inside ``root``."""
    if store is None:
        if root is None:
            raise UsageError("Store.open needs a root or a store directory")
        store_dir = os.path.join(os.path.abspath(root), STORE_DIRNAME)
        if not lmdb_generations.is_store(store_dir):
            raise StoreNotFoundError(f"no store in {os.path.abspath(root)} (run 'snapstore init' there)")
        return store_dir
    store_dir = os.path.abspath(store)
    if not lmdb_generations.is_store(store_dir):
        raise StoreNotFoundError(f"no store at {store_dir}")
    return store_dir


class OpenedStore(NamedTuple):
    """What an opened store's meta table says the facade needs."""

    tree: str
    level: int
    meta: dict[bytes, bytes]


def read(backend: Backend, store_dir: str, root: str | None, named: bool) -> OpenedStore:
    """The tree and compression level of the store open in ``backend``; refuses a store of
    another format or chunker, and, when both ``root`` and the store were ``named``, a root that
    is not the store's tree."""
    meta = read_meta(backend)
    tree = os.path.dirname(store_dir) if meta.get(b"layout") == b"inside" else os.fsdecode(meta.get(b"root", b""))
    if root is not None and named and os.path.realpath(root) != os.path.realpath(tree):
        raise StoreNotFoundError(not_this_tree(store_dir, tree, root))
    try:
        level = int(meta.get(b"compression", b"3"))
        if not 1 <= level <= 22:  # what init accepts; zstd raises ValueError past 22
            raise ValueError(level)
    except ValueError:
        raise CorruptError("the store's meta 'compression' is damaged") from None
    return OpenedStore(tree, level, meta)


def read_meta(backend: Backend) -> dict[bytes, bytes]:
    """The meta table, once its format and chunker parameters are known to be this version's."""
    with backend.read() as view:
        meta = dict(view.items("meta"))
    fmt = meta.get(b"format")
    if fmt is None:
        raise CorruptError("this is not a snapstore store (no format version)")
    if fmt not in [str(v).encode() for v in READABLE_FORMATS]:
        raise FormatVersionError(
            f"the store has format version {fmt.decode(errors='replace')}; this snapstore "
            f"reads versions {', '.join(map(str, READABLE_FORMATS))} (upgrade snapstore)"
        )
    try:
        params = msgpack.unpackb(meta.get(b"chunker", b"\xc0"), strict_map_key=False)
    except (ValueError, msgpack.UnpackException):
        params = None
    if params != chunker.PARAMS:
        raise FormatVersionError("the store was written with other chunker parameters")
    return meta


def locate(start: str, store: str | None) -> str:
    """The store directory ``Store.find`` opens: ``store`` as named, else the nearest store of
    this user at or above ``start`` (:mod:`snapstore.storage.discovery`)."""
    if store is not None:
        return os.path.abspath(store)
    found, why = discovery.search(start)
    if found is not None:
        return found
    if "another user" in why:
        raise UnsafePathError(why)
    raise StoreNotFoundError(
        f"no store in {os.path.abspath(start)} or any parent"
        + (f" ({why})" if why else "")
        + " (run 'snapstore init' in the tree's top directory; a store kept outside the tree "
        "is named with --store DIR or SNAPSTORE_STORE=DIR)"
    )


def not_this_tree(store_dir: str, root: str, asked: str) -> str:
    """The error of a command run outside the store's tree, with the way to re-point it."""
    return (
        f"the store {store_dir} belongs to the tree {root}, not to {os.path.abspath(asked)}: run "
        f"the command in {root}, or, if the tree was moved or copied, re-point the store with "
        f"'snapstore --store {store_dir} relocate {os.path.abspath(asked)}'"
    )


def relocatable(backend: Backend, store_dir: str | None, new_root: str) -> str:
    """The absolute ``new_root`` a store kept outside its tree may be re-pointed at (refuses an
    in-memory store, a store inside its tree, which moves with it, and a root that is no
    directory)."""
    new = os.path.abspath(new_root)
    if not os.path.isdir(new):
        raise TreeIOError(f"{new} is not a directory")
    if store_dir is None:
        raise UsageError("an in-memory store has no tree to re-point")
    with backend.read() as view:
        layout = view.get("meta", b"layout")
    if layout == b"inside":
        raise UsageError(f"the store {store_dir} lives inside its tree and moves with it")
    return new


def relocate(backend: Backend, new_root: str) -> None:
    """Record ``new_root`` as the store's tree and clear the stat cache (it describes the old
    tree's inodes), durably; the writer lock is the caller's."""
    with backend.read() as view:
        stale = [k for k, _ in view.items("statcache")]
    with backend.write() as batch:
        batch.put("meta", b"root", os.fsencode(new_root))
        for key in stale:
            batch.delete("statcache", key)
    backend.sync()


def durability_of(asked: str | None, meta: dict[bytes, bytes]) -> str:
    """The durability setting a Store follows: ``asked``, else the store's config, else the
    default (UsageError for an unknown ``asked``, CorruptError for a damaged stored value)."""
    from snapstore.storage import lmdb_durability

    if asked is not None:
        try:
            return lmdb_durability.check(asked)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    raw = meta.get(lmdb_durability.CONFIG_KEY)
    if raw is None:
        return lmdb_durability.DEFAULT
    try:
        return lmdb_durability.check(raw.decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        raise CorruptError("the store's config 'storage.durability' is damaged") from None
