"""Garbage collection: mark what a checkpoint reaches, sweep the rest, optionally compact.

**Mark.** Roots are every checkpoint record (not just the log: a record is what the store
keeps); from each: its manifest stream, the content stream of every file entry, and its
conversation (its chain of delta records and their chunks).  A pending restore journal's
``target`` and ``before`` are checkpoints too, and are marked even if a record was somehow
dropped from the log.  Manifest chunks hold whole entries, so each distinct manifest chunk is
decoded once however many checkpoints share it; each distinct stream's index tree is walked
once.  A record, index node or manifest chunk that cannot be read stops gc before anything is
removed (``CorruptError``): what it references is unknown, so nothing can be proven garbage.

**Sweep**, in bounded batches (:data:`BATCH` keys per LMDB transaction: the dirty pages of a
write transaction live in memory), in this order:

1. stat-cache entries whose stream is not live (else a later snapshot would reuse a stream id
   whose chunks are gone: the stat cache is the one place that names streams without a
   checkpoint);
2. ``streams`` records and conversation records that are not live;
3. chunks that are not live.

Everything removed is unreachable, so a crash between any two batches leaves a valid store
(some garbage left for the next gc).  The caller holds the writer lock for the whole run, so no
snapshot can be writing chunks that the mark did not see (a snapshot checks chunk existence
under the same lock and rewrites whatever is missing).

**Compaction** (``compact=True``): LMDB never shrinks its file; the free pages are reused but
the size stays.  ``Backend.compact`` rewrites it as a new store generation (see
:mod:`snapstore.storage.lmdb_compact` and :mod:`snapstore.storage.lmdb_generations`): a crash
leaves either generation whole, and every process follows the new one at its next transaction.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import zstandard

from snapstore.errors import CorruptError
from snapstore.ops import consolidate, maintenance_conversations, repack
from snapstore.records import conversation, manifest
from snapstore.records.checkpoint import references
from snapstore.storage import entries, objects
from snapstore.storage.backend import Backend, ReadView
from snapstore.storage.objects import Getter
from snapstore.tree import statcache

BATCH = 2048


@dataclass
class GcReport:
    """What gc removed (or would remove, with ``dry_run``)."""

    dry_run: bool = False
    checkpoints: int = 0  # checkpoints marked from
    chunks: int = 0  # chunks in the store before the sweep
    chunks_removed: int = 0
    streams_removed: int = 0
    conversations_removed: int = 0
    statcache_removed: int = 0
    conversations_gathered: int = 0  # conversation records rewritten in the compact form
    bytes_removed: int = 0  # logical (plain) bytes of the removed chunks
    stored_bytes_removed: int = 0  # their stored (compressed) bytes
    packs: repack.RepackReport = field(default_factory=lambda: repack.RepackReport())
    consolidated: consolidate.ConsolidateReport = field(
        default_factory=lambda: consolidate.ConsolidateReport()
    )
    compacted: bool = False
    size_before: int = 0  # data.mdb size before (and after) compaction
    size_after: int = 0

    @property
    def disk_freed(self) -> int:
        return max(self.size_before - self.size_after, 0) if self.compacted else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "checkpoints": self.checkpoints,
            "chunks": self.chunks,
            "chunks_removed": self.chunks_removed,
            "streams_removed": self.streams_removed,
            "conversations_removed": self.conversations_removed,
            "statcache_removed": self.statcache_removed,
            "conversations_gathered": self.conversations_gathered,
            "bytes_removed": self.bytes_removed,
            "stored_bytes_removed": self.stored_bytes_removed,
            "packs": self.packs.to_json(),
            "consolidated": self.consolidated.to_json(),
            "compacted": self.compacted,
            "size_before": self.size_before,
            "size_after": self.size_after,
            "disk_freed": self.disk_freed,
        }


# -- chunk sizes (shared with stats) -----------------------------------------------------------


def plain_size(stored_len: int, head: bytes) -> int:
    """The plain size of a stored chunk value from its length and first bytes."""
    if not head:
        return 0
    if head[0] == objects.FLAG_ZSTD:
        try:
            size = zstandard.frame_content_size(head[1:])
        except zstandard.ZstdError:
            return 0
        return max(size, 0)
    return stored_len - 1


def chunk_sizes(backend: Backend) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(chunk id, stored bytes, plain bytes)`` for every chunk.

    A format-2 chunk's stored bytes are 0: they are its pack's, counted per pack.
    """
    for key, stored, head in backend.value_sizes("chunks"):
        if head[:1] == bytes((entries.FLAG_PACKED,)):
            yield key, 0, entries.entry_size(head)
        else:
            yield key, stored, plain_size(stored, head)


# -- mark --------------------------------------------------------------------------------------


class Marker:
    """The live sets: chunk ids, stream records, conversation records, whole streams."""

    def __init__(self, get: Getter) -> None:
        self.get = get
        self.chunks: set[bytes] = set()
        self.streams: set[bytes] = set()  # keys of live `streams` records
        self.conversations: set[bytes] = set()  # keys of live `conversations` records
        self.whole: set[bytes] = set()  # stream ids marked with all they reference
        self._walked: dict[bytes, int] = {}  # index nodes already walked (shared by all streams)
        self._manifest_leaves: set[bytes] = set()
        self.checkpoints = 0

    def stream(self, sid: bytes, *, distinct: bool = False) -> None:
        """Mark stream ``sid``: its record, its index nodes and its data chunks."""
        if sid in self.whole:
            return
        for nid, _, _ in objects.walk_stream(self.get, sid, walked=self._walked, distinct=distinct):
            self.chunks.add(nid)
        if self.get("streams", sid) is not None:
            self.streams.add(sid)
        self.whole.add(sid)

    def manifest(self, mid: bytes) -> None:
        """Mark a manifest stream and the content of every file entry it lists."""
        self.stream(mid, distinct=True)
        for leaf in objects.leaf_ids(self.get, mid):
            if leaf in self._manifest_leaves:
                continue
            self._manifest_leaves.add(leaf)
            data = objects.load_chunk(self.get, leaf)
            for e in manifest.iter_entries_of_chunks(mid, [data]):
                if e.is_file:
                    self.stream(e.ref)

    def conversation(self, cid: bytes) -> None:
        """Mark a conversation: its chain of delta records and their chunks.  (Its id may also
        be a stream's, a file holding the same bytes as a one-record conversation: marking that
        stream must not pass for marking the record.)"""
        if cid in self.conversations:
            return
        if self.get("conversations", cid) is not None:
            for rid, record in conversation.segments(self.get, cid):
                self.conversations.add(rid)
                for ref in record["chunks"]:
                    self.chunks.add(ref[0])
        else:  # a conversation stored as a plain stream (older layout)
            self.stream(cid)

    def checkpoint(self, cid: bytes, packed: bytes) -> None:
        # A record with hostile values but readable references (records.schema) still keeps
        # what it reaches; only an unknowable reach stops gc.
        mid, conv = references(cid, packed)
        self.checkpoints += 1
        self.manifest(mid)
        if conv is not None:
            self.conversation(conv)


def mark(view: ReadView) -> Marker:
    """Mark everything the checkpoints reach; raises CorruptError if that cannot be known."""
    m = Marker(view.get)
    try:
        for cid, packed in view.items("checkpoints"):
            m.checkpoint(cid, packed)
    except CorruptError as exc:
        raise CorruptError(
            f"gc stopped before removing anything: the store is damaged ({exc}); "
            "run 'snapstore verify'"
        ) from exc
    return m


# -- sweep -------------------------------------------------------------------------------------


def _delete(backend: Backend, table: str, keys: list[bytes]) -> None:
    for start in range(0, len(keys), BATCH):
        with backend.write() as batch:
            for k in keys[start : start + BATCH]:
                batch.delete(table, k)


@dataclass
class _Dead:
    """What the mark found unreachable, per table (the sweep's work list)."""

    marker: Marker
    statcache: list[bytes]
    streams: list[bytes]
    conversations: list[bytes]
    chunks: list[bytes]


@dataclass(frozen=True)
class _Gather:
    """How the packs are gathered again: repack below a live fraction, or consolidate."""

    repack_below: float
    level: int
    repack_every: bool
    consolidation: str

    def full(self, backend: Backend) -> bool:
        # --repack (every pack recompressed at a level) consolidates every pack at exactly that
        # level, unless consolidation is off (then the repack does, in the old order).
        return self.consolidation != "off" and (
            self.repack_every
            or (self.consolidation == "full" and consolidate.loose_packs(backend)[0] > 0)
        )


def run(
    backend: Backend,
    *,
    compact: bool = False,
    dry_run: bool = False,
    repack_below: float = 0.5,
    level: int = objects.DEFAULT_LEVEL,
    repack_every: bool = False,
    consolidation: str = "full",
) -> GcReport:
    """Mark and sweep (and compact) the store of ``backend``; the caller holds the writer lock.

    ``repack_below``: a pack whose live fraction is below this is rewritten (format 2) at
    ``level``; ``repack_every``: every pack is (to recompress the store at another level).
    ``consolidation``: ``full`` (when any pack is loose, every pack is rewritten in path order:
    :mod:`snapstore.ops.consolidate`), ``loose`` (only the loose packs are) or ``off``.
    """
    report = GcReport(dry_run=dry_run)
    if not dry_run:
        # Before the mark: the chunks of the records rewritten are then swept with the rest.
        report.conversations_gathered = maintenance_conversations.run(backend, level, nullcontext, chunks=True)
    dead = _find_dead(backend, report)
    report.size_before = report.size_after = backend.disk_size()
    how = _Gather(repack_below, level, repack_every, consolidation)
    full = how.full(backend)
    if dry_run:
        _plan_gathering(backend, dead.marker, report, how, full)
        return report
    _sweep(backend, dead, report, how, full)
    sizes = backend.compact() if compact else None
    if sizes is not None:
        # size_before stays the size before gc began (the sweep itself may grow the file).
        report.size_after = sizes[1]
        report.compacted = True
    else:
        report.size_after = backend.disk_size()
    return report


def _find_dead(backend: Backend, report: GcReport) -> _Dead:
    """Mark, then list what no checkpoint reaches (counted into ``report``)."""
    with backend.read() as view:
        marker = mark(view)
        stale_cache = [
            k for k, v in view.items("statcache") if statcache.stream_id(v) not in marker.whole
        ]
        dead_streams = [k for k, _ in view.items("streams") if k not in marker.streams]
        dead_convs = [k for k, _ in view.items("conversations") if k not in marker.conversations]
    report.checkpoints = marker.checkpoints
    dead_chunks: list[bytes] = []
    for key, stored, plain in chunk_sizes(backend):
        report.chunks += 1
        if key not in marker.chunks:
            dead_chunks.append(key)
            report.bytes_removed += plain
            report.stored_bytes_removed += stored
    report.chunks_removed = len(dead_chunks)
    report.streams_removed = len(dead_streams)
    report.conversations_removed = len(dead_convs)
    report.statcache_removed = len(stale_cache)
    return _Dead(marker, stale_cache, dead_streams, dead_convs, dead_chunks)


def _plan_gathering(backend: Backend, marker: Marker, report: GcReport, how: _Gather, full: bool) -> None:
    """A dry run's figures of the repack or consolidation gc would do."""
    if full or how.consolidation == "loose":
        report.consolidated = consolidate.run(
            backend, marker.chunks, level=how.level, full=full, dry_run=True, keys={},
        )
    if full:
        return
    report.packs = repack.run(
        backend, marker.chunks, threshold=how.repack_below, level=how.level, dry_run=True,
        every=how.repack_every,
    )
    report.stored_bytes_removed += report.packs.stored_before - report.packs.stored_after


def _sweep(backend: Backend, dead: _Dead, report: GcReport, how: _Gather, full: bool) -> None:
    """Delete what is dead and gather the packs again, in an order that is safe to kill."""
    marker = dead.marker
    # Order matters for crash safety: nothing may name a removed object when its chunks go.
    _delete(backend, "statcache", dead.statcache)
    _delete(backend, "streams", dead.streams)
    _delete(backend, "conversations", dead.conversations)
    # Packs before the remaining dead entries: a live delta's dead base is still readable
    # while the delta is stored whole.  A full consolidation rewrites every pack (deltas are
    # made whole in their solid frames), so the repack has nothing left to do.
    if not full:
        report.packs = repack.run(
            backend, marker.chunks, threshold=how.repack_below, level=how.level, every=how.repack_every
        )
        report.stored_bytes_removed += report.packs.stored_before - report.packs.stored_after
    if full or how.consolidation == "loose":
        report.consolidated = c = consolidate.run(
            backend, marker.chunks, level=how.level, full=full, exact_level=how.repack_every,
        )
        report.stored_bytes_removed += max(c.stored_before - c.stored_after, 0)
        if full:
            from snapstore.ops.maintenance import FULL_KEY

            with backend.write() as batch:  # what the full maintenance pass grows from
                batch.put("meta", FULL_KEY, str(c.stored_after).encode())
    _delete(backend, "chunks", dead.chunks)
    backend.sync()
