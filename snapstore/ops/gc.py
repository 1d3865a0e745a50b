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
the size stays.  ``LmdbBackend.compact`` writes a compact copy in a work directory inside the
store, fsyncs it, and renames it over data.mdb (atomic: a crash leaves either file whole).
Other processes still map the old, unlinked file; every writer compares data.mdb's inode after
taking the writer lock and reopens when it changed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import zstandard

from snapstore.errors import CorruptError
from snapstore.records import conversation, manifest
from snapstore.records.checkpoint import references
from snapstore.storage import objects
from snapstore.storage.backend import TABLES

BATCH = 2048
COMPACT_DIR = "compact.tmp"


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
    bytes_removed: int = 0  # logical (plain) bytes of the removed chunks
    stored_bytes_removed: int = 0  # their stored (compressed) bytes
    compacted: bool = False
    size_before: int = 0  # data.mdb size before (and after) compaction
    size_after: int = 0

    @property
    def disk_freed(self) -> int:
        return max(self.size_before - self.size_after, 0) if self.compacted else 0

    def to_json(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "checkpoints": self.checkpoints,
            "chunks": self.chunks,
            "chunks_removed": self.chunks_removed,
            "streams_removed": self.streams_removed,
            "conversations_removed": self.conversations_removed,
            "statcache_removed": self.statcache_removed,
            "bytes_removed": self.bytes_removed,
            "stored_bytes_removed": self.stored_bytes_removed,
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


def chunk_sizes(backend) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(chunk id, stored bytes, plain bytes)`` for every chunk."""
    sizes = getattr(backend, "value_sizes", None)
    if sizes is not None:
        for key, stored, head in sizes("chunks"):
            yield key, stored, plain_size(stored, head)
        return
    with backend.read() as view:
        for key, value in view.items("chunks"):
            yield key, len(value), plain_size(len(value), bytes(value[:32]))


def _keys(backend, table: str) -> list[bytes]:
    keys = getattr(backend, "keys", None)
    if keys is not None:
        return keys(table)
    with backend.read() as view:
        return [k for k, _ in view.items(table)]


# -- mark --------------------------------------------------------------------------------------


class Marker:
    """The live sets: chunk ids, stream records, conversation records, whole streams."""

    def __init__(self, get):
        self.get = get
        self.chunks: set[bytes] = set()
        self.streams: set[bytes] = set()  # keys of live `streams` records
        self.conversations: set[bytes] = set()  # keys of live `conversations` records
        self.whole: set[bytes] = set()  # stream ids marked with all they reference
        self._index: set[bytes] = set()  # index nodes already walked
        self._manifest_leaves: set[bytes] = set()
        self.checkpoints = 0

    def stream(self, sid: bytes) -> None:
        if sid in self.whole:
            return
        record = self.get("streams", sid)
        if record is None:
            self.chunks.add(sid)
        else:
            _, height, root = objects.parse_stream_record(sid, record)
            self.streams.add(sid)
            self._walk(root, height)
        self.whole.add(sid)

    def _walk(self, root: bytes, height: int) -> None:
        stack = [(root, height)]
        while stack:
            nid, h = stack.pop()
            if nid in self._index:
                continue
            self._index.add(nid)
            self.chunks.add(nid)
            for cid, _ in objects.parse_index_node(nid, objects.decode_chunk(nid, self.get("chunks", nid))):
                if h == 1:
                    self.chunks.add(cid)
                else:
                    stack.append((cid, h - 1))

    def manifest(self, mid: bytes) -> None:
        self.stream(mid)
        for leaf in objects.leaf_ids(self.get, mid):
            if leaf in self._manifest_leaves:
                continue
            self._manifest_leaves.add(leaf)
            data = objects.decode_chunk(leaf, self.get("chunks", leaf))
            for e in manifest.iter_entries_of_chunks(mid, [data]):
                if e.is_file:
                    self.stream(e.ref)

    def conversation(self, cid: bytes) -> None:
        if cid in self.whole:
            return
        if "conversations" in TABLES and self.get("conversations", cid) is not None:
            for rid, record in conversation.chain(self.get, cid):
                self.conversations.add(rid)
                self.whole.add(rid)
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


def mark(view) -> Marker:
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


def _delete(backend, table: str, keys: list[bytes]) -> None:
    for start in range(0, len(keys), BATCH):
        with backend.write() as batch:
            for k in keys[start : start + BATCH]:
                batch.delete(table, k)


def _cache_sid(value: bytes) -> bytes | None:
    import msgpack

    try:
        sid = msgpack.unpackb(value)[5]
    except (ValueError, TypeError, IndexError, msgpack.UnpackException):
        return None
    return sid if isinstance(sid, bytes) else None


def run(store, *, compact: bool = False, dry_run: bool = False) -> GcReport:
    """Mark and sweep (and compact) ``store``; the caller holds the writer lock."""
    backend = store.backend
    report = GcReport(dry_run=dry_run)
    with backend.read() as view:
        marker = mark(view)
        stale_cache = [k for k, v in view.items("statcache") if _cache_sid(v) not in marker.whole]
        dead_streams = [k for k, _ in view.items("streams") if k not in marker.streams]
        dead_convs = []
        if "conversations" in TABLES:
            dead_convs = [k for k, _ in view.items("conversations") if k not in marker.conversations]
    report.checkpoints = marker.checkpoints
    dead_chunks = []
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
    report.size_before = report.size_after = backend.disk_size()
    if dry_run:
        return report
    # Order matters for crash safety: nothing may name a removed object when its chunks go.
    _delete(backend, "statcache", stale_cache)
    _delete(backend, "streams", dead_streams)
    if dead_convs:
        _delete(backend, "conversations", dead_convs)
    _delete(backend, "chunks", dead_chunks)
    backend.sync()
    if compact and store.store_dir is not None and hasattr(backend, "compact"):
        # size_before stays the size before gc began (the sweep itself may grow the file).
        _, report.size_after = backend.compact(os.path.join(store.store_dir, COMPACT_DIR))
        report.compacted = True
    else:
        report.size_after = backend.disk_size()
    return report
