"""The snapshot stage's phases, in order (the package's docstring draws them); each phase is
a function of its own module, and :func:`take` runs them under the caller's writer lock."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from snapstore.ops.context import Keys, StageContext
from snapstore.ops.snapshot import commit, counts, encode, incremental, read, walk
from snapstore.ops.snapshot.ordered import Ordered, order
from snapstore.ops.snapshot.read import Progress
from snapstore.ops.snapshot.result import SnapshotResult
from snapstore.ops.snapshot.write import release_memory
from snapstore.records.checkpoint import SAFETY, USER, seq_key
from snapstore.tree import scan


def take(
    ctx: StageContext,
    *,
    message: str = "",
    task: str | None = None,
    tags: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    messages: Any = None,
    kind: str = USER,
    skip_unchanged: bool = False,
    progress: Progress | None = None,
    workers: int | None = None,
) -> tuple[bytes, bytes, SnapshotResult]:
    """Snapshot ``ctx``'s tree; returns ``(checkpoint id, packed record, SnapshotResult)``.

    The caller holds the writer lock.  With ``skip_unchanged`` and a tree (and conversation)
    identical to the parent's, nothing is written and the parent's id and record are returned
    (``result.reused``).
    """
    args = (ctx, message, task, tags, metadata, messages, kind, skip_unchanged, progress, workers)
    with _cyclic_gc_paused():
        try:
            try:
                return _take(*args)
            except incremental.Rewalk:  # (rare: a file newly mapped changed beyond a patch)
                incremental.forget(ctx)
                return _take(*args)
        except BaseException:
            incremental.forget(ctx)
            raise
        finally:
            if ctx.watcher is not None:
                ctx.watcher.drop_scan()  # (never left for a later checkpoint)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    # A snapshot allocates many small tuples and no cycles: Python's cyclic collector would
    # walk them again and again, a large share of an in-process snapshot.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _take(
    ctx: StageContext,
    message: str,
    task: str | None,
    tags: list[str] | None,
    metadata: dict[str, Any] | None,
    messages: Any,
    kind: str,
    skip_unchanged: bool,
    progress: Progress | None,
    workers: int | None,
) -> tuple[bytes, bytes, SnapshotResult]:
    """:func:`take`'s phases, in order (each one is its module's)."""
    incremental.begin_scan(ctx)  # (beside reading the store's keys, the events and the patch)
    start = walk.Start(ctx.backend)
    report = scan.ScanReport()
    # Only a safety checkpoint's caller (restore) and a watching context's next snapshot use
    # the walk's records (result.found).
    tree = walk.inputs(ctx, start.keys, report, keep_found=kind == SAFETY)
    result = SnapshotResult(entries=[], manifest_id=b"", conversation_id=None, report=report, found=tree.found)
    reads = read.read_changed(
        ctx, tree.to_read, tree.entries, result,
        packed=start.packed, cached=start.cached, progress=progress, workers=workers, parent=start.parent,
    )  # fmt: skip
    late = walk.settle(ctx, tree)  # (the mapping scan, run beside the patch and the reads)
    if late:
        reads.add(read.read_changed(ctx, late, tree.entries, result, packed=start.packed, cached=start.cached,
                                    progress=None, workers=workers, parent=start.parent))
    memo = ctx.manifest_memo
    ordered = order(memo.ordered, memo.entries, tree.entries, tree.touched, tree.base)
    result.entries, result.totals = ordered.entries, (ordered.files, ordered.size)
    records = encode.Records(reads.kept)
    kept_mid = memo.mid  # (the manifest ``ordered.span`` is relative to; manifest_of clears it)
    mid, mrecord, fingerprint = encode.manifest_of(
        ctx, start.parent, tree.entries, result.entries, records, ordered.same, ordered.span
    )  # fmt: skip
    result.manifest_id = mid
    counts.count(
        result, ctx.backend, ctx.manifest_memo.codec, start.parent, mrecord, records.plain, (kept_mid, ordered.span)
    )  # fmt: skip
    if messages is not None:
        result.conversation_id = encode.conversation_of(ctx, messages, task, records, start.packed, report.warnings)
    encode.compress_lacking(
        records, ctx, start.packed, (mid, mrecord, start.parent.manifest) if start.parent else None,
        heal=result.parent_damaged,
    )  # fmt: skip
    if skip_unchanged and commit.unchanged(start, result, messages is not None):
        assert start.parent is not None
        commit.reuse(ctx, tree, reads, records)
        _remember(ctx, tree, reads, mid, start.keys, ordered)
        result.reused = True
        return bytes.fromhex(start.parent.id), start.parent_record, result
    cp_id, packed = commit.commit(
        ctx, start, tree, reads, records, result, fingerprint,
        message=message, task=task, tags=tags, kind=kind, metadata=metadata,
    )  # fmt: skip
    _remember(ctx, tree, reads, mid, (seq_key(start.seq), start.keys[1]), ordered)
    # An unchanged tree mapped little: spare the madvise pass.  (A pooled read emptied
    # ``to_read``: its writer thread released memory after each commit.)
    if tree.to_read or mrecord is not None:
        release_memory(ctx.backend, trim_heap=_whole(ctx, tree))
    return cp_id, packed, result


def _whole(ctx: StageContext, tree: walk.Inputs) -> bool:
    """Whether this snapshot did work per file (a walk, or the manifest codec's first, whole
    encoding): then the heap it freed is handed back (malloc_trim), or a watching Store's RSS
    stays at that peak; after an O(changed) one, trimming costs more than it gives back."""
    codec = ctx.manifest_memo.codec
    return tree.touched is None or (codec is not None and codec.changed is None)


def _remember(ctx: StageContext, tree: walk.Inputs, reads: read.Reads, mid: bytes, keys: Keys, ordered: Ordered) -> None:
    """Keep what this snapshot recorded for the next one: the manifest memo and, when
    watching, the tree state (keyed by the newest log and oplog keys it leaves)."""
    memo = ctx.manifest_memo
    memo.entries, memo.mid, memo.ordered = tree.entries, mid, ordered
    incremental.remember(ctx, tree.walked, tree.entries, keys)
