"""Taking a snapshot: walk, read what changed, store new chunks, write the checkpoint last.

Data flow (see docs/architecture.md)::

    scan.walk ──> stat cache ──hit──> entry reuses the cached stream id
                       │miss
                       v
              snapshot_io: reader pool ─> writer thread (chunks committed in batches)
                       │ (all chunks committed)
                       v
              this module: manifest + conversation + checkpoint + log + tags + stat cache,
                           in ONE transaction, then fsync.

A snapshot killed at any moment leaves at most unreferenced chunks (garbage for gc), never a
checkpoint that points at something missing.  The stage is given a
:class:`~snapstore.ops.context.StageContext`, not the Store; it returns the checkpoint's id and
packed record (the Store turns them into a Checkpoint) with a :class:`SnapshotResult`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import blake3
import msgpack

from snapstore.errors import CorruptError, TreeIOError
from snapstore.ops import incremental, snapshot_counts
from snapstore.ops.context import StageContext
from snapstore.ops.snapshot_io import (
    FileChanged,
    FileGone,
    Outcome,
    Progress,
    Writer,
    lacking,
    release_memory,
)
from snapstore.ops.snapshot_read import (
    packing,
    previous_streams,
    read_files,
    read_inline,
    reads_inline,
)
from snapstore.records import manifest
from snapstore.records.checkpoint import (
    PATHS_INDEX_META,
    SAFETY,
    TASK_INDEX_META,
    USER,
    Checkpoint,
    backfill_task_index,
    build_record,
    load_all,
    next_seq,
    parse_record,
    put_path_rows,
    seq_key,
    write_rows,
)
from snapstore.records.manifest import EXEC, UNREADABLE, Entry
from snapstore.records.manifest_codec import Codec
from snapstore.storage import packs
from snapstore.storage.backend import Backend
from snapstore.tree import scan, statcache, worktree
from snapstore.tree.paths import display

__all__ = ["FileChanged", "FileGone", "SnapshotResult", "take"]

Op = tuple[str, bytes, bytes]

#: meta key: the fingerprint (:func:`_fingerprint`) of the entries the last CLI-style snapshot
#: (a context's first) recorded, then its manifest id.  When the next one finds the same entries
#: and that manifest is its parent's, it reuses the id instead of encoding the manifest (~2 ms
#: instead of ~10 ms at 7.7k files).  Only an optimisation: deleting it changes nothing.
LAST_MANIFEST = b"snapshot:last-manifest"


class SnapshotResult:
    """What a snapshot did: the entries, the counts, the warnings."""

    # (A plain class, not a dataclass: importing dataclasses costs every CLI process ~15 ms.)
    __slots__ = (
        "entries", "manifest_id", "conversation_id", "added", "modified", "deleted",
        "files_read", "bytes_read", "new_bytes", "reused", "found", "report", "changed",
    )  # fmt: skip

    def __init__(
        self,
        entries: list[Entry],
        manifest_id: bytes,
        conversation_id: bytes | None,
        *,
        found: list[scan.Found] | None = None,
        report: scan.ScanReport | None = None,
    ) -> None:
        self.entries = entries
        self.manifest_id = manifest_id
        self.conversation_id = conversation_id
        self.added = self.modified = self.deleted = 0
        self.files_read = self.bytes_read = self.new_bytes = 0
        self.reused = False
        #: The walk's records: only for a SAFETY checkpoint or a watching context.
        self.found: list[scan.Found] = found if found is not None else []
        self.report = report if report is not None else scan.ScanReport()
        #: The paths whose entries differ from the parent's (the ``paths`` index rows).
        self.changed: list[bytes] = []


class _ManifestMemo:
    """The last manifest this context committed (or reused), kept across snapshots of one Store:
    an unchanged tree is recognised by one dict comparison, a changed one re-encodes only the
    manifest chunks that changed (``codec``).  Not a dataclass: ~0.4 ms of every CLI start."""

    __slots__ = ("entries", "mid", "codec")

    def __init__(self) -> None:
        self.entries: dict[bytes, Entry] | None = None
        self.mid: bytes | None = None
        self.codec: Codec | None = None


def _memo(ctx: StageContext) -> _ManifestMemo:
    memo = ctx.memo.get("snapshot.manifest")
    if not isinstance(memo, _ManifestMemo):
        memo = ctx.memo["snapshot.manifest"] = _ManifestMemo()
    return memo


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
        try:
            return _take(ctx, message, task, tags, metadata, messages, kind, skip_unchanged, progress, workers)
        except BaseException:
            incremental.forget(ctx)
            raise


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    # A snapshot allocates many small tuples and no cycles: Python's cyclic collector would
    # walk them again and again (22% of an in-process snapshot, measured).
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
    backend = ctx.backend
    level = ctx.level
    report = scan.ScanReport()
    with backend.read() as view:
        last_item = next(iter(view.items("log", reverse=True)), None)
        last_op = next(iter(view.items("oplog", reverse=True)), None)
        keys = (last_item[0] if last_item else None, last_op[0] if last_op else None)
        in_packs = packs.writes_packs(view.get)
        # No stat cache yet (a first checkpoint): no file has a previous version to look up.
        cached = next(iter(view.items("statcache")), None) is not None
        indexed = view.get("meta", TASK_INDEX_META) is not None
        paths_indexed = view.get("meta", PATHS_INDEX_META) is not None
    found, cache, entries, to_read, stale, found_for_state = incremental.inputs(ctx, keys, report)
    if kind != SAFETY and not incremental.watching(ctx):
        # Only a safety checkpoint's caller (restore) and a watching context's next snapshot
        # use the walk's records: dropping them lets read_files free those of the files it
        # reads batch by batch (~250 bytes a file) instead of at the end.
        found = found_for_state = []
    newest = _newest_readable(backend, last_item[1]) if last_item else None
    parent, parent_record = newest if newest else (None, b"")
    seq = next_seq(last_item[0] if last_item else None)

    result = SnapshotResult(
        entries=[], manifest_id=b"", conversation_id=None, report=report, found=found
    )
    # The writer stores the stat-cache entries of the files read (snapshot_io.read_files); a
    # watching context also keeps them for its next snapshot.
    cache_updates: dict[bytes, bytes] | None = {} if incremental.watching(ctx) else None
    writer = Writer(backend)
    kept: list[Op] = []  # the chunks of files read inline, written with the checkpoint
    inline_cache: dict[bytes, bytes] = {}  # and their stat-cache entries
    if to_read and reads_inline(to_read):
        read, kept = read_inline(
            ctx.root_bytes, backend, packing(ctx, in_packs), to_read,
            previous_streams(backend) if cached else None,
        )
        for f, outcome in read:
            _record(f, outcome, entries, inline_cache, result)
        if cache_updates is not None:
            cache_updates.update(inline_cache)
        if progress:
            total = sum(f.st.st_size for f, _ in read if f.st is not None)
            progress(total, total)
    elif to_read:  # an unchanged tree needs no reader pool and no writer thread
        writer.start()
        try:
            for f, outcome in read_files(
                ctx.root_bytes, backend, packing(ctx, in_packs), to_read, writer, progress, workers,
                previous_streams(backend) if cached else None,
            ):
                _record(f, outcome, entries, cache_updates, result)
        finally:
            writer.queue.put(None)
            writer.join()
        if writer.error is not None:
            raise _as_store_error(writer.error)

    ordered = [entries[p] for p in sorted(entries)]
    result.entries = ordered

    # Manifest and conversation chunks are collected plain; only those the store lacks are
    # compressed (an unchanged tree re-creates every manifest chunk it already has).
    final_objects: list[Op] = kept
    plain: dict[bytes, bytes] = {}

    def put_chunk(cid: bytes, data: bytes) -> None:
        plain[cid] = data

    memo = _memo(ctx)
    mrecord: bytes | None = None
    fingerprint = None
    if parent is not None and memo.mid == parent.manifest and memo.entries == entries:
        mid = parent.manifest
    else:
        if memo.mid is None:  # this context's first snapshot (a CLI process takes only one)
            fingerprint = _fingerprint(ordered)
        if parent is not None and fingerprint is not None and _last_manifest(backend) == fingerprint + parent.manifest:
            mid = parent.manifest  # the entries of the parent's manifest: nothing to encode
        else:
            # A context's first snapshot keeps no codec: a CLI process takes only one, and the
            # codec holds every entry's encoding (~230 bytes a file).  A long-lived Store fills
            # it on its second snapshot and saves from the third on.
            codec = None
            if memo.mid is not None:
                codec = memo.codec = memo.codec or Codec()
            mid, _, mrecord = manifest.write_manifest(ordered, put_chunk, level, encode=False, memo=codec)
        memo.entries, memo.mid = None, None  # set again once this snapshot is committed
    if parent is not None and mid == parent.manifest:
        plain.clear()  # the parent's manifest: its chunks are stored (no lookups, no page faults)
    if mrecord is not None:
        final_objects.append(("streams", mid, mrecord))
    result.manifest_id = mid
    since = None
    if memo.codec is not None and parent is not None and mid != parent.manifest:
        since = memo.codec.changes_since(parent.manifest)
    if since is not None:  # the codec knows which entries may differ: nothing is decoded
        snapshot_counts.add(result, *since)
        # The chunks it kept are the parent's manifest's: stored (the writer lock keeps gc out),
        # so the store is asked only about the new ones.
        assert memo.codec is not None
        for cid in memo.codec.kept():
            plain.pop(cid, None)
    else:
        snapshot_counts.against_parent(result, backend, parent, mid, plain, mrecord)
    cid_conv = None
    if messages is not None:
        from snapstore.records import conversation  # (json) only when there is one

        base = _conversation_base(backend, task)
        with backend.read() as view:
            cid_conv, crecord = conversation.write(
                messages, put_chunk, level, encode=False, base=base, inline=in_packs, get=view.get
            )
        if crecord is not None:
            final_objects.append(("conversations", cid_conv, crecord))
    final_objects.extend(packs.chunk_ops(lacking(backend, plain), level, packed=in_packs))
    result.conversation_id = cid_conv

    if (
        skip_unchanged
        and parent is not None
        and parent.manifest == mid
        and (messages is None or parent.conversation == cid_conv)
    ):
        _delete_stale(backend, stale)
        if inline_cache:  # files read inline (racy ones, re-read): their chunks, then entries
            with backend.write() as batch:
                for table, key, value in kept:
                    batch.put_new(table, key, value)
                for key, value in inline_cache.items():
                    batch.put("statcache", key, value)
        memo.entries, memo.mid = entries, mid
        incremental.remember(ctx, found_for_state, cache, cache_updates or {}, stale, entries, keys)
        result.reused = True
        return bytes.fromhex(parent.id), parent_record, result

    sizes = [e[3] for e in ordered if e[1] <= EXEC]  # files (FILE, EXEC): one pass, no property calls
    stats: dict[str, Any] = {
        "files": len(sizes),
        "bytes": sum(sizes),
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
    time_ns = time.time_ns()
    tags = list(dict.fromkeys(tags or []))
    result.new_bytes = writer.inserted + snapshot_counts.new_bytes(backend, final_objects)
    stats["new_bytes"] = result.new_bytes
    with backend.write() as batch:
        for table, key, value in final_objects:
            batch.put_new(table, key, value)
        for path in stale:
            batch.delete("statcache", path)
        for key, value in inline_cache.items():  # (the writer stores those of pooled reads)
            batch.put("statcache", key, value)
        if fingerprint is not None:
            batch.put("meta", LAST_MANIFEST, fingerprint + mid)
        cp_id, packed = build_record(
            parent=parent.id if parent else None,
            time_ns=time_ns,
            message=message,
            task=task,
            tags=tags,
            kind=kind,
            manifest=mid,
            conversation=cid_conv,
            metadata=metadata or {},
            stats=stats,
        )
        write_rows(batch, cp_id, packed, seq, task, tags)
        if not indexed:
            with backend.read() as view:
                backfill_task_index(view, batch)
        if not paths_indexed:  # a store made before the index (or a repair cut short): once
            from snapstore.ops import pathlog

            with backend.read() as view:
                pathlog.rebuild(view, batch)
        put_path_rows(batch, seq, cp_id, result.changed)
    backend.sync()
    memo.entries, memo.mid = entries, mid
    incremental.remember(ctx, found_for_state, cache, cache_updates or {}, stale, entries, (seq_key(seq), keys[1]))
    if to_read or mrecord is not None:  # (an unchanged tree mapped little: spare the madvise pass)
        release_memory(backend)
    return cp_id, packed, result


def _fingerprint(ordered: list[Entry]) -> bytes:
    """BLAKE3 of the entries as msgpack arrays of up to 4096 entries (packed in slices, so no
    copy of the whole manifest's encoding is held at once)."""
    h = blake3.blake3()
    pack = msgpack.Packer().pack
    for i in range(0, len(ordered), 4096):
        h.update(pack(ordered[i : i + 4096]))
    return h.digest()


def _last_manifest(backend: Backend) -> bytes | None:
    with backend.read() as view:
        value: bytes | None = view.get("meta", LAST_MANIFEST)
        return value


def _newest_readable(backend: Backend, latest: bytes) -> tuple[Checkpoint, bytes] | None:
    """The newest checkpoint whose record reads back (the parent of a new one) and its packed
    record; a damaged latest record (verify reports it) must not stop every later snapshot."""
    with backend.read() as view:
        packed = view.get("checkpoints", latest)
        if packed is not None:
            try:
                return parse_record(latest, packed), packed
            except CorruptError:
                pass
        readable = load_all(view)
        if not readable:
            return None
        newest = readable[-1]
        packed = view.get("checkpoints", bytes.fromhex(newest.id))
    return (newest, packed) if packed is not None else None


def _record(
    f: scan.Found,
    outcome: Outcome,
    entries: dict[bytes, Entry],
    cache_updates: dict[bytes, bytes] | None,
    result: SnapshotResult,
) -> None:
    """Turn one file's read outcome into its entry (or a warning)."""
    if isinstance(outcome, FileGone):
        result.report.vanished += 1
        result.report.warn(f"{display(f.path)} {outcome}; not recorded")
        entries.pop(f.path, None)
    elif isinstance(outcome, FileChanged):
        result.report.unreadable += 1
        result.report.warn(f"{display(f.path)} {outcome}; recorded as unreadable")
        entries[f.path] = Entry(f.path, UNREADABLE, 0, 0, 0, b"")
    elif isinstance(outcome, OSError):
        result.report.unreadable += 1
        result.report.warn(f"cannot read {display(f.path)}: {outcome.strerror}")
        entries[f.path] = Entry(f.path, UNREADABLE, 0, 0, 0, b"")
    else:
        sid, st, recorded = outcome
        entries[f.path] = worktree.file_entry(f.path, st, sid)
        result.files_read += 1
        result.bytes_read += st.st_size
        if cache_updates is not None:  # (the writer has stored it already)
            cache_updates[statcache.key(f.path)] = statcache.encode(st, sid, recorded)


def _conversation_base(
    backend: Backend, task: str | None, look_back: int = 64
) -> tuple[bytes, int, int] | None:
    """``(id, count, depth)`` of the newest conversation of this task, to store a delta on."""
    from snapstore.records import conversation

    with backend.read() as view:
        for i, (_, cid) in enumerate(view.items("log", reverse=True)):
            if i >= look_back:
                return None
            packed = view.get("checkpoints", cid)
            try:
                record = msgpack.unpackb(packed, raw=False)
                conv = record.get("conversation")
                if record.get("task") != task or conv is None:
                    continue
                count, depth = conversation.info(view.get, conv)
            except Exception:  # a damaged record is verify's business, not a reason to fail here
                continue
            return conv, count, depth
    return None


def _delete_stale(backend: Backend, stale: list[bytes]) -> None:
    if not stale:
        return
    with backend.write() as batch:
        for path in stale:
            batch.delete("statcache", path)


def _as_store_error(exc: BaseException) -> BaseException:
    if isinstance(exc, OSError):
        return TreeIOError(f"cannot write to the store: {exc.strerror or exc}")
    return exc


