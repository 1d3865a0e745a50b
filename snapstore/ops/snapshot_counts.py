"""What a checkpoint reports of itself: the paths that changed against its parent (counted as
added, modified, deleted, and kept for the ``paths`` index) and the bytes it added to the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snapstore.records.checkpoint import Checkpoint
from snapstore.records.manifest import Entry
from snapstore.storage.backend import Backend

if TYPE_CHECKING:
    from snapstore.ops.snapshot import SnapshotResult

Op = tuple[str, bytes, bytes]


def against_parent(
    result: SnapshotResult,
    backend: Backend,
    parent: Checkpoint | None,
    mid: bytes,
    plain: dict[bytes, bytes],
    record: bytes | None,
) -> None:
    """Count what changed against the parent, decoding only the manifest chunks that differ.

    The new manifest is not stored yet: its ``record`` and chunks (``plain``) are read from
    memory."""
    if parent is None:
        result.added = len(result.entries)
        return
    if parent.manifest == mid:
        return

    def get(table: str, key: bytes) -> bytes | None:
        with backend.read() as view:
            value: bytes | None = view.get(table, key)
            return value

    from snapstore.ops import diff  # only for a changed manifest

    add(result, *diff.manifest_difference(diff.unstored(get, mid, record, plain), parent.manifest, mid))


def add(result: SnapshotResult, old: dict[bytes, Entry], new: dict[bytes, Entry]) -> None:
    """Add the changes between the entries that may differ to the result's counts and paths."""
    from snapstore.ops import diff

    for c in diff.compare(old, new):
        result.changed.append(c.path)
        if c.status == diff.ADDED:
            result.added += 1
        elif c.status == diff.DELETED:
            result.deleted += 1
        else:
            result.modified += 1


def new_bytes(backend: Backend, objects_: list[Op]) -> int:
    """Bytes that storing ``objects_`` will add (the caller holds the writer lock)."""
    unique = {(t, k): v for t, k, v in objects_}
    keys = list(unique)
    total = 0
    for table in {t for t, _ in keys}:
        ks = [k for t, k in keys if t == table]
        for k, present in zip(ks, backend.has_many(table, ks)):
            if not present:
                total += len(unique[(table, k)])
    return total
