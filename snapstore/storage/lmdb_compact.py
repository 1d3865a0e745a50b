"""Compaction of an LMDB store: a new generation without free pages, its pages full.

LMDB never shrinks its file; pages freed by gc are reused but the size stays.  :func:`compact`
(the caller holds the store's writer lock) writes a compact copy of the current generation into
a new directory ``gen-N+1/``, fsyncs it, checks that it opens and reads, and then names it in
``CURRENT`` (written to ``CURRENT.tmp``, fsynced, renamed, the
directory fsynced).  Every process follows CURRENT at its next transaction (see
:mod:`snapstore.storage.lmdb_generations`); old generations are deleted once no process has
them open.  Nothing here depends on LMDB's file layout.

**Full pages.**  ``env.copy(compact=True)`` keeps each B-tree page as full as it was, and keys
inserted in random order (chunk ids are hashes) leave pages about half full: on a 400-file
history the ``chunks`` table took 225 KB of pages for 118 KB of keys and values.  So the copy is
written table by table, in key order, with LMDB's append mode, which splits a page only when it
is full (:func:`_copy_filled`): the same records in ~60% of the pages.

Crash safety: until the rename of CURRENT, the old generation is the store and the new directory
is garbage (removed by the next writer); after it, the new generation is complete on disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any

import lmdb

from snapstore.errors import TreeIOError, no_space
from snapstore.storage.backend import TABLES
from snapstore.storage.lmdb_env import fitting_map_size, translate
from snapstore.storage.lmdb_generations import CURRENT, Generations, gen_path


def compact(gens: Generations) -> tuple[int, int]:
    """Write and switch to a compact new generation; returns ``(size before, size after)``."""
    gens.follow()
    gens.remove_old()
    shared = gens.current
    before = os.path.getsize(os.path.join(shared.path, "data.mdb"))
    name = gens.next_name()
    new_dir = gen_path(gens.store_dir, name)
    os.mkdir(new_dir, 0o700)
    with shared.write_lock:
        try:
            _write_copy(shared, new_dir, name, before)
        except BaseException as exc:
            # Judged while the copy still takes its space (a full disk is told by what is free),
            # then the copy is removed at once: a failed compaction leaves the disk as it found it.
            error = _failure(exc, gens.store_dir)
            shutil.rmtree(new_dir, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(gens.store_dir, CURRENT + ".tmp"))
            if error is None:
                raise
            raise error from exc
        os.rename(os.path.join(gens.store_dir, CURRENT + ".tmp"), os.path.join(gens.store_dir, CURRENT))
        _fsync(gens.store_dir)
    gens.follow()
    gens.remove_old()
    return before, os.path.getsize(os.path.join(new_dir, "data.mdb"))


def _write_copy(shared: Any, new_dir: str, name: str, before: int) -> None:
    """The compact copy in ``new_dir``, checked and synced, and ``CURRENT.tmp`` naming it (the
    caller renames it: the one step that switches)."""
    txnid = shared.last_txnid()
    _copy_filled(shared.env, shared.dbs, new_dir, before)
    _fsync(os.path.join(new_dir, "data.mdb"))
    _check_copy(new_dir)
    _fsync(new_dir)
    if shared.last_txnid() != txnid:
        raise TreeIOError("the store changed during compaction; nothing was replaced")
    tmp = os.path.join(os.path.dirname(new_dir), CURRENT + ".tmp")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, f"{name}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _failure(exc: BaseException, store_dir: str) -> Exception | None:
    """The snapstore error for a failed compaction (None: raise ``exc`` as it is)."""
    if isinstance(exc, lmdb.Error):
        return translate(exc, "cannot compact the store", store_dir)
    if isinstance(exc, OSError):
        return no_space(exc, store_dir) or TreeIOError(f"cannot compact the store: {exc}")
    return None


#: Value bytes written per transaction of the copy (bounds its dirty pages in memory).
COPY_BATCH = 64 << 20


def _copy_filled(src: lmdb.Environment, dbs: dict[str, Any], path: str, size: int) -> None:
    """Every table of ``src`` (as one read snapshot) into a new environment at ``path``,
    each in key order with append mode, so every page but a table's last is full."""
    dst = lmdb.open(
        path,
        subdir=True,
        map_size=fitting_map_size(size + size // 4 + (64 << 20)),
        max_dbs=len(TABLES) + 2,
        metasync=False,
        sync=False,
        create=True,
    )
    try:
        with src.begin(buffers=True) as rtxn:
            for name in TABLES:
                target = dst.open_db(name.encode())
                rows = iter(rtxn.cursor(db=dbs[name]))
                more = True
                while more:
                    more = False
                    with dst.begin(write=True, db=target) as wtxn:
                        cursor = wtxn.cursor(db=target)
                        written = 0
                        for key, value in rows:
                            cursor.put(key, value, append=True)
                            written += len(value)
                            if written >= COPY_BATCH:
                                more = True
                                break
        dst.sync(True)
    finally:
        dst.close()


def _check_copy(path: str) -> None:
    """Open the copy on its own (it gets its own lock file) and read its tables."""
    try:
        env = lmdb.open(path, subdir=True, max_dbs=len(TABLES) + 2, create=False)
    except lmdb.Error as exc:
        raise TreeIOError(f"compaction: the copy does not open ({exc}); nothing was replaced") from exc
    try:
        with env.begin() as txn:
            if txn.get(b"meta") is None:
                raise TreeIOError("compaction: the copy has no tables; nothing was replaced")
    finally:
        env.close()


def _fsync(path: str) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    if os.path.isdir(path):
        flags |= os.O_DIRECTORY
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
