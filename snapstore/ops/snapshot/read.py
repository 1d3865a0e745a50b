"""The snapshot's read half: the readers that turn changed files into chunks, and who drives
them (a pool of reader threads for many changed files, the calling thread for one batch); then
each file's outcome becomes its entry (:func:`read_changed`, the phase ``take`` runs).

A file larger than WHOLE_READ_MAX is streamed through the chunker.  A file is read under an
fstat taken before and after; if it changed meanwhile it is read again (READ_ATTEMPTS in all),
so a torn read is never *referenced*, though its chunks may already be committed (unreferenced
garbage for gc).  The sinks, dedup and the writer thread that store the chunks are
:mod:`.write`.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, BinaryIO, Union

from snapstore.errors import TreeIOError
from snapstore.ops.context import StageContext
from snapstore.ops.snapshot import write
from snapstore.ops.snapshot.keep import Keeper, Read
from snapstore.ops.snapshot.result import SnapshotResult
from snapstore.ops.snapshot.write import Dedup, Packing, Sink, Writer
from snapstore.records.manifest import UNREADABLE, Entry
from snapstore.storage import chunker, objects, packs
from snapstore.storage.backend import Backend
from snapstore.storage.packs import Op
from snapstore.tree import scan, statcache, worktree
from snapstore.tree.paths import display, open_beneath

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from snapstore.records.checkpoint import Checkpoint

WHOLE_READ_MAX = 4 << 20
READ_ATTEMPTS = 3

READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Progress = Callable[[int, int], None]
#: What reading one file gave: (stream id, the stat it was read under, when: :data:`.keep.Read`),
#: or why it failed.
Outcome = Union[Read, "FileGone", "FileChanged", OSError]

# Seam for tests: how a file is opened (patch this, not os.open, to fail one path).
_open = open_beneath


class FileChanged(Exception):
    """The file kept changing while it was read (after READ_ATTEMPTS tries)."""


class FileGone(Exception):
    """The file vanished or stopped being a regular file before it could be read."""


class Reader:
    """Reads files into chunks; its read_batch runs in the thread pool."""

    def __init__(
        self,
        root: bytes,
        dedup: Dedup,
        writer: Writer,
        packing: Packing,
        previous: Callable[[bytes], bytes | None] | None = None,
    ) -> None:
        self.root = root
        self.dedup = dedup
        self.writer = writer
        self.packing = packing
        self.previous = previous  # path -> the stream its last stored version had
        self._local = threading.local()

    def read_batch(self, files: list[scan.Found]) -> list[tuple[scan.Found, Outcome]]:
        """Read several files; returns ``(file, result or exception)`` for each."""
        sink = self._local.sink = self._sink()
        out: list[tuple[scan.Found, Outcome]] = []
        try:
            for f in files:
                try:
                    out.append((f, self.read(f.path)))
                except (FileGone, FileChanged, OSError) as exc:
                    out.append((f, exc))
            sink.flush()
        finally:
            self._local.sink = None
        return out

    def read(self, rel: bytes) -> Read:
        """Store one file; returns ``(stream id, the stat it was read under, recorded_ns)``."""
        for _ in range(READ_ATTEMPTS):
            recorded = statcache.now_ns()
            try:
                fd = _open(self.root, rel, READ_FLAGS)
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
                sid, size = self._read_fd(fd, st.st_size, rel)
                after = os.fstat(fd)
            finally:
                os.close(fd)
            if (
                size == after.st_size
                and after.st_mtime_ns == st.st_mtime_ns
                and after.st_ctime_ns == st.st_ctime_ns
            ):
                return sid, scan.compact(st), recorded  # 5 fields, not a whole stat_result
        raise FileChanged(f"kept changing while it was read ({READ_ATTEMPTS} attempts)")

    def _read_fd(self, fd: int, expected: int, rel: bytes = b"") -> tuple[bytes, int]:
        sink: Sink | None = getattr(self._local, "sink", None)
        direct = sink is None  # a direct call outside read_batch flushes its own sink
        if sink is None:
            sink = self._sink()
        # Where a new chunk's delta base may be: the path's previous version, looked up by the
        # sink only for chunks the store lacks (a file re-read with stored content costs none).
        path = rel if self.previous is not None and self.packing.bases else None
        if expected <= WHOLE_READ_MAX:
            sid, size = _store_buffer(_read_whole(fd, expected), sink, path)
        else:
            sid, size = _store_stream(os.fdopen(fd, "rb", buffering=0, closefd=False), sink, path)
        if direct:
            sink.flush()
        return sid, size

    def _sink(self) -> Sink:
        return Sink(self.dedup, self.writer, self.packing, self.previous)


def _read_whole(fd: int, expected: int) -> bytes:
    """The bytes of the file open at ``fd``, which its stat says holds ``expected`` bytes."""
    data = os.read(fd, expected + 1)
    # A file that grew since its stat (or a short read): read to the end, the caller's check
    # decides.  Not otherwise: each read(1 MiB) allocates 1 MiB, even at the end.
    while len(data) != expected:
        more = os.read(fd, 1 << 20)
        if not more:
            break
        data += more
    return data


def _store_buffer(data: bytes, sink: Sink, path: bytes | None) -> tuple[bytes, int]:
    """Hand the chunks of ``data`` to ``sink``; returns ``(stream id, size)``."""
    views = [memoryview(data)] if chunker.one_chunk(len(data)) else list(chunker.cut_buffer(data))
    if len(views) == 1:
        # One chunk (most source files): its id is the stream's, so its bytes are hashed once.
        cid = objects.chunk_id(data)
        sink.add(cid, data, (path, 0) if path is not None else None)
        return cid, len(data)
    builder = objects.StreamBuilder(content_id=objects.chunk_id(data))
    offset = 0
    for view in views:
        sink.add(builder.add(view), view, (path, offset) if path is not None else None)
        offset += len(view)
    return _finish(builder, sink)


def _store_stream(f: BinaryIO, sink: Sink, path: bytes | None) -> tuple[bytes, int]:
    """Hand the chunks read from ``f`` (a file too large to hold whole) to ``sink``."""
    builder = objects.StreamBuilder()
    offset = 0
    for chunk in chunker.cut_stream(f):
        sink.add(builder.add(chunk), chunk, (path, offset) if path is not None else None)
        offset += len(chunk)
    return _finish(builder, sink)


def _finish(builder: objects.StreamBuilder, sink: Sink) -> tuple[bytes, int]:
    sid, size, record = builder.finish(sink.add, encode=False)
    if record is not None:
        sink.add_record("streams", sid, record)
    return sid, size


def read_files(
    root: bytes,
    backend: Backend,
    packing: Packing,
    to_read: list[scan.Found],
    writer: Writer,
    progress: Progress | None,
    workers: int | None,
    previous: Callable[[bytes], bytes | None] | None = None,
) -> Iterator[tuple[scan.Found, Outcome]]:
    """Read ``to_read`` in a thread pool; yields each file with its outcome as batches finish,
    and has the writer store the stat-cache entry of every file read.

    An entry is queued only after every chunk its stream needs, so a snapshot killed at any
    moment never leaves one naming a stream the store lacks: its own batch queued its new
    chunks before finishing, and a chunk claimed by another batch still being read is queued
    once that batch has finished (``held``).  The entries thus go out while files are read, not
    all in the checkpoint's transaction (~140 bytes a file, and as many dirty LMDB pages).
    ``to_read`` is consumed (emptied at once): each batch holds its files' records, freed once
    the caller has used them (an initial checkpoint kept every walk record to the end).
    ``previous(path)``: the stream the path's last stored version had (delta bases).
    Stops early (without error) once the writer thread has failed: the caller reports that.
    """
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait  # when files change

    dedup = writer.dedup = Dedup(backend)
    reader = Reader(root, dedup, writer, packing, previous)
    total, done = sum(_size(f) for f in to_read), 0
    n = workers or max(2, min(4, os.cpu_count() or 2))
    started: set[int] = set()  # batches a reader thread has begun (added from those threads)
    consumed: set[int] = set()
    held: list[tuple[set[int], list[Op]]] = []  # (batches still to finish, stat-cache entries)
    with ThreadPoolExecutor(n, thread_name_prefix="snapstore-read") as pool:
        pending = _submit(pool, reader, to_read, started)
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    if writer.error is not None:
                        return
                    i, results = fut.result()
                    cache_ops: list[Op] = []
                    for f, outcome in results:
                        done += _size(f)
                        if isinstance(outcome, tuple):  # read: (stream id, stat, when)
                            value = statcache.encode(outcome[1], outcome[0], outcome[2])
                            cache_ops.append(("statcache", statcache.key(f.path), value))
                        yield f, outcome
                    del results
                    consumed.add(i)
                    # Another batch that claimed a chunk of these files began before this one
                    # ended: wait for every batch begun and not yet consumed.
                    held.append((started - consumed, cache_ops))
                    held = _release(held, consumed, writer)
                    if progress:
                        progress(done, total)
                del finished
        finally:
            for fut in pending:
                fut.cancel()


Done = tuple[int, list[tuple[scan.Found, Outcome]]]


def _submit(pool: ThreadPoolExecutor, reader: Reader, to_read: list[scan.Found], started: set[int]) -> set[Future[Done]]:
    """Submit ``to_read`` in batches (emptying it: each batch holds its files' records);
    each batch's index is added to ``started`` when a reader thread begins it.  The caller
    drops each finished batch once consumed (not kept to the end with its results)."""
    work = list(batches(to_read))
    to_read.clear()

    def run(i: int, batch: list[scan.Found]) -> Done:
        started.add(i)
        return i, reader.read_batch(batch)

    return {pool.submit(run, i, batch) for i, batch in enumerate(work)}


def _release(held: list[tuple[set[int], list[Op]]], consumed: set[int], writer: Writer) -> list[tuple[set[int], list[Op]]]:
    """Queue the held stat-cache entries whose batches have all finished; the rest stay held."""
    still = []
    for waits, ops in held:
        if waits <= consumed:
            if ops:
                writer.put(ops)
        else:
            still.append((waits, ops))
    return still


#: A snapshot that reads at most this many files and bytes (one batch: what the pool would give
#: a single worker anyway) reads them in the calling thread and writes their chunks with the
#: checkpoint, in its one transaction: no thread pool, no writer thread, no queue, none of their
#: imports (concurrent.futures alone pulls in logging).  That is an agent's checkpoint after a
#: tool call, and for one batch the calling thread is no slower than the pool.
INLINE_FILES = write.BATCH_FILES
INLINE_BYTES = write.GROUP_BYTES


def reads_inline(to_read: list[scan.Found]) -> bool:
    """Whether :func:`read_inline` should read ``to_read`` (few, small files)."""
    return len(to_read) <= INLINE_FILES and sum(_size(f) for f in to_read) <= INLINE_BYTES


class _Kept(Writer):
    """A writer that is never started: it keeps the ops for the checkpoint's transaction."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self.ops: list[Op] = []

    def put_new(self, ops: list[Op]) -> None:
        self.ops.extend(ops)

    def put(self, ops: list[Op]) -> None:  # (read_inline's caller writes the stat cache)
        raise AssertionError("read_inline queues no stat-cache entries")


def read_inline(
    root: bytes,
    backend: Backend,
    packing: Packing,
    to_read: list[scan.Found],
    previous: Callable[[bytes], bytes | None] | None = None,
) -> tuple[list[tuple[scan.Found, Outcome]], list[Op]]:
    """Read ``to_read`` here, in order: each file with its outcome, and the ops that store
    their chunks and streams (chunks before the streams that name them), for the caller to
    write in the transaction that records the checkpoint (with the files' stat-cache entries,
    which the caller makes from the outcomes)."""
    kept = _Kept(backend)
    reader = Reader(root, Dedup(backend), kept, packing, previous)
    return reader.read_batch(to_read), kept.ops


def batches(files: list[scan.Found]) -> Iterator[list[scan.Found]]:
    """Small files in groups (up to BATCH_FILES files or GROUP_BYTES), each large file on its own."""
    batch: list[scan.Found] = []
    size = 0
    for f in files:
        batch.append(f)
        size += _size(f)
        if len(batch) >= write.BATCH_FILES or size >= write.GROUP_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _size(f: scan.Found) -> int:
    return f.st.st_size if f.st is not None else 0


class Lookups:
    """The readers' lookups in the store (previous versions, delta bases): through the view
    the calling thread holds (:meth:`held`, a batch read inline), else in a view of their own.

    A view is held only where no writer thread runs beside the readers: the writer may need
    every reader's view closed to grow the map, while a reader waits for room in its queue."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._local = threading.local()

    def get(self, table: str, key: bytes) -> bytes | None:
        view = getattr(self._local, "view", None)
        if view is not None:
            found: bytes | None = view.get(table, key)
            return found
        with self.backend.read() as view:
            value: bytes | None = view.get(table, key)
            return value

    @contextmanager
    def held(self) -> Iterator[None]:
        """Serve this thread's lookups from one read view until the block ends (the view the
        thread holds already, if any)."""
        if getattr(self._local, "view", None) is not None:
            yield
            return
        with self.backend.read() as view:
            self._local.view = view
            try:
                yield
            finally:
                self._local.view = None


def packing(ctx: StageContext, packed: bool, lookups: Lookups | None = None) -> Packing:
    """How this context's store keeps new chunks (format, level, delta bases)."""
    bases = None
    if packed and ctx.delta_depth > 0:
        lookups = lookups or Lookups(ctx.backend)
        bases = packs.DeltaBases(lookups.get, ctx.delta_depth, lookups.held)
    return Packing(ctx.level, packed, bases)


def previous_streams(lookups: Lookups) -> Callable[[bytes], bytes | None]:
    """path -> the stream its last snapshotted version had (the stat cache names it; called
    from the reader threads, only for files that are read)."""

    def previous(path: bytes) -> bytes | None:
        value = lookups.get("statcache", statcache.key(path))
        return statcache.stream_id(value) if value is not None else None

    return previous


class Reads:
    """What reading the changed files leaves for the checkpoint's transaction."""

    # (A plain class, not a dataclass: importing dataclasses would slow every CLI process's start.)
    __slots__ = ("kept", "inline_cache", "inserted")

    def __init__(self) -> None:
        #: The chunks and streams of files read inline, written with the checkpoint.
        self.kept: list[Op] = []
        #: And their stat-cache entries (the writer thread stores those of pooled reads).
        self.inline_cache: dict[bytes, bytes] = {}
        #: Bytes the writer thread added to the store.
        self.inserted = 0

    def add(self, more: Reads) -> None:
        """Take in what a second reading left (the files a late mapping scan found)."""
        self.kept.extend(more.kept)
        self.inline_cache.update(more.inline_cache)
        self.inserted += more.inserted


def read_changed(
    ctx: StageContext,
    to_read: list[scan.Found],
    entries: dict[bytes, Entry],
    result: SnapshotResult,
    *,
    packed: bool,
    cached: bool,
    progress: Progress | None,
    workers: int | None,
    parent: Checkpoint | None = None,
) -> Reads:
    """Read ``to_read`` (inline or in the pool, :func:`reads_inline`) and record each file's
    entry in ``entries`` (or a warning in ``result``).  ``packed``: the store writes packs;
    ``cached``: it has a stat cache (else no file has a previous version to look up).  A file
    read with the content, kind and mode ``parent`` recorded (touched, not changed) keeps
    that entry (:mod:`.keep`)."""
    reads = Reads()
    if not to_read:  # an unchanged tree needs no reader pool and no writer thread
        return reads
    backend = ctx.backend
    lookups = Lookups(backend)
    how = packing(ctx, packed, lookups)
    previous = previous_streams(lookups) if cached else None
    keeper = None
    if parent is not None:
        keeper = Keeper((lambda path: lookups.get("statcache", statcache.key(path))) if cached else None)
    if reads_inline(to_read):
        with lookups.held():  # (no writer thread here: the ops are written with the checkpoint)
            outcomes, reads.kept = read_inline(ctx.root_bytes, backend, how, to_read, previous)
            for f, outcome in outcomes:
                record(f, outcome, entries, reads.inline_cache, result, keeper)
        if progress:
            total = sum(f.st.st_size for f, _ in outcomes if f.st is not None)
            progress(total, total)
    else:
        reads.inserted = _read_pooled(ctx, how, to_read, entries, result, progress, workers, previous, keeper)
    if keeper is not None and parent is not None:
        keeper.apply(ctx, parent.manifest, entries, reads.inline_cache)
    return reads


def _read_pooled(
    ctx: StageContext,
    how: Packing,
    to_read: list[scan.Found],
    entries: dict[bytes, Entry],
    result: SnapshotResult,
    progress: Progress | None,
    workers: int | None,
    previous: Callable[[bytes], bytes | None] | None,
    keeper: Keeper | None,
) -> int:
    """:func:`read_changed` through the reader pool and the writer thread; the bytes it added."""
    writer = Writer(ctx.backend)
    writer.start()
    try:
        for f, outcome in read_files(ctx.root_bytes, ctx.backend, how, to_read, writer, progress, workers, previous):
            # (the file's new stat-cache value is queued only once this returns: the keeper
            # still reads the one before)
            record(f, outcome, entries, None, result, keeper)
    finally:
        writer.queue.put(None)
        writer.join()
    if writer.error is not None:
        raise _as_store_error(writer.error)
    return writer.inserted


def record(
    f: scan.Found,
    outcome: Outcome,
    entries: dict[bytes, Entry],
    cache_updates: dict[bytes, bytes] | None,
    result: SnapshotResult,
    keeper: Keeper | None = None,
) -> None:
    """Turn one file's read outcome into its entry (or a warning); a file read is noted to
    ``keeper`` (it may keep its parent's entry)."""
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
        if keeper is not None:
            keeper.note(f.path, outcome)


def _as_store_error(exc: BaseException) -> BaseException:
    if isinstance(exc, OSError):
        return TreeIOError(f"cannot write to the store: {exc.strerror or exc}")
    return exc
