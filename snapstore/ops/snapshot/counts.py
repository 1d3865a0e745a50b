"""What a checkpoint reports of itself: the paths that changed against its parent (counted as
added, modified, deleted, and kept for the ``paths`` index), the bytes it added to the store,
and the ``stats`` its record keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snapstore.ops.snapshot.result import SnapshotResult
from snapstore.records.checkpoint import Checkpoint
from snapstore.records.manifest import EXEC, Entry
from snapstore.records.manifest_codec import Codec, Span
from snapstore.storage.backend import Backend
from snapstore.storage.packs import Op


def count(
    result: SnapshotResult,
    backend: Backend,
    codec: Codec | None,
    parent: Checkpoint | None,
    record: bytes | None,
    plain: dict[bytes, bytes],
    span: tuple[bytes | None, Span | None] = (None, None),
) -> None:
    """Count what changed against the parent, for a new manifest ``result.manifest_id``.

    When the context's manifest ``codec`` re-encoded it from the parent's manifest, it knows
    which entries may differ: nothing is decoded (and it handed over only the chunks it made
    afresh: the parent's are stored, and the writer lock keeps gc out).  So do the entries when
    they were patched from the parent manifest's (``span``: that manifest's id and the runs
    ops.snapshot.ordered replaced, as a CLI process's record after a restore has them).
    Otherwise :func:`against_parent` decodes what differs."""
    mid = result.manifest_id
    since = None
    if codec is not None and parent is not None and mid != parent.manifest:
        since = codec.changes_since(parent.manifest)
    if since is None and parent is not None and mid != parent.manifest and span[0] == parent.manifest:
        since = _from_runs(span[1], result.entries)
    if since is None:
        against_parent(result, backend, parent, mid, plain, record)
        return
    add(result, *since)


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

    from snapstore.errors import CorruptError
    from snapstore.ops import diff  # only for a changed manifest

    try:
        old, new = diff.manifest_difference(diff.unstored(get, mid, record, plain), parent.manifest, mid)
    except CorruptError as e:
        # The parent's manifest cannot be read where it differs: the checkpoint is still
        # taken (an agent's next checkpoint must not fail on old damage), counted against an
        # empty tree, every path in the path index (a superset never hides a change), and its
        # manifest stored readable (encode.compress_lacking, ``heal``).
        result.parent_damaged = True
        result.added = len(result.entries)
        result.changed = [e.path for e in result.entries]
        result.report.warn(
            f"the parent checkpoint {parent.short_id}'s manifest is damaged ({e}): this checkpoint's"
            " changes are counted against an empty tree; `snapstore verify` lists the damage"
        )
        return
    add(result, old, new)


def _from_runs(span: Span | None, entries: Sequence[Entry]) -> tuple[dict[bytes, Entry], dict[bytes, Entry]] | None:
    """The entries that may differ, by path, from ``span``'s runs (None without a span)."""
    if span is None:
        return None
    kept, runs = span
    old: dict[bytes, Entry] = {}
    new: dict[bytes, Entry] = {}
    for olo, ohi, nlo, nhi in runs:
        old.update((e.path, e) for e in kept[olo:ohi])
        new.update((e.path, e) for e in entries[nlo:nhi])
    return old, new


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


def stats(result: SnapshotResult) -> dict[str, Any]:
    """The ``stats`` of the checkpoint's record (``new_bytes`` is added once known)."""
    if result.totals is not None:
        files, size = result.totals
    else:
        sizes = [e[3] for e in result.entries if e[1] <= EXEC]  # files (FILE, EXEC): one pass, no property calls
        files, size = len(sizes), sum(sizes)
    report = result.report
    return {
        "files": files,
        "bytes": size,
        "added": result.added,
        "modified": result.modified,
        "deleted": result.deleted,
        "files_read": result.files_read,
        "bytes_read": result.bytes_read,
        "skipped": {
            "special": report.special,
            "vanished": report.vanished,
            "unreadable": report.unreadable,
        },
    }
