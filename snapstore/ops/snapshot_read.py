"""Driving the snapshot's readers: a pool of them for many changed files, the calling thread
for one batch.  The readers, the writer and dedup themselves are :mod:`snapstore.ops.snapshot_io`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from snapstore.ops import snapshot_io
from snapstore.ops.context import StageContext
from snapstore.ops.snapshot_io import Dedup, Op, Outcome, Packing, Progress, Reader, Writer
from snapstore.storage import packs
from snapstore.storage.backend import Backend
from snapstore.tree import scan, statcache

if TYPE_CHECKING:
    from concurrent.futures import Future


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
    total = sum(_size(f) for f in to_read)
    done = 0
    n = workers or max(2, min(4, os.cpu_count() or 2))
    work = list(batches(to_read))
    to_read.clear()
    started: set[int] = set()  # batches a reader thread has begun (added from those threads)
    consumed: set[int] = set()
    held: list[tuple[set[int], list[Op]]] = []  # (batches still to finish, stat-cache entries)

    def run(i: int, batch: list[scan.Found]) -> tuple[int, list[tuple[scan.Found, Outcome]]]:
        started.add(i)
        return i, reader.read_batch(batch)

    with ThreadPoolExecutor(n, thread_name_prefix="snapstore-read") as pool:
        # A finished batch is dropped once consumed (not kept to the end with its results).
        pending: set[Future[tuple[int, list[tuple[scan.Found, Outcome]]]]] = {
            pool.submit(run, i, batch) for i, batch in enumerate(work)
        }
        del work
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
#: tool call.  Measured in a watching Store on the stdlib tree (2 cores), fresh files edited:
#: 10 files 31-34 ms inline vs 32-69 pooled, 100 files 115-169 vs 150-277.
INLINE_FILES = snapshot_io.BATCH_FILES
INLINE_BYTES = snapshot_io.GROUP_BYTES


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
        if len(batch) >= snapshot_io.BATCH_FILES or size >= snapshot_io.GROUP_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _size(f: scan.Found) -> int:
    return f.st.st_size if f.st is not None else 0


def packing(ctx: StageContext, packed: bool) -> Packing:
    """How this context's store keeps new chunks (format, level, delta bases)."""
    bases = None
    if packed and ctx.delta_depth > 0:
        backend = ctx.backend

        def get(table: str, key: bytes) -> bytes | None:
            with backend.read() as view:
                value: bytes | None = view.get(table, key)
                return value

        bases = packs.DeltaBases(get, ctx.delta_depth)
    return Packing(ctx.level, packed, bases)


def previous_streams(backend: Backend) -> Callable[[bytes], bytes | None]:
    """path -> the stream its last snapshotted version had (the stat cache names it; called
    from the reader threads, only for files that are read)."""

    def previous(path: bytes) -> bytes | None:
        with backend.read() as view:
            value = view.get("statcache", statcache.key(path))
        return statcache.stream_id(value) if value is not None else None

    return previous
