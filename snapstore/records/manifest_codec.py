"""Re-encoding a manifest that changed in a few entries: only the chunks around the change.

A long-lived Store (the service, an agent's process) writes a manifest after every tool call,
and usually one or two entries differ from the last one it wrote.  Manifest chunks are cut
between records by their keys (:func:`snapstore.storage.chunker.cut_records`), and a cut resets
all state, so a chunk depends only on the records since the cut before it.  A :class:`Codec`
keeps the last encoding (entries, where each chunk ends, the chunks); the next one keeps
every chunk before the first changed entry and every chunk after the first *key-marked* cut
that lies in the unchanged tail, and cuts only what is between.  The result is byte for byte
what encoding the whole list gives (tests/test_manifest_cut.py checks it against the
record-by-record definition).

The codec is an encoding cache: by default every chunk (and index node) is handed to ``put``
and the caller stores those the store lacks.  A caller that knows the last encoding is stored
(it is the parent checkpoint's manifest) says ``stored=True``: then only the chunks and index
nodes made afresh are handed over, and nothing is done per kept chunk.
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence

from snapstore.records.manifest import Entry, cut_in_blocks, packer
from snapstore.records.schema import Put
from snapstore.storage import chunker, objects
from snapstore.storage.index_tree import IndexTree

#: Entries compared per step when looking for the first and last difference (a slice
#: comparison runs in C; unchanged entries are the same objects, so each test is a pointer test).
_STEP = 256


class Codec:
    """The last manifest :func:`encode_chunks` produced, kept by the caller between calls."""

    __slots__ = (
        "entries", "ends", "chunks", "cids", "leaves", "size", "fresh", "changed", "mid",
        "changed_from", "index", "kept_prefix", "kept_suffix",
    )  # fmt: skip

    def __init__(self) -> None:
        self.entries: Sequence[Entry] = []
        #: For each chunk, the index in ``entries`` just past its last record.
        self.ends: list[int] = []
        #: Each chunk's bytes while the call that cut it runs; None once handed over (the
        #: bytes are the entries' records, packed again when asked for: :meth:`chunk`), so a
        #: long-lived Store does not keep its whole manifest encoded (~70 bytes a file).
        self.chunks: list[bytes | None] = []
        self.cids: list[bytes] = []
        #: ``(id, size)`` of each chunk, and their total: the index tree's leaves.
        self.leaves: list[tuple[bytes, int]] = []
        self.size = 0
        #: Where the chunks the last call cut afresh are: ``chunks[start:stop]`` for each pair.
        self.fresh: list[tuple[int, int]] = []
        #: The entries of the last call's changed region: ``(before, after)``; every entry
        #: outside them was the same on both sides.  None after a first (whole) encoding.
        self.changed: tuple[list[Entry], list[Entry]] | None = None
        #: The stream id of the current encoding, and of the one ``changed`` started from.
        self.mid: bytes | None = None
        self.changed_from: bytes | None = None
        #: The index tree of the current encoding, and how many of its chunks at the start
        #: and at the end the last call kept (the tree is re-cut only between).
        self.index = IndexTree()
        self.kept_prefix = 0
        self.kept_suffix = 0

    def chunk(self, i: int) -> bytes:
        """Chunk ``i`` of the current encoding (its entries' records packed again if dropped)."""
        data = self.chunks[i]
        if data is None:
            pack = packer()
            data = b"".join([pack(e) for e in self.entries[self.ends[i - 1] if i else 0 : self.ends[i]]])
        return data

    def encoded(self) -> list[bytes]:
        """Every chunk of the current encoding."""
        return [self.chunk(i) for i in range(len(self.chunks))]

    def changes_since(self, mid: bytes) -> tuple[dict[bytes, Entry], dict[bytes, Entry]] | None:
        """``(old, new)`` entries by path that may differ between manifest ``mid`` and the
        current one (all others are equal), or None when the last call did not start from it."""
        if self.changed is None or self.changed_from != mid:
            return None
        before, after = self.changed
        return {e.path: e for e in before}, {e.path: e for e in after}


def write_manifest(
    codec: Codec,
    entries: Sequence[Entry],
    put: Put,
    level: int = objects.DEFAULT_LEVEL,
    *,
    encode: bool = True,
    stored: bool = False,
    span: Span | None = None,
    skip: frozenset[bytes] = frozenset(),
) -> tuple[bytes, int, bytes | None]:
    """:func:`snapstore.records.manifest.write_manifest` through ``codec``, which holds the last
    encoding (one manifest at a time): a manifest that changed in a few entries re-encodes and
    hashes only the chunks around them.  The same stream, byte for byte.

    ``stored``: the codec's last encoding is in the store (the caller's parent manifest), so
    only new chunks and index nodes go to ``put``.  ``span``: ``(base, runs)`` when ``entries``
    are the list ``base`` with only those runs changed (ops.snapshot.ordered knows them):
    spares comparing every entry, and each run is re-cut on its own.  ``skip``: ids of chunks
    known to be stored (the parent manifest's, when the last encoding is not it): never handed
    over, nor packed again to be."""
    previous = codec.mid
    codec.mid = None  # until this encoding's stream id is known
    store = (lambda cid, plain: put(cid, objects.encode_chunk(plain, level))) if encode else put
    emit = (lambda cid, plain: None if cid in skip else store(cid, plain)) if skip else store
    try:
        first = not codec.cids  # (a whole encoding: each chunk handed over as it is cut)
        whole = encode_chunks(codec, entries, packer(), span, emit if first else None) or not stored or previous is None
        for start, stop in [] if first else [(0, len(codec.chunks))] if whole else codec.fresh:
            for i in range(start, stop):
                if codec.cids[i] not in skip:
                    store(codec.cids[i], codec.chunk(i))
        result = _write_index(codec, store, whole)
        for start, stop in codec.fresh:  # (handed over: see Codec.chunks)
            codec.chunks[start:stop] = [None] * (stop - start)
    except BaseException:
        codec.__init__()  # type: ignore[misc]  # (possibly half updated: encoded whole next time)
        raise
    codec.changed_from, codec.mid = previous, result[0]
    return result


def _write_index(codec: Codec, store: Put, whole: bool) -> tuple[bytes, int, bytes | None]:
    if len(codec.leaves) <= 1:
        codec.index = IndexTree()
        if not codec.leaves:  # (the empty manifest: one empty chunk)
            empty = objects.chunk_id(b"")
            store(empty, b"")
            return empty, 0, None
        return codec.leaves[0][0], codec.size, None
    height, root = codec.index.update(codec.leaves, codec.kept_prefix, codec.kept_suffix, store)
    if whole:  # (index nodes kept from the stored tree are stored: only new ones went to put)
        for nid, plain in codec.index.nodes():
            store(nid, plain)
    record = objects.stream_record(codec.size, height, root)
    return objects.tree_id(record), codec.size, record


#: A changed run: old entries ``[old_lo, old_hi)`` became new entries ``[new_lo, new_hi)``.
Run = tuple[int, int, int, int]

#: ``(base list, runs)``: the new entries are ``base`` with only these runs changed, in order
#: (see :func:`write_manifest`).
Span = tuple[Sequence[Entry], list[Run]]


def encode_chunks(
    codec: Codec, entries: Sequence[Entry], pack: Callable[[Entry], bytes], span: Span | None = None, emit: Put | None = None
) -> bool:
    """Cut sorted ``entries`` into chunks: ``codec`` is updated to them (``chunks``, ``cids``,
    ``leaves``; ``fresh`` says which were cut afresh).  True when all were (no last encoding):
    then, with ``emit``, each chunk is handed to it as it is cut and not kept (Codec.chunks).

    Each changed run is re-cut on its own, from the start of the chunk holding its first
    change to the first cut after it that lies on a key-marked record (a cut the old and the
    new list both make); runs whose re-cut regions meet are cut as one.  So 100 scattered
    edits re-cut ~100 regions of a chunk or two, not everything between the first and the last.
    """
    old = codec.entries
    if not codec.cids:
        _Cutter(codec).finish_whole(entries, pack, emit)
        codec.changed = None
        codec.kept_prefix = codec.kept_suffix = 0
        return True
    runs = span[1] if span is not None and span[0] is old else _one_run(old, entries)
    cut = _Cutter(codec)
    # An unchanged entry's record is packed again where a region needs it (the same bytes: the
    # same entry object): no record is kept per entry (~190 bytes a file in a long-lived Store).
    ends = codec.ends
    before: list[Entry] = []
    after: list[Entry] = []
    r = 0
    while r < len(runs):
        olo = runs[r][0]
        # The chunk holding the run's first changed entry (the last chunk for an append); a
        # cut forced there by the size of the record that changed is not a safe start.
        k0 = min(bisect_right(ends, olo), len(ends) - 1)
        if k0 > cut.k and ends[k0 - 1] == olo and zlib.crc32(old[olo - 1].path) & chunker.RECORD_MASK:
            k0 -= 1
        k0 = max(k0, cut.k)
        start = ends[k0 - 1] if k0 else 0
        cut.keep(k0)
        region_delta = cut.delta
        pieces: list[bytes] = []
        at = start
        while True:
            olo, ohi, nlo, nhi = runs[r]
            before.extend(old[olo:ohi])
            after.extend(entries[nlo:nhi])
            pieces.extend(pack(e) for e in old[at:olo])
            pieces.extend(pack(e) for e in entries[nlo:nhi])
            at, cut.delta = ohi, nhi - ohi
            # The first chunk that ends on a key-marked record after the run: both lists cut
            # there, and what follows stays (unless the next run starts inside that chunk).
            k1 = len(ends)
            for k in range(max(k0, bisect_left(ends, ohi + 1)), len(ends)):
                if not zlib.crc32(old[ends[k] - 1].path) & chunker.RECORD_MASK:
                    k1 = k
                    break
            if r + 1 < len(runs) and (k1 == len(ends) or ends[k1] > runs[r + 1][0]):
                r += 1
                continue
            break
        stop = ends[k1] if k1 < len(ends) else len(old)
        pieces.extend(pack(e) for e in old[at:stop])
        cut.recut(entries, pieces, start + region_delta, min(k1 + 1, len(ends)))
        r += 1
    cut.keep(len(ends))
    codec.changed = (before, after)
    codec.kept_prefix = cut.first_fresh
    codec.kept_suffix = cut.kept_after
    cut.apply(entries)
    return False


def _one_run(old: Sequence[Entry], new: Sequence[Entry]) -> list[Run]:
    """The run between the first and the last difference (none when the lists are equal)."""
    p = _common_prefix(old, new)
    s = _common_suffix(old, new, min(len(old), len(new)) - p)
    if p == len(old) == len(new):
        return []
    return [(p, len(old) - s, p, len(new) - s)]


class _Cutter:
    """The new encoding, from old chunks kept and regions cut afresh, left to right.

    The codec's lists are edited where they change, never copied (a copy of a million-file
    tree's ~30,000 chunks touches every chunk's objects, their reference counts, at each
    checkpoint): :meth:`keep` and :meth:`recut` only note what to do, reading the old lists,
    and :meth:`apply` does it."""

    __slots__ = (
        "codec", "k", "delta", "shift", "edits", "shifts",
        "ends", "chunks", "cids", "leaves", "size", "fresh", "first_fresh", "kept_after",
    )  # fmt: skip

    def __init__(self, codec: Codec) -> None:
        self.codec = codec
        #: The first old chunk not yet kept or replaced.
        self.k = 0
        #: New index minus old index of the unchanged entries being kept.
        self.delta = 0
        #: New index minus old index of the chunks being kept (the regions' chunks added, less
        #: those they replace, so far).
        self.shift = 0
        #: Regions to put in place of old chunks: ``(first, stop, ends, chunks, cids, leaves)``.
        self.edits: list[tuple[int, int, list[int], list[bytes | None], list[bytes], list[tuple[bytes, int]]]] = []
        #: Old chunks kept whose end moves: ``(first, stop, by)``.
        self.shifts: list[tuple[int, int, int]] = []
        #: The whole encoding's lists (:meth:`finish_whole`).
        self.ends: list[int] = []
        self.chunks: list[bytes | None] = []
        self.cids: list[bytes] = []
        self.leaves: list[tuple[bytes, int]] = []
        self.size = codec.size
        self.fresh: list[tuple[int, int]] = []
        #: Old chunks kept before the first region, and after the last.
        self.first_fresh = -1
        self.kept_after = 0

    def keep(self, k_stop: int) -> None:
        """Keep the old chunks ``k`` to ``k_stop`` as they are (their ends moved by ``delta``)."""
        if k_stop > self.k and self.delta:
            self.shifts.append((self.k, k_stop, self.delta))
        self.kept_after = k_stop - self.k
        self.k = k_stop

    def recut(self, entries: Sequence[Entry], pieces: list[bytes], start_new: int, k_next: int) -> None:
        """Cut ``pieces`` (the records of new entries from ``start_new``) afresh, in place of
        the old chunks up to ``k_next``."""
        first = self.k + self.shift
        if self.first_fresh < 0:
            self.first_fresh = first
        # (The size is the old one, less the chunks replaced, plus the new: no sum over the
        # chunks kept, which are nearly all of a big tree's.)
        self.size -= sum(size for _, size in self.codec.leaves[self.k : k_next])
        keys = [e.path for e in entries[start_new : start_new + len(pieces)]]
        ends: list[int] = []
        chunks: list[bytes | None] = []
        cids: list[bytes] = []
        leaves: list[tuple[bytes, int]] = []
        for end, data in chunker.cut_record_bytes(keys, pieces):
            cid = objects.chunk_id(data)
            ends.append(start_new + end)
            chunks.append(data)
            cids.append(cid)
            leaves.append((cid, len(data)))
            self.size += len(data)
        self.edits.append((self.k, k_next, ends, chunks, cids, leaves))
        self.fresh.append((first, first + len(ends)))
        self.shift += len(ends) - (k_next - self.k)
        self.k = k_next

    def apply(self, entries: Sequence[Entry]) -> None:
        """Edit the codec's lists as :meth:`keep` and :meth:`recut` noted."""
        codec = self.codec
        ends = codec.ends
        for first, stop, by in self.shifts:  # (old indexes: before any region is put in)
            for i in range(first, stop):
                ends[i] += by
        for first, stop, new_ends, chunks, cids, leaves in reversed(self.edits):
            ends[first:stop] = new_ends
            codec.chunks[first:stop] = chunks
            codec.cids[first:stop] = cids
            codec.leaves[first:stop] = leaves
        codec.entries, codec.size, codec.fresh = entries, self.size, self.fresh
        if self.first_fresh < 0:  # (nothing changed: every chunk kept)
            codec.kept_prefix, codec.kept_suffix = len(codec.chunks), 0

    def finish_whole(self, entries: Sequence[Entry], pack: Callable[[Entry], bytes], emit: Put | None) -> None:
        """Cut every entry afresh, a block at a time (records.manifest.cut_in_blocks), each
        chunk handed to ``emit`` (if any) instead of kept: the records of a whole big tree are
        never all held at once (~100 bytes a file), nor its chunks (~70)."""
        self.first_fresh, self.size = 0, 0
        for end, data in cut_in_blocks(entries, pack):
            cid = objects.chunk_id(data)
            self.ends.append(end)
            if emit is not None:
                emit(cid, data)
            self.chunks.append(None if emit is not None else data)
            self.cids.append(cid)
            self.leaves.append((cid, len(data)))
            self.size += len(data)
        self.fresh.append((0, len(self.chunks)))
        self.finish(entries)

    def finish(self, entries: Sequence[Entry]) -> None:
        codec = self.codec
        codec.entries, codec.ends, codec.chunks = entries, self.ends, self.chunks
        codec.cids, codec.leaves, codec.size, codec.fresh = self.cids, self.leaves, self.size, self.fresh
        if self.first_fresh < 0:  # (nothing changed: every chunk kept)
            codec.kept_prefix, codec.kept_suffix = len(self.chunks), 0


def _common_prefix(a: Sequence[Entry], b: Sequence[Entry]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n:
        j = min(i + _STEP, n)
        if a[i:j] != b[i:j]:
            break
        i = j
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _common_suffix(a: Sequence[Entry], b: Sequence[Entry], limit: int) -> int:
    """How many entries at the ends of ``a`` and ``b`` are equal (at most ``limit``)."""
    na, nb = len(a), len(b)
    s = 0
    while s < limit:
        t = min(s + _STEP, limit)
        if a[na - t : na - s] != b[nb - t : nb - s]:
            break
        s = t
    while s < limit and a[na - 1 - s] == b[nb - 1 - s]:
        s += 1
    return s
