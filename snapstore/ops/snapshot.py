"""Taking a snapshot: walk, read what changed, store new chunks, write the checkpoint last.

Data flow (see docs/architecture.md)::

    scan.walk ──> stat cache ──hit──> entry reuses the cached stream id
                       │miss
                       v
              thread pool: read ─ chunk ─ hash ─ dedup check ─ zstd  (GIL released)
                       │ bounded queue of new chunks
                       v
              writer thread: batches of <= BATCH_BYTES committed to the backend
                       │ (all chunks committed)
                       v
              main thread: manifest + conversation + checkpoint + log + tags + stat cache,
                           in ONE transaction, then fsync.

A snapshot killed at any moment leaves at most unreferenced chunks (garbage for gc), never a
checkpoint that points at something missing.  Memory is bounded: a file larger than
WHOLE_READ_MAX is streamed through the chunker in groups of GROUP_BYTES, and the queue holds at
most QUEUE_ITEMS groups.
"""

from __future__ import annotations

import errno
import os
import queue
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from snapstore.errors import TreeIOError
from snapstore.ops import diff
from snapstore.records import conversation, manifest
from snapstore.records.checkpoint import USER, build_record, next_seq, seq_key
from snapstore.records.manifest import UNREADABLE, Entry
from snapstore.storage import chunker, objects
from snapstore.tree import scan, statcache, worktree
from snapstore.tree.paths import display

WHOLE_READ_MAX = 4 << 20
GROUP_BYTES = 2 << 20
QUEUE_ITEMS = 8
BATCH_BYTES = 8 << 20  # measured on a 1 GiB file: 32 MiB batches ~+100 MiB anonymous RSS, 8 MiB ~+50
READ_ATTEMPTS = 3

Progress = Callable[[int, int], None]


class FileChanged(Exception):
    """The file kept changing while it was read (after READ_ATTEMPTS tries)."""


class FileGone(Exception):
    """The file vanished or stopped being a regular file before it could be read."""


@dataclass
class SnapshotResult:
    """What a snapshot did: the entries, the counts, the warnings."""

    entries: list[Entry]
    manifest_id: bytes
    conversation_id: bytes | None
    added: int = 0
    modified: int = 0
    deleted: int = 0
    files_read: int = 0
    bytes_read: int = 0
    new_bytes: int = 0
    reused: bool = False
    found: list[scan.Found] = field(default_factory=list)
    report: scan.ScanReport = field(default_factory=scan.ScanReport)


class _Dedup:
    """Chunk ids claimed by this snapshot, so each new chunk is compressed and queued once."""

    def __init__(self, backend):
        self._backend = backend
        self._claimed: set[bytes] = set()
        self._lock = threading.Lock()
        self._lookups = 0

    def new_ids(self, ids: list[bytes]) -> set[bytes]:
        with self._lock:
            fresh = [i for i in dict.fromkeys(ids) if i not in self._claimed]
            self._claimed.update(fresh)
        if not fresh:
            return set()
        present = self._backend.has_many("chunks", fresh)
        self._lookups += 1
        if self._lookups % 32 == 0:
            self._backend.release_memory()  # lookups map LMDB pages; keep them from piling up in RSS
        return {i for i, p in zip(fresh, present) if not p}


class _Writer(threading.Thread):
    """The one thread that commits chunk batches to the backend."""

    def __init__(self, backend):
        super().__init__(name="snapstore-writer", daemon=True)
        self.backend = backend
        self.queue: queue.Queue = queue.Queue(QUEUE_ITEMS)
        self.error: BaseException | None = None
        self.inserted = 0

    def run(self) -> None:
        pending: list[tuple[str, bytes, bytes]] = []
        size = 0
        while True:
            item = self.queue.get()
            if item is None:
                break
            if self.error is not None:
                continue  # keep draining so producers never block on a dead writer
            pending.extend(item)
            size += sum(len(v) for _, _, v in item)
            if size >= BATCH_BYTES:
                self._commit(pending)
                pending, size = [], 0
        if pending and self.error is None:
            self._commit(pending)

    def _commit(self, ops) -> None:
        try:
            with self.backend.write() as batch:
                for table, key, value in ops:
                    batch.put_new(table, key, value)
            self.inserted += batch.inserted_bytes
            self.backend.release_memory(trim_heap=True)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


class _Sink:
    """The chunks one read task produced, deduplicated and compressed in groups.

    Grouping matters on small-file trees: one dedup lookup, one compression pass and one queue
    hand-off per GROUP_BYTES instead of per file keeps the threads from ping-ponging the GIL.
    """

    def __init__(self, dedup: _Dedup, writer: _Writer, level: int):
        self.dedup = dedup
        self.writer = writer
        self.level = level
        self.pairs: list[tuple[bytes, bytes | memoryview, bool]] = []  # (id, data, encoded?)
        self.records: list[tuple[str, bytes, bytes]] = []
        self.size = 0

    def add(self, cid: bytes, data: bytes | memoryview, encoded: bool = False) -> None:
        self.pairs.append((cid, data, encoded))
        self.size += len(data)
        if self.size >= GROUP_BYTES:
            self.flush()

    def add_record(self, table: str, key: bytes, value: bytes) -> None:
        self.records.append((table, key, value))

    def flush(self) -> None:
        ops = []
        if self.pairs:
            new = self.dedup.new_ids([cid for cid, _, _ in self.pairs])
            for cid, data, encoded in self.pairs:
                if cid in new:
                    new.discard(cid)
                    value = data if encoded else objects.encode_chunk(data, self.level)
                    ops.append(("chunks", cid, value))
        # Stream records go after their chunks (same writer batch or a later one).
        ops.extend(self.records)
        self.pairs, self.records, self.size = [], [], 0
        if ops:
            self.writer.queue.put(ops)


class _Reader:
    """Reads files into chunks; its read_batch runs in the thread pool."""

    def __init__(self, root: bytes, dedup: _Dedup, writer: _Writer, level: int):
        self.root = root
        self.dedup = dedup
        self.writer = writer
        self.level = level
        self._local = threading.local()

    def read_batch(self, rels: list[bytes]) -> list[tuple[bytes, object]]:
        """Read several files; returns ``(path, result or exception)`` for each."""
        sink = self._local.sink = _Sink(self.dedup, self.writer, self.level)
        out: list[tuple[bytes, object]] = []
        try:
            for rel in rels:
                try:
                    out.append((rel, self.read(rel)))
                except (FileGone, FileChanged, OSError) as exc:
                    out.append((rel, exc))
            sink.flush()
        finally:
            self._local.sink = None
        return out

    def read(self, rel: bytes) -> tuple[bytes, os.stat_result, int]:
        """Store one file; returns ``(stream id, the stat it was read under, recorded_ns)``."""
        path = os.path.join(self.root, rel)
        for _ in range(READ_ATTEMPTS):
            recorded = time.time_ns()
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except FileNotFoundError as exc:
                raise FileGone("vanished before it could be read") from exc
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # now a symlink, or parent replaced
                    raise FileGone("was replaced before it could be read") from exc
                raise
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise FileGone("is no longer a regular file")
                sid, size = self._read_fd(fd, st.st_size)
                after = os.fstat(fd)
            finally:
                os.close(fd)
            if (
                size == after.st_size
                and after.st_mtime_ns == st.st_mtime_ns
                and after.st_ctime_ns == st.st_ctime_ns
            ):
                return sid, st, recorded
        raise FileChanged(f"kept changing while it was read ({READ_ATTEMPTS} attempts)")

    def _read_fd(self, fd: int, expected: int) -> tuple[bytes, int]:
        sink = getattr(self._local, "sink", None)
        if sink is None:  # a direct call outside read_batch
            sink = _Sink(self.dedup, self.writer, self.level)
        f = os.fdopen(fd, "rb", buffering=0, closefd=False)
        builder = objects.StreamBuilder()
        if expected <= WHOLE_READ_MAX:
            data = f.read(expected + 1)
            while True:  # a file that grew since its stat: read to the end, the check decides
                more = f.read(1 << 20)
                if not more:
                    break
                data += more
            for view in chunker.cut_buffer(data):
                sink.add(builder.add(view), view)
        else:
            for data in chunker.cut_stream(f):
                sink.add(builder.add(data), data)
        sid, size, record = builder.finish(lambda nid, value: sink.add(nid, value, True), self.level)
        if record is not None:
            sink.add_record("streams", sid, record)
        if getattr(self._local, "sink", None) is None:
            sink.flush()
        return sid, size


def take(
    store,
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
):
    """Snapshot ``store``'s tree; returns ``(Checkpoint, SnapshotResult)``.

    The caller holds the writer lock.  With ``skip_unchanged`` and a tree (and conversation)
    identical to the parent's, nothing is written and the parent is returned.
    """
    backend = store.backend
    root = store.root_bytes
    level = store.compression_level
    report = scan.ScanReport()
    found = scan.walk(root, store.excluded, report)

    with backend.read() as view:
        cache = dict(view.items("statcache"))
        last = view.items("log", reverse=True)
        last_item = next(iter(last), None)
    parent = _newest_readable(store, last_item[1]) if last_item else None
    seq = next_seq(last_item[0] if last_item else None)

    entries, to_read = worktree.classify(found, cache)

    result = SnapshotResult(
        entries=[], manifest_id=b"", conversation_id=None, report=report, found=found
    )
    cache_updates: dict[bytes, bytes] = {}
    writer = _Writer(backend)
    if to_read:  # an unchanged tree needs no reader pool and no writer thread
        writer.start()
        try:
            _read_files(store, to_read, entries, cache_updates, result, writer, level, progress, workers)
        finally:
            writer.queue.put(None)
            writer.join()
        if writer.error is not None:
            raise _as_store_error(writer.error)

    ordered = [entries[p] for p in sorted(entries)]
    result.entries = ordered

    # Manifest and conversation chunks are collected plain; only those the store lacks are
    # compressed (an unchanged tree re-creates every manifest chunk it already has).
    final_objects: list[tuple[str, bytes, bytes]] = []
    plain: dict[bytes, bytes] = {}

    def put_chunk(cid: bytes, data: bytes) -> None:
        plain[cid] = data

    # An agent's Store lives across many snapshots: remember the last manifest, so an unchanged
    # tree is recognised by one dict comparison and a changed one re-encodes only what changed.
    memo = store.__dict__.setdefault("_manifest_memo", {"entries": None, "mid": None, "codec": {}})
    if parent is not None and memo["mid"] == parent.manifest and memo["entries"] == entries:
        mid, mrecord = parent.manifest, None
    else:
        mid, _, mrecord = manifest.write_manifest(
            ordered, put_chunk, level, encode=False, memo=memo["codec"]
        )
        memo["entries"], memo["mid"] = None, None  # set again once this snapshot is committed
    if mrecord is not None:
        final_objects.append(("streams", mid, mrecord))
    result.manifest_id = mid
    _count_changes(result, backend, parent, mid, plain, mrecord)
    cid_conv = None
    if messages is not None:
        base = _conversation_base(backend, task)
        cid_conv, crecord = conversation.write(messages, put_chunk, level, encode=False, base=base)
        if crecord is not None:
            final_objects.append(("conversations", cid_conv, crecord))
    ids = list(plain)
    for cid, present in zip(ids, backend.has_many("chunks", ids)):
        if not present:
            final_objects.append(("chunks", cid, objects.encode_chunk(plain[cid], level)))
    result.conversation_id = cid_conv

    if (
        skip_unchanged
        and parent is not None
        and parent.manifest == mid
        and (messages is None or parent.conversation == cid_conv)
    ):
        _write_cache_only(backend, cache_updates, cache, found)
        memo["entries"], memo["mid"] = entries, mid
        result.reused = True
        return parent, result

    stats = {
        "files": sum(1 for e in ordered if e.is_file),
        "bytes": sum(e.size for e in ordered if e.is_file),
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
    result.new_bytes = writer.inserted + _new_bytes(backend, final_objects)
    stats["new_bytes"] = result.new_bytes
    with backend.write() as batch:
        for table, key, value in final_objects:
            batch.put_new(table, key, value)
        for path, value in cache_updates.items():
            batch.put("statcache", path, value)
        for path in _stale_cache_keys(cache, found):
            batch.delete("statcache", path)
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
        batch.put("checkpoints", cp_id, packed)
        batch.put("log", seq_key(seq), cp_id)
        for tag in tags:
            batch.put("tags", tag.encode(), cp_id)
    backend.sync()
    memo["entries"], memo["mid"] = entries, mid
    backend.release_memory()
    return store._checkpoint_by_id(cp_id), result


def _newest_readable(store, latest: bytes):
    """The newest checkpoint whose record reads back (the parent of a new one); a damaged
    latest record (verify reports it) must not stop every later snapshot."""
    from snapstore.errors import CorruptError
    from snapstore.records.checkpoint import load_all

    try:
        return store._checkpoint_by_id(latest)
    except CorruptError:
        with store.backend.read() as view:
            readable = load_all(view)
        return readable[-1] if readable else None


def _read_files(store, to_read, entries, cache_updates, result, writer, level, progress, workers):
    from concurrent.futures import ThreadPoolExecutor, as_completed  # only when files change

    reader = _Reader(store.root_bytes, _Dedup(store.backend), writer, level)
    total = sum(f.st.st_size for f in to_read)
    done = 0
    n = workers or max(2, min(4, os.cpu_count() or 2))
    by_path = {f.path: f for f in to_read}
    with ThreadPoolExecutor(n, thread_name_prefix="snapstore-read") as pool:
        futures = [pool.submit(reader.read_batch, batch) for batch in _batches(to_read)]
        try:
            for fut in as_completed(futures):
                if writer.error is not None:
                    break
                for rel, outcome in fut.result():
                    f = by_path[rel]
                    done += f.st.st_size
                    _record(f, outcome, entries, cache_updates, result)
                if progress:
                    progress(done, total)
        finally:
            for fut in futures:
                fut.cancel()


def _batches(files: list[scan.Found]) -> Iterator[list[bytes]]:
    """Small files in groups (up to 64 files or GROUP_BYTES), each large file on its own."""
    batch: list[bytes] = []
    size = 0
    for f in files:
        batch.append(f.path)
        size += f.st.st_size
        if len(batch) >= 64 or size >= GROUP_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _record(f: scan.Found, outcome, entries, cache_updates, result) -> None:
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
        cache_updates[f.path] = statcache.encode(st, sid, recorded)


def _conversation_base(backend, task: str | None, look_back: int = 64):
    """``(id, count, depth)`` of the newest conversation of this task, to store a delta on."""
    import msgpack

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


def _count_changes(
    result: SnapshotResult, backend, parent, mid: bytes, plain: dict[bytes, bytes], record
) -> None:
    """Count what changed against the parent, decoding only the manifest chunks that differ."""
    if parent is None:
        result.added = len(result.entries)
        return
    if parent.manifest == mid:
        return
    def get(table: str, key: bytes):
        # The new manifest is not stored yet: serve its record and chunks from memory.
        if table == "streams" and key == mid:
            return record
        if table == "chunks" and key in plain:
            return bytes((objects.FLAG_RAW,)) + plain[key]
        with backend.read() as view:
            return view.get(table, key)

    old, new = diff.manifest_difference(get, parent.manifest, mid)
    for c in diff.compare(old, new):
        if c.status == diff.ADDED:
            result.added += 1
        elif c.status == diff.DELETED:
            result.deleted += 1
        else:
            result.modified += 1


def _new_bytes(backend, objects_: list[tuple[str, bytes, bytes]]) -> int:
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


def _stale_cache_keys(cache: dict[bytes, bytes], found) -> list[bytes]:
    if not cache:
        return []
    present = {f.path for f in found}
    return [k for k in cache if k not in present]


def _write_cache_only(backend, cache_updates, cache, found) -> None:
    stale = _stale_cache_keys(cache, found)
    if not cache_updates and not stale:
        return
    with backend.write() as batch:
        for path, value in cache_updates.items():
            batch.put("statcache", path, value)
        for path in stale:
            batch.delete("statcache", path)


def _as_store_error(exc: BaseException) -> BaseException:
    if isinstance(exc, OSError):
        return TreeIOError(f"cannot write to the store: {exc.strerror or exc}")
    return exc
