"""Comparing two manifests: what was added, modified, deleted, or changed kind or mode."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from snapstore.records import manifest
from snapstore.records.manifest import DIR, EXEC, FILE, KIND_NAMES, UNREADABLE, Entry, exact_mode
from snapstore.storage import objects
from snapstore.tree.paths import display, to_json

ADDED = "A"
MODIFIED = "M"  # content changed, or (exact modes on both sides) the permission bits
DELETED = "D"
TYPE_CHANGED = "T"
MODE_CHANGED = "X"  # exec bit flipped, content unchanged

#: Reads an entry's content (from the store or the working tree).
Loader = Callable[[Entry], bytes]
#: ``get(table, key)``: one value of the store, or None.
Getter = Callable[[str, bytes], bytes | None]


def mode_change(old: Entry | None, new: Entry | None) -> str | None:
    """``"mode 100644 -> 100600"`` when both sides record exact, different permission bits."""
    if old is None or new is None:
        return None
    a, b = exact_mode(old.mode), exact_mode(new.mode)
    if a is None or b is None or a == b:
        return None
    return f"mode {old.mode:o} -> {new.mode:o}"


class Change:
    """One path that differs; ``old``/``new`` are the entries on each side (None if absent).

    Equal when status, path and both entries are (the content loaders are not compared).
    """

    # (A plain class, not a dataclass: a snapshot counts its changes with this module, and
    # importing dataclasses would slow every CLI process's start.)
    __slots__ = ("status", "path", "old", "new", "_old_loader", "_new_loader")

    def __init__(
        self,
        status: str,
        path: bytes,
        old: Entry | None,
        new: Entry | None,
        _old_loader: Loader | None = None,
        _new_loader: Loader | None = None,
    ) -> None:
        self.status = status
        self.path = path
        self.old = old
        self.new = new
        self._old_loader = _old_loader
        self._new_loader = _new_loader

    def _key(self) -> tuple[str, bytes, Entry | None, Entry | None]:
        return (self.status, self.path, self.old, self.new)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Change(status={self.status!r}, path={self.path!r}, old={self.old!r}, new={self.new!r})"

    def old_bytes(self) -> bytes | None:
        """The old content (files only; None when the old side is absent or not a file)."""
        if self.old is None or not self.old.is_file or self._old_loader is None:
            return None
        return self._old_loader(self.old)

    def new_bytes(self) -> bytes | None:
        """The new content (files only; None when the new side is absent or not a file)."""
        if self.new is None or not self.new.is_file or self._new_loader is None:
            return None
        return self._new_loader(self.new)

    @property
    def display_path(self) -> str:
        """The path, printable."""
        return display(self.path)

    @property
    def description(self) -> str | None:
        """What changed besides the content, e.g. ``"mode 100644 -> 100600"`` (or None)."""
        return mode_change(self.old, self.new)

    def to_json(self) -> dict[str, Any]:
        """The change as JSON-ready data (paths lossless, content ids in hex)."""

        def side(e: Entry | None) -> dict[str, Any] | None:
            if e is None:
                return None
            return {
                "kind": KIND_NAMES[e.kind],
                "size": e.size,
                "mode": e.mode,
                "content": e.ref.hex() if e.is_file else None,
                "target": to_json(e.ref) if e.kind not in (FILE, EXEC, DIR, UNREADABLE) else None,
            }

        return {
            "status": self.status,
            "path": to_json(self.path),
            "old": side(self.old),
            "new": side(self.new),
            "description": self.description,
        }


def compare(old: dict[bytes, Entry], new: dict[bytes, Entry]) -> list[Change]:
    """Changes from ``old`` to ``new``, sorted by path.  Unreadable entries never differ.

    Same kind and content with different exact permission bits is a modification (``M``, its
    ``description`` names the modes); an exec-bit flip with the same content is ``X``.
    """
    changes = []
    # An entry equal on both sides is no change whatever its kind: drop those first (one tuple
    # comparison each, in C) and sort only the rest (a snapshot's counts compare the entries
    # of every changed manifest chunk: ~7k for 100 files changed in the stdlib).
    for path in sorted([p for p in old.keys() | new.keys() if old.get(p) != new.get(p)]):
        a, b = old.get(path), new.get(path)
        if a is not None and b is not None:
            if a.kind == UNREADABLE or b.kind == UNREADABLE:
                continue
            if a.kind == b.kind:
                if a.ref != b.ref or (a.mode != b.mode and mode_change(a, b) is not None):
                    changes.append(Change(MODIFIED, path, a, b))
            elif a.is_file and b.is_file:
                status = MODE_CHANGED if a.ref == b.ref else MODIFIED
                changes.append(Change(status, path, a, b))
            else:
                changes.append(Change(TYPE_CHANGED, path, a, b))
        elif a is None:
            changes.append(Change(ADDED, path, None, b))
        else:
            changes.append(Change(DELETED, path, a, None))
    return changes


def with_loaders(changes: list[Change], old_loader: Loader | None, new_loader: Loader | None) -> list[Change]:
    """The changes with content loaders for each side."""
    return [Change(c.status, c.path, c.old, c.new, old_loader, new_loader) for c in changes]


def manifest_difference(get: Getter, mid_a: bytes, mid_b: bytes) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
    """The entries of two manifests that may differ: a path on neither side did not change.

    Manifest chunks hold whole entries (chunker.cut_records), so a chunk present in both
    manifests holds entries identical on both sides: it is skipped without being decoded.  In
    the other chunks, a record equal on both sides is left out too, never made an entry
    (:func:`manifest.difference_of_chunks`).
    """
    if mid_a == mid_b:
        return {}, {}
    leaves_a = objects.leaf_ids(get, mid_a)
    leaves_b = objects.leaf_ids(get, mid_b)
    shared = set(leaves_a) & set(leaves_b)

    def chunks(leaves: list[bytes]) -> Iterator[bytes]:
        return (objects.load_chunk(get, c) for c in leaves if c not in shared)

    return manifest.difference_of_chunks(mid_a, chunks(leaves_a), mid_b, chunks(leaves_b))


def unstored(get: Getter, mid: bytes, record: bytes | None, plain: dict[bytes, bytes]) -> Getter:
    """``get``, serving also a manifest that is encoded but not stored: its stream ``record``
    and its chunks' ``plain`` bytes (as write_manifest gave them with ``encode=False``)."""

    def read(table: str, key: bytes) -> bytes | None:
        if table == "streams" and key == mid:
            return record
        if table == "chunks" and key in plain:
            return bytes((objects.FLAG_RAW,)) + plain[key]
        return get(table, key)

    return read


def difference_from_tree(
    get: Getter, mid: bytes, tree: dict[bytes, Entry]
) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
    """:func:`manifest_difference` of manifest ``mid`` and the entries ``tree`` (the working
    tree): the tree's entries are encoded as a snapshot would store them, in memory, so only the
    manifest chunks that differ are decoded (an unchanged 7,700-entry manifest is not)."""
    plain: dict[bytes, bytes] = {}
    ordered = [tree[p] for p in sorted(tree)]
    tree_mid, _, record = manifest.write_manifest(ordered, plain.__setitem__, encode=False)
    return manifest_difference(unstored(get, tree_mid, record, plain), mid, tree_mid)

