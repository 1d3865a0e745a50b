"""The snapshot stage's phases, in order (the package's docstring draws them); each phase is
a function of its own module, and :func:`take` runs them under the caller's writer lock."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from snapstore.ops.context import Keys, StageContext, TreeState
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
    with _cyclic_gc_paused():
        gathered = _gathered(ctx, kind, progress, workers)
        try:
            return _write(ctx, gathered, message, task, tags, metadata, messages, kind, skip_unchanged)
        except BaseException:
            incremental.forget(ctx)
            raise


class Later:
    """A snapshot whose tree is read and whose record is not yet written (:func:`take_later`).

    It holds the watcher's state and the manifest memo the gather patched (the context keeps
    neither meanwhile): a snapshot taken in between (an ``after_restore`` hook's) walks, and
    a record never written leaves nothing behind that a later snapshot could take for the
    tree's state."""

    __slots__ = ("_ctx", "_gathered", "_message", "_kind", "_skip", "_state", "_memo")

    def __init__(self, ctx: StageContext, gathered: _Gathered, message: str, kind: str, skip: bool) -> None:
        self._ctx, self._gathered, self._message, self._kind, self._skip = ctx, gathered, message, kind, skip
        memo = ctx.manifest_memo
        self._state: TreeState | None = ctx.tree_state
        self._memo: tuple[Any, Any, bytes | None] | None = (memo.entries, memo.ordered, memo.mid)
        ctx.tree_state = None
        memo.entries = memo.ordered = memo.mid = None

    def write(self) -> tuple[bytes, bytes, SnapshotResult] | None:
        """Record it (the writer lock held since the gather); None, recording nothing, when
        this context took another snapshot since or the store has another record (their
        tree is newer)."""
        ctx, memo, state, kept = self._ctx, self._ctx.manifest_memo, self._state, self._memo
        self.drop()
        if kept is None or self._overtaken():
            return None
        ctx.tree_state = state
        memo.entries, memo.ordered, memo.mid = kept
        with _cyclic_gc_paused():
            try:
                return _write(ctx, self._gathered, self._message, None, None, None, None, self._kind, self._skip)
            except BaseException:
                incremental.forget(ctx)
                raise

    def drop(self) -> None:
        """Record nothing (the next snapshot walks, unless one took the tree since)."""
        self._state = self._memo = None

    def _overtaken(self) -> bool:
        """Whether this context took a snapshot since the gather (it kept a state or a memo
        again), or the store has a record the gather did not see."""
        ctx = self._ctx
        if ctx.tree_state is not None or ctx.manifest_memo.mid is not None:
            return True
        return walk.Start(ctx.backend).keys != self._gathered.start.keys


def take_later(ctx: StageContext, *, message: str = "", kind: str = USER, skip_unchanged: bool = False) -> Later:
    """:func:`take` in two steps: the tree is read now (the watcher's events drained, changed
    files read and their chunks stored), the checkpoint written by :meth:`Later.write`.  The
    service answers in between (a restore's record of the tree it left): what changes in the
    tree once the answer is out is not in this record, and the next snapshot finds it.  The
    caller holds the writer lock from now until the write (the chunks read now are named by
    nothing until then: a gc in between would sweep them)."""
    with _cyclic_gc_paused():
        return Later(ctx, _gathered(ctx, kind, None, None), message, kind, skip_unchanged)


def _gathered(ctx: StageContext, kind: str, progress: Progress | None, workers: int | None) -> _Gathered:
    """:func:`_gather`, once more by a full walk when the mapping scan found what a patch
    cannot take; the state dropped on any failure."""
    try:
        try:
            return _gather(ctx, kind, progress, workers)
        except incremental.Rewalk:  # (rare: a file newly mapped changed beyond a patch)
            incremental.forget(ctx)
            return _gather(ctx, kind, progress, workers)
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


class _Gathered:
    """The tree as a snapshot read it: the store's state then, the inputs, the reads."""

    __slots__ = ("start", "tree", "result", "reads")

    def __init__(self, start: walk.Start, tree: walk.Inputs, result: SnapshotResult, reads: read.Reads) -> None:
        self.start, self.tree, self.result, self.reads = start, tree, result, reads


def _gather(ctx: StageContext, kind: str, progress: Progress | None, workers: int | None) -> _Gathered:
    """The snapshot's first phases: the store's keys, the walk or the watcher's patch, the
    reads of what changed (their chunks stored), the mapping scan's late finds."""
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
    return _Gathered(start, tree, result, reads)


def _write(
    ctx: StageContext,
    gathered: _Gathered,
    message: str,
    task: str | None,
    tags: list[str] | None,
    metadata: dict[str, Any] | None,
    messages: Any,
    kind: str,
    skip_unchanged: bool,
) -> tuple[bytes, bytes, SnapshotResult]:
    """The snapshot's last phases: the order, the manifest, the counts, the conversation, the
    compression, the commit (or the parent's reuse), the memo."""
    start, tree, result, reads = gathered.start, gathered.tree, gathered.result, gathered.reads
    report = result.report
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
