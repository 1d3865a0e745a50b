"""The snapshot's write half: the one writer thread that commits new chunks (and stat-cache
entries) in batches, the dedup set that claims each new chunk once, and the sinks that group,
deduplicate and compress what the readers (:mod:`.read`) cut.

::

    readers (.read): read - chunk - hash ──> Sink: dedup check - zstd, per GROUP_BYTES
                       │ bounded queue of new chunks (QUEUE_ITEMS groups of GROUP_BYTES)
                       v
    Writer thread: batches of <= BATCH_BYTES committed to the backend

Memory is bounded: the queue holds at most QUEUE_ITEMS groups, and a claim on a chunk id is
held only while it is in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from snapstore.storage import entries, objects, packs
from snapstore.storage.backend import Backend
from snapstore.storage.packs import Op

if TYPE_CHECKING:
    from concurrent.futures import Executor

#: Plain bytes per group of new chunks: the unit of dedup lookup, of compression into solid
#: frames (packs.FRAME_TARGET) and of hand-off to the writer.  Groups several frames large fill
#: their frames, which keeps the store small.
GROUP_BYTES = 4 << 20
BATCH_FILES = 256
QUEUE_ITEMS = 4  # x GROUP_BYTES: what is in flight to the writer
#: Delta frames are made in DELTA_THREADS threads once a group has this many chunks with a
#: base, or its bases decode this many plain bytes from two frames or more (zstd, outside the
#: GIL: worth a second thread).  A delta on a base at hand costs ~30 us (storage/patchfrom.py): for an
#: agent's few edited files, the hand-off to the pool and the wait for a core cost more than
#: they save (the replay's delta frames at load 5-6: 1.3-1.8 ms a checkpoint with 4, 0.6-0.8
#: with 16; docs/benchmarks-design.md).
PARALLEL_DELTAS = 16
PARALLEL_DECODE = 256 << 10
DELTA_THREADS = 2
#: Bytes per writer transaction.  The writer holds a batch twice while committing it (its
#: values, and LMDB's dirty copies), so smaller batches hold less memory, at the same speed
#: (the extra commits' fsyncs are lost in the reading).
BATCH_BYTES = 4 << 20
#: Chunk ids looked up between two release_memory calls: each maps its B-tree leaf and up to
#: 15 cached neighbours (fault-around).
RELEASE_LOOKUPS = 256


def release_memory(backend: Backend, trim_heap: bool = False) -> None:
    """Ask the backend to drop mapped pages it no longer needs (a no-op where it has none)."""
    backend.release_memory(trim_heap=trim_heap)


class Dedup:
    """Chunk ids claimed by this snapshot, so each new chunk is compressed and queued once.

    An id is held only while in flight: from its claim until the writer has committed it
    (:meth:`committed`); ids the store has are released at once.  The store answers for the
    rest, so the set does not grow with the tree (it held ~100k ids at 77k files: 10 MB).
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._claimed: set[bytes] = set()
        self._lock = threading.Lock()
        self._looked_up = 0  # ids looked up since the last release_memory

    def new_ids(self, ids: list[bytes]) -> set[bytes]:
        """The ids among ``ids`` that neither the store nor an earlier caller has."""
        with self._lock:
            fresh = [i for i in dict.fromkeys(ids) if i not in self._claimed]
            self._claimed.update(fresh)
        if not fresh:
            return set()
        # A claim is released only after the store has the id (here, or by the writer after
        # its commit), and every lookup opens a new read transaction: a caller that no longer
        # finds an id claimed finds it in the store.
        present = self._backend.has_many("chunks", fresh)
        # Counted in ids, not calls: a call looks up a whole group's ids.
        self._looked_up += len(fresh)
        if self._looked_up >= RELEASE_LOOKUPS:
            self._looked_up = 0
            release_memory(self._backend)
        stored = [i for i, p in zip(fresh, present) if p]
        if stored:
            self.committed(stored)
        return {i for i, p in zip(fresh, present) if not p}

    def committed(self, ids: list[bytes]) -> None:
        """The store now has ``ids``: they need no claim any more."""
        with self._lock:
            self._claimed.difference_update(ids)


class Writer(threading.Thread):
    """The one thread that commits chunk batches (and stat-cache entries) to the backend."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(name="snapstore-writer", daemon=True)
        self.backend = backend
        self.error: BaseException | None = None
        self.inserted = 0
        #: Told the chunk ids of each commit (the reader pool's Dedup releases their claims).
        self.dedup: Dedup | None = None

    def put_new(self, ops: list[Op]) -> None:
        """Queue content-addressed records (written unless the store has them)."""
        self.queue.put((ops, False))

    def put(self, ops: list[Op]) -> None:
        """Queue records that replace what the store has (stat-cache entries)."""
        self.queue.put((ops, True))

    def start(self) -> None:
        import queue  # here, not at import: a no-change snapshot never starts the writer

        #: ``(ops, replace)``: ``replace`` False for content-addressed records (put_new),
        #: True for stat-cache entries (put); None ends the thread.
        self.queue: queue.Queue[tuple[list[Op], bool] | None] = queue.Queue(QUEUE_ITEMS)
        super().start()

    def run(self) -> None:
        new: list[Op] = []
        replace: list[Op] = []
        size = 0
        while True:
            item = self.queue.get()
            if item is None:
                break
            if self.error is not None:
                continue  # keep draining so producers never block on a dead writer
            ops, overwrite = item
            (replace if overwrite else new).extend(ops)
            size += sum(len(v) for _, _, v in ops)
            if size >= BATCH_BYTES:
                self._commit(new, replace)
                new, replace, size = [], [], 0
        if (new or replace) and self.error is None:
            self._commit(new, replace)

    def _commit(self, ops: list[Op], replace: list[Op]) -> None:
        try:
            with self.backend.write() as batch:
                for table, key, value in ops:
                    batch.put_new(table, key, value)
                for table, key, value in replace:
                    batch.put(table, key, value)
            self.inserted += batch.inserted_bytes
            if self.dedup is not None:
                self.dedup.committed([key for table, key, _ in ops if table == "chunks"])
            release_memory(self.backend, trim_heap=True)
        except BaseException as exc:  # reported by the main thread
            self.error = exc


#: Where a new chunk's delta base may be: (the file's path, the chunk's offset in it); the
#: path's previous version is looked up (:class:`Sink`'s ``previous``) only for a new chunk.
Hint = tuple[bytes, int]
#: ``previous(path)``: the stream the path's last stored version had, or None.
Previous = Callable[[bytes], "bytes | None"]


class Packing(NamedTuple):  # (not a dataclass: its import would slow every CLI process's start)
    """How new chunks are stored: the store's format, the zstd level, the delta bases."""

    level: int
    packed: bool = True  # format 2 (packs); False for a format-1 store not yet upgraded
    bases: packs.DeltaBases | None = None


class Sink:
    """The chunks one read task produced, deduplicated and compressed in groups.

    Grouping matters on small-file trees: one dedup lookup, one compression pass and one queue
    hand-off per GROUP_BYTES instead of per file keeps the threads from ping-ponging the GIL.
    It is also what makes frames solid: the new chunks of a group are compressed together.
    ``previous`` (path -> its last stored version) is asked only about the paths of new chunks
    (their hints), for delta bases: content the store has costs no lookup.
    """

    def __init__(self, dedup: Dedup, writer: Writer, packing: Packing, previous: Previous | None = None) -> None:
        self.dedup = dedup
        self.writer = writer
        self.packing = packing
        self.previous = previous
        self.pairs: list[tuple[bytes, bytes | memoryview, Hint | None]] = []
        self.records: list[Op] = []
        self.size = 0

    def add(self, cid: bytes, data: bytes | memoryview, hint: Hint | None = None) -> None:
        """Queue plain chunk ``cid`` unless the store has it (``hint``: where a base may be)."""
        self.pairs.append((cid, data, hint))
        self.size += len(data)
        if self.size >= GROUP_BYTES:
            self.flush()

    def add_record(self, table: str, key: bytes, value: bytes) -> None:
        """Queue a record to be written after the chunks added so far."""
        self.records.append((table, key, value))

    def flush(self) -> None:
        """Hand what was added to the writer thread."""
        ops: list[Op] = []
        if self.pairs:
            new = self.dedup.new_ids([cid for cid, _, _ in self.pairs])
            chosen: list[tuple[bytes, bytes | memoryview, Hint | None]] = []
            for cid, data, hint in self.pairs:
                if cid in new:
                    new.discard(cid)
                    chosen.append((cid, data, hint))
            plain: list[tuple[bytes, bytes | memoryview]] = []
            deltas: list[packs.Frame] = []
            for (cid, data, _), frame in zip(chosen, self._delta_frames(chosen)):
                if frame is not None:
                    deltas.append(frame)
                else:
                    plain.append((cid, data))
            ops = packs.chunk_ops(plain, self.packing.level, packed=self.packing.packed, deltas=deltas,
                                  pool=frame_pool(len(plain)))
        # Stream records go after their chunks (same writer batch or a later one).
        ops.extend(self.records)
        self.pairs, self.records, self.size = [], [], 0
        if ops:
            self.writer.put_new(ops)


    def _delta_frames(self, chosen: list[tuple[bytes, bytes | memoryview, Hint | None]]) -> list[packs.Frame | None]:
        """A delta frame (or None) for each chunk: in :data:`DELTA_THREADS` threads when
        there are several, since most of a delta's cost is zstd's (decoding the base's frame,
        compressing against it), which runs outside the GIL.  The files' previous versions are
        found first and visited frame by frame
        (:meth:`snapstore.storage.packs.DeltaBases.decode_groups`); each thread makes its share's lookups in one read view
        (:meth:`snapstore.storage.packs.DeltaBases.held`)."""
        bases, level, previous = self.packing.bases, self.packing.level, self.previous
        frames: list[packs.Frame | None] = [None] * len(chosen)
        if bases is None or previous is None:
            return frames
        with bases.held():
            # The previous version of each chunk's file, if any (its delta base is in there).
            found = [previous(hint[0]) if hint is not None else None for _, _, hint in chosen]
            groups, decode = bases.decode_plan(
                [sid if len(data) >= packs.DELTA_MIN and bases.max_depth > 0 else None
                 for sid, (_, data, _) in zip(found, chosen)],
                [len(data) for _, data, _ in chosen],
            )  # fmt: skip

        def share(part: list[list[int]]) -> None:
            with bases.held():
                for group in part:
                    for i in group:
                        cid, data, hint = chosen[i]
                        prev = found[i]
                        base = bases.base(prev, hint[1]) if prev is not None and hint is not None else None
                        if base is not None:
                            frames[i] = bases.on(cid, data, base, level)

        # (frames to decode side by side: one frame's decode cannot be split)
        if sum(len(g) for g in groups) < PARALLEL_DELTAS and (decode < PARALLEL_DECODE or len(groups) < DELTA_THREADS):
            share(groups)
        else:
            from snapstore.ops import workers

            if len(groups) < DELTA_THREADS:
                # Few frames: decode them here (each group's first base), then share the rest,
                # whose bases the frame cache now holds.
                share([g[:1] for g in groups])
                rest = [i for g in groups for i in g[1:]]
                size = -(-len(rest) // DELTA_THREADS)
                groups = [rest[k : k + size] for k in range(0, len(rest), size)]
            # Whole groups to each thread, in turns: each frame is decoded by one thread.
            parts = [groups[k::DELTA_THREADS] for k in range(DELTA_THREADS)]
            list(workers.pool("delta", DELTA_THREADS).map(share, parts))
        for (cid, data, _), prev in zip(chosen, found):
            if prev is not None:
                # The next version of this file will want this chunk as its delta base: keep
                # it, so a long-lived Store does not decode its frame back.
                entries.remember_chunk(cid, bytes(data))
        return frames


def frame_pool(chunks: int) -> Executor | None:
    """The process's pool that compresses a checkpoint's solid frames side by side (None for
    fewer than two chunks: one frame, compressed here)."""
    if chunks < 2:
        return None
    from snapstore.ops import workers

    return workers.pool("zstd", packs.compress_workers())


def lacking(backend: Backend, plain: dict[bytes, bytes], *, unreadable: bool = False) -> list[tuple[bytes, bytes]]:
    """The chunks of ``plain`` the store lacks, looked up in slices with the LMDB pages they
    mapped dropped after each (as Dedup does: 45 MB at once for a 77k-file manifest).

    ``unreadable``: also those it holds but cannot read back as their bytes (each is read)."""
    ids = list(plain)
    out: list[tuple[bytes, bytes]] = []
    for i in range(0, len(ids), RELEASE_LOOKUPS):
        part = ids[i : i + RELEASE_LOOKUPS]
        present = backend.has_many("chunks", part)
        if unreadable:
            with backend.read() as view:
                present = [p and _readable(view.get, c) for c, p in zip(part, present)]
        out.extend((c, plain[c]) for c, p in zip(part, present) if not p)
        if len(ids) >= 32:
            release_memory(backend)
    return out


def _readable(get: objects.Getter, cid: bytes) -> bool:
    """Whether the stored chunk ``cid`` reads back (its frame, its delta chain, its hash)."""
    from snapstore.errors import CorruptError

    try:
        objects.load_chunk(get, cid)
    except CorruptError:
        return False
    return True
