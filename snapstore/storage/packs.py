"""Format v2 writing: new chunks become solid zstd frames, frames become ~1 MiB packs.

Why packs (measured in docs/benchmarks-design.md): one LMDB value per chunk wastes half an
overflow page per value and compresses each ~32 KiB chunk alone.  Chunks compressed together in
frames of :data:`FRAME_TARGET` plain bytes, frames concatenated into values of about
:data:`PACK_TARGET` bytes, take less than git's gc'd pack where the per-chunk layout took more.

A pack's key is the first 16 bytes of the BLAKE3 of its bytes, so packs are immutable and never
collide, and an entry's (pack, offset) names the same bytes in every store.  A pack and the
entries of every chunk it holds are written in one transaction.

**Deltas.** A changed file's new chunk may be stored as a zstd frame compressed against the
chunk its previous version had at the same offset (zstd's raw-content dictionary, "patch from"),
when that is at most :data:`DELTA_GAIN` of the chunk compressed alone.  Chains are at most the
configured depth long; the next version after that is stored whole (a keyframe).  A delta is
keyed by its plain chunk's id like any chunk, so dedup and every reader are unaffected.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, TypeVar

from snapstore.errors import CorruptError
from snapstore.storage import entries, objects, patchfrom
from snapstore.storage.entries import CODEC_DELTA, CODEC_ZSTD, PackEntry

if TYPE_CHECKING:
    from concurrent.futures import Executor

    import zstandard

#: Plain bytes per solid frame: smaller stores and faster compression than smaller frames
#: (docs/benchmarks-design.md); the price is the read of one chunk (a prefix decode).
FRAME_TARGET = 1 << 20
#: Plain bytes per frame of a checkpoint's new manifest chunks.  A ``cat`` (or ``restore
#: PATH``) finds its path by a binary search of the manifest's leaves, each probe a prefix
#: decode of the leaf's frame: in data-sized frames, a big tree's first checkpoint decoded
#: about its whole manifest per ``cat``.  Later checkpoints write a few leaves,
#: which fit in one such frame anyway.
MANIFEST_FRAME = 32 << 10
#: Stored bytes per pack value (a pack closes once it holds at least this much).
PACK_TARGET = 1 << 20
#: A delta is kept only when it is at most this fraction of the chunk compressed alone.
DELTA_GAIN = 0.5
#: A delta of at most 1/DELTA_SURE of the chunk's plain size is kept without compressing the
#: chunk alone to compare (half a snapshot's compression work when it edits many files): the
#: chunk would have to compress more than 4:1 alone for it not to pay (source code compresses
#: 2-4:1 at level 3), and then the delta is still at most 1/8 of its plain bytes.  Replaying
#: this project's own history (150 commits, ~1,600 deltas) compressed ~460 chunks alone at 1/32
#: and ~100 at 1/8, the same deltas kept either way (docs/benchmarks-design.md).
DELTA_SURE = 8
#: Default longest delta chain (config key ``storage.delta-depth``; 0 turns deltas off).
DELTA_DEPTH = 10
#: The meta key of that config (``ops.retention.config_key``'s, written here so that opening a
#: store does not load the retention module; a test checks they agree).
DELTA_DEPTH_KEY = b"config:storage.delta-depth"
#: Chunks smaller than this are never delta-compressed (the entry's overhead would eat the gain).
DELTA_MIN = 512
#: A frame is decoded for delta bases only when that decode (plain bytes out) is at most this
#: many times the new bytes those bases serve, or at most :data:`DECODE_FLOOR`: a few files
#: edited deep in a big solid frame (an initial checkpoint's 1 MiB frames) are stored whole
#: rather than decode most of a MiB each to save a few KB.  Decoding costs about a quarter of
#: compressing per byte, so the bound keeps a checkpoint's base decodes within about its own
#: compression's time.  Consolidation (``gc``, the full maintenance pass) puts those versions
#: side by side again.
DECODE_RATIO = 4
#: A decode this small always pays (a later checkpoint's own small frames: the edit loop).
DECODE_FLOOR = 64 << 10
#: Beyond those, the frames that do not pay may still be decoded up to this many plain bytes
#: a checkpoint (a :class:`DeltaBases`), the cheapest per byte they base first: a checkpoint of a few edited
#: files (an agent's step) keeps its deltas on bases in big frames (consolidation's 4 MiB ones)
#: for a bounded decode, so the store as agents leave it stays near its compacted size.
DECODE_BUDGET = 2 << 20

Op = tuple[str, bytes, bytes]  # (table, key, value) for WriteBatch.put_new


class Frame:
    """One frame ready to be placed in a pack: its stored bytes and the chunks it holds."""

    # (A plain class, not a dataclass: importing dataclasses would slow every CLI process's start.)
    __slots__ = ("codec", "data", "members", "base", "depth")

    def __init__(
        self,
        codec: int,
        data: bytes,
        members: list[tuple[bytes, int, int]] | None = None,
        base: bytes | None = None,
        depth: int = 0,
    ) -> None:
        self.codec = codec
        self.data = data
        self.members = members if members is not None else []  # (id, offset, size)
        self.base = base
        self.depth = depth


def _compressor(level: int) -> zstandard.ZstdCompressor:
    return objects._compressor(level)


def solid_frames(
    chunks: Iterable[tuple[bytes, bytes | memoryview]],
    level: int,
    target: int | None = None,
    breaks: set[bytes] | None = None,
    pool: Executor | None = None,
) -> list[Frame]:
    """Group ``(id, plain)`` chunks, in order, into frames of about ``target`` plain bytes
    (``breaks``: ids that start a new frame whatever the size), compressed in ``pool`` (a
    long-lived one of :func:`compress_workers` threads: a checkpoint's own would start its
    threads every time) or in a pool made for the call."""
    target = target or FRAME_TARGET
    groups: list[list[tuple[bytes, bytes | memoryview]]] = []
    group: list[tuple[bytes, bytes | memoryview]] = []
    size = 0
    for cid, data in chunks:
        if group and (size + len(data) > target or (breaks is not None and cid in breaks)):
            groups.append(group)
            group, size = [], 0
        group.append((cid, data))
        size += len(data)
    if group:
        groups.append(group)
    if len(groups) < 2:
        return [_solid(g, level) for g in groups]
    # zstd releases the GIL while it compresses: frames are independent, so each core takes one.
    if pool is not None:
        return list(pool.map(lambda g: _solid(g, level), groups))
    from concurrent.futures import ThreadPoolExecutor

    workers = min(len(groups), compress_workers())
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="snapstore-zstd") as own:
        return list(own.map(lambda g: _solid(g, level), groups))


def compress_workers() -> int:
    """Threads that compress frames side by side (the usable cores, at most 8)."""
    from snapstore.platform import files

    return max(1, min(8, files.usable_cores()))


def _solid(group: Sequence[tuple[bytes, bytes | memoryview]], level: int) -> Frame:
    plain = b"".join(group_data for _, group_data in group)
    members = []
    offset = 0
    for cid, data in group:
        members.append((cid, offset, len(data)))
        offset += len(data)
    # Incompressible data costs zstd's raw-block headers only (3 bytes per 128 KiB).
    return Frame(CODEC_ZSTD, _compressor(level).compress(plain), members)


def delta_frame(
    cid: bytes, data: bytes | memoryview, base: bytes, base_plain: bytes, depth: int, level: int,
    alone: int | None = None,
) -> Frame | None:
    """``data`` as a delta against ``base_plain``, or None when that does not pay enough:
    more than :data:`DELTA_GAIN` of ``data`` compressed alone (``alone``: that size when the
    caller knows it well enough, sparing a second compression)."""
    if len(data) < DELTA_MIN:
        return None
    delta = patchfrom.compress(data, base_plain, level)
    if alone is None:
        if len(delta) * DELTA_SURE <= len(data):
            return Frame(CODEC_DELTA, delta, [(cid, 0, len(data))], base, depth)
        alone = len(_compressor(level).compress(data))
    if len(delta) > DELTA_GAIN * alone:
        return None
    return Frame(CODEC_DELTA, delta, [(cid, 0, len(data))], base, depth)


def pack_ops(frames: Iterable[Frame], head: bytes = b"") -> list[Op]:
    """Place frames into packs; the ops write each pack and the entry of every chunk in it.

    ``head``: bytes each pack starts with, which no entry points at (consolidation's mark).
    """
    ops: list[Op] = []
    pack = bytearray(head)
    placed: list[tuple[Frame, int]] = []

    def close() -> None:
        value = bytes(pack)
        pid = objects.pack_id(value)
        ops.append(("packs", pid, value))
        for frame, off in placed:
            for cid, offset, size in frame.members:
                entry = PackEntry(pid, off, len(frame.data), frame.codec, offset, size, frame.base, frame.depth)
                ops.append(("chunks", cid, entry.encode()))

    for frame in frames:
        placed.append((frame, len(pack)))
        pack += frame.data
        if len(pack) >= PACK_TARGET:
            close()
            pack, placed = bytearray(head), []
    if placed:
        close()
    return ops


def chunk_ops(
    chunks: Sequence[tuple[bytes, bytes | memoryview]],
    level: int,
    *,
    packed: bool = True,
    deltas: Sequence[Frame] = (),
    pool: Executor | None = None,
) -> list[Op]:
    """The ops that store ``chunks`` (plain; ids the store lacks) and ready-made delta frames
    (``pool``: as :func:`solid_frames` takes it).

    ``packed`` False writes the format-1 layout (one compressed value per chunk), for a store
    not yet upgraded.
    """
    if not packed:
        if deltas:  # DeltaBases never bases a delta on a format-1 chunk
            raise AssertionError("delta frames for a format-1 store")
        return [("chunks", cid, objects.encode_chunk(data, level)) for cid, data in chunks]
    return pack_ops([*deltas, *solid_frames(chunks, level, pool=pool)])


def writes_packs(get: Callable[[str, bytes], bytes | None]) -> bool:
    """Whether new chunks go into packs: the store's meta says format 2 (read per write, so a
    process that opened the store before ``snapstore upgrade`` follows it at once)."""
    return get("meta", b"format") not in (None, b"1")


def writes_compact_conversations(get: Callable[[str, bytes], bytes | None]) -> bool:
    """Whether conversation records are written in the compact form
    (:mod:`snapstore.records.conversation_delta`): format 3 on.  A format-2 store keeps the
    records format-2 readers read until ``snapstore upgrade``, as a format-1 store keeps its."""
    return get("meta", b"format") not in (None, b"1", b"2")


# -- choosing delta bases --------------------------------------------------------------------


class DeltaBases:
    """Finds, for a new chunk at ``offset`` of a file, the chunk its previous version had there.

    ``get`` reads the store (called from the reader threads, each with its own read view).
    """

    def __init__(
        self, get: Callable[[str, bytes], bytes | None], max_depth: int,
        hold: Callable[[], AbstractContextManager[None]] | None = None,
    ) -> None:
        self._get = get
        self.max_depth = max_depth
        self._hold = hold
        self._layouts: dict[bytes, list[tuple[int, bytes]]] = {}
        self._budget = DECODE_BUDGET
        self._budget_lock = threading.Lock()

    def held(self) -> AbstractContextManager[None]:
        """A block whose lookups (in this thread) ``get`` may serve from one read view (the
        ``hold`` given: :class:`snapstore.ops.snapshot.read.Lookups`), else a no-op."""
        return self._hold() if self._hold is not None else nullcontext()

    def _layout(self, sid: bytes) -> list[tuple[int, bytes]]:
        layout = self._layouts.get(sid)
        if layout is None:
            layout = []
            offset = 0
            for cid, size, height in objects.walk_stream(self._get, sid):
                if height == 0:
                    layout.append((offset, cid))
                    offset += max(size, 0)
            self._layouts[sid] = layout
        return layout

    def frame(self, cid: bytes, data: bytes | memoryview, prev: bytes, offset: int, level: int) -> Frame | None:
        """A delta frame for chunk ``cid`` against ``prev`` (a stream) at ``offset``, or None."""
        if self.max_depth < 1 or len(data) < DELTA_MIN:
            return None
        base = self.base(prev, offset)
        return None if base is None else self.on(cid, data, base, level)

    def base(self, prev: bytes, offset: int) -> bytes | None:
        """The chunk stream ``prev`` has at ``offset``: the delta base of a new chunk there
        (None when ``prev`` cannot be read)."""
        try:
            layout = self._layout(prev)
        except CorruptError:
            return None  # a damaged base is verify's business: store this chunk whole
        base = None
        for start, bid in layout:
            if start > offset:
                break
            base = bid
        return base

    def decode_groups(self, streams: Sequence[bytes | None], sizes: Sequence[int]) -> list[list[int]]:
        """:meth:`decode_plan`'s groups."""
        return self.decode_plan(streams, sizes)[0]

    def decode_plan(self, streams: Sequence[bytes | None], sizes: Sequence[int]) -> tuple[list[list[int]], int]:
        """The indices of ``streams`` (previous versions of edited files, whose chunks are
        delta bases; None left out) grouped by the frame their first decode reads (a one-chunk
        stream's, or its index root's, which follows its chunks), the furthest into its frame
        first.  zstd decodes a frame from its start, so that one (prefix) decode, kept in the
        frame cache, serves the group's other bases; in the order given, a base further in than
        the cached prefix decoded the frame again.  A group is for one thread: two threads
        would each decode its frame.

        ``sizes``: the new chunks' sizes.  A group whose decode does not pay for the new bytes
        it bases (:func:`decode_pays`; a cached frame or chunk costs nothing) is left out, its
        chunks stored whole, unless :data:`DECODE_BUDGET` covers it.  Reads entries only: no
        frame is decoded here.  Also returned: the plain bytes the kept groups decode."""
        groups: dict[tuple[bytes, int], list[tuple[int, int]]] = {}
        costs: dict[tuple[bytes, int], int] = {}
        based: dict[tuple[bytes, int], int] = {}
        for i, sid in enumerate(streams):
            if sid is None:
                continue
            first, e = sid, None
            try:
                record = self._get("streams", sid)
                first = objects.parse_stream_record(sid, record)[2] if record is not None else sid
                value = self._get("chunks", first)
                e = entries.parse(first, value) if entries.is_entry(value) else None
                cost = self._decode_cost(first, e) if e is not None else 0
            except CorruptError:
                cost = 0  # (base() or on() finds the damage again and stores the chunk whole)
            where = (e.pack, e.frame_off) if e is not None else (sid, -1)
            groups.setdefault(where, []).append((-(e.offset + e.size) if e is not None else 0, i))
            costs[where] = max(costs.get(where, 0), cost)
            based[where] = based.get(where, 0) + sizes[i]
        with self._budget_lock:  # (one budget for every batch of the checkpoint, in any thread)
            kept, self._budget = within_budget(costs, based, self._budget)
        plan = [[i for _, i in sorted(groups[k])] for k in sorted(groups) if k in kept]
        return plan, sum(costs[k] for k in kept)

    def _decode_cost(self, cid: bytes, e: PackEntry) -> int:
        """Plain bytes decoded to read chunk ``cid`` (entry ``e``), its delta chain included,
        with the process's caches as they are now: the prefix up to each chunk (a chunk past
        :data:`entries.PREFIX_BELOW` of its frame decodes the frame whole, up to 1/0.6 of
        this; the entry does not say the frame's plain size)."""
        cost = 0
        for _ in range(entries.MAX_CHAIN + 1):
            if entries.cached_chunk(cid) is not None or entries.cached_upto(e) >= e.offset + e.size:
                return cost
            cost += e.offset + e.size
            if e.codec != CODEC_DELTA or e.base is None:
                return cost
            cid, value = e.base, self._get("chunks", e.base)
            if not entries.is_entry(value):
                return cost  # (a format-1 base: one chunk alone, or damage on()'s read finds)
            e = entries.parse(cid, value)
        return cost

    def on(
        self, cid: bytes, data: bytes | memoryview, base: bytes, level: int, alone: int | None = None
    ) -> Frame | None:
        """A delta frame for chunk ``cid`` against the stored chunk ``base``, or None (no gain,
        a chain already :attr:`max_depth` long, or a base that is not a packed chunk);
        ``alone`` as :func:`delta_frame` takes it."""
        if base == cid or self.max_depth < 1 or len(data) < DELTA_MIN:
            return None
        try:
            value = self._get("chunks", base)
            if not entries.is_entry(value):
                return None  # a format-1 chunk: never a base (the store is being upgraded)
            bentry = entries.parse(base, value)
            depth = bentry.depth + 1 if bentry.codec == CODEC_DELTA else 1
            if depth > self.max_depth:
                return None
            base_plain = objects.load_chunk(self._get, base)
        except CorruptError:
            return None  # a damaged base is verify's business: store this chunk whole
        return delta_frame(cid, data, base, base_plain, depth, level, alone)


_K = TypeVar("_K")


def decode_pays(cost: int, based: int) -> bool:
    """Whether decoding ``cost`` plain bytes for delta bases pays for ``based`` new bytes."""
    return cost <= DECODE_FLOOR or cost <= DECODE_RATIO * based


def within_budget(costs: dict[_K, int], based: dict[_K, int], budget: int) -> tuple[set[_K], int]:
    """The frames (keys of ``costs``: decode cost; ``based``: new bytes served) to decode: those
    that pay, then the others, cheapest per byte served first, within ``budget`` bytes; and
    what is left of it."""
    kept = {k for k in costs if decode_pays(costs[k], based[k])}
    for k in sorted((k for k in costs if k not in kept), key=lambda k: costs[k] / max(based[k], 1)):
        if costs[k] <= budget:
            budget -= costs[k]
            kept.add(k)
    return kept, budget


def delta_depth_of(meta: dict[bytes, bytes]) -> int:
    """The store's longest delta chain, from its meta table (CorruptError when damaged)."""
    raw = meta.get(DELTA_DEPTH_KEY)
    if raw is None:
        return DELTA_DEPTH
    try:
        depth = int(raw)
        if not 0 <= depth <= entries.MAX_CHAIN:
            raise ValueError(depth)
    except ValueError:
        raise CorruptError("the store's config 'storage.delta-depth' is damaged") from None
    return depth
