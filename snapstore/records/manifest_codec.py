"""Re-encoding a manifest that changed in a few entries: only the chunks around the change.

A long-lived Store (the service, an agent's process) writes a manifest after every tool call,
and usually one or two entries differ from the last one it wrote.  Manifest chunks are cut
between records by their keys (:func:`snapstore.storage.chunker.cut_records`), and a cut resets
all state, so a chunk depends only on the records since the cut before it.  A :class:`Codec`
keeps the last encoding (entries, their records, where each chunk ends); the next one keeps
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

from snapstore.records.manifest import Entry, packer
from snapstore.records.schema import Put
from snapstore.storage import chunker, objects
from snapstore.storage.index_tree import IndexTree

#: Entries compared per step when looking for the first and last difference (a slice
#: comparison runs in C; unchanged entries are the same objects, so each test is a pointer test).
_STEP = 256


class Codec:
    """The last manifest :func:`encode_chunks` produced, kept by the caller between calls."""

    __slots__ = (
        "entries", "records", "ends", "chunks", "cids", "leaves", "size", "fresh", "changed", "mid",
        "changed_from", "index", "kept_prefix", "kept_suffix",
    )  # fmt: skip

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.records: list[bytes] = []
        #: For each chunk, the index in ``entries`` just past its last record.
        self.ends: list[int] = []
        self.chunks: list[bytes] = []
        self.cids: list[bytes] = []
        #: ``(id, size)`` of each chunk, and their total: the index tree's leaves.
        self.leaves: list[tuple[bytes, int]] = []
        self.size = 0
        #: Where the chunks the last call cut afresh are: ``chunks[start:stop]``.
        self.fresh = (0, 0)
        #: The entries of the last call's changed region: ``(before, after)``; every entry
        #: outside them was the same on both sides.  None after a first (whole) encoding.
        self.changed: tuple[list[Entry], list[Entry]] | None = None
        #: The stream id of the current encoding, and of the one ``changed`` started from.
        self.mid: bytes | None = None
        self.changed_from: bytes | None = None
        #: The index tree of the current encoding, and how many of its chunks at the start
        #: and at the end the last call kept (objects.write_tree_stream builds only between).
        self.index = IndexTree()
        self.kept_prefix = 0
        self.kept_suffix = 0

    def changes_since(self, mid: bytes) -> tuple[dict[bytes, Entry], dict[bytes, Entry]] | None:
        """``(old, new)`` entries by path that may differ between manifest ``mid`` and the
        current one (all others are equal), or None when the last call did not start from it."""
        if self.changed is None or self.changed_from != mid:
            return None
        before, after = self.changed
        return {e.path: e for e in before}, {e.path: e for e in after}


def write_manifest(
    codec: Codec,
    entries: list[Entry],
    put: Put,
    level: int = objects.DEFAULT_LEVEL,
    *,
    encode: bool = True,
    stored: bool = False,
    span: Span | None = None,
) -> tuple[bytes, int, bytes | None]:
    """:func:`snapstore.records.manifest.write_manifest` through ``codec``, which holds the last
    encoding (one manifest at a time): a manifest that changed in a few entries re-encodes and
    hashes only the chunks around them.  The same stream, byte for byte.

    ``stored``: the codec's last encoding is in the store (the caller's parent manifest), so
    only new chunks and index nodes go to ``put``.  ``span``: ``(base, prefix, suffix)`` when
    ``entries`` are the list ``base`` with only entries between its first ``prefix`` and last
    ``suffix`` changed (ops.snapshot.ordered knows it): spares comparing every entry."""
    previous = codec.mid
    codec.mid = None  # until this encoding's stream id is known
    store = (lambda cid, plain: put(cid, objects.encode_chunk(plain, level))) if encode else put
    try:
        whole = encode_chunks(codec, entries, packer(), span) or not stored or previous is None
        start, stop = (0, len(codec.chunks)) if whole else codec.fresh
        for i in range(start, stop):
            store(codec.cids[i], codec.chunks[i])
        result = _write_index(codec, store, whole)
    except BaseException:
        codec.index = IndexTree()  # (possibly half updated: built whole next time)
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


#: ``(base list, prefix, suffix)``: see :func:`write_manifest`.
Span = tuple[list[Entry], int, int]


def encode_chunks(codec: Codec, entries: list[Entry], pack: Callable[[Entry], bytes], span: Span | None = None) -> bool:
    """Cut sorted ``entries`` into chunks: ``codec`` is updated to them (``chunks``, ``cids``,
    ``leaves``; ``fresh`` says which were cut afresh).  True when all were (no last encoding)."""
    old = codec.entries
    if not codec.chunks:
        records = [pack(e) for e in entries]
        _replace(codec, entries, records, 0, len(entries), 0, 0, 0)
        codec.changed = None
        codec.kept_prefix = codec.kept_suffix = 0
        return True
    n_old, n_new = len(old), len(entries)
    if span is not None and span[0] is old:
        p = min(span[1], n_old, n_new)
        s = min(span[2], n_old - p, n_new - p)
    else:
        p = _common_prefix(old, entries)
        s = _common_suffix(old, entries, min(n_old, n_new) - p)
    delta = n_new - n_old
    ends = codec.ends
    # The chunk holding the first changed entry (the last chunk when entries were appended);
    # everything before it stays, and cutting restarts where it starts.
    k0 = min(bisect_right(ends, p), len(ends) - 1)
    while k0 and ends[k0 - 1] == p and zlib.crc32(old[p - 1].path) & chunker.RECORD_MASK:
        k0 -= 1  # that cut was forced by the size of the record that changed: not a safe start
    start = ends[k0 - 1] if k0 else 0
    # The first chunk that ends on a key-marked record of the unchanged tail: the cut after it
    # happens in the new list too, and everything after it stays.
    tail = n_old - s
    k1 = len(ends)
    for k in range(max(k0, bisect_left(ends, tail + 1)), len(ends)):
        if not zlib.crc32(old[ends[k] - 1].path) & chunker.RECORD_MASK:
            k1 = k
            break
    stop = ends[k1] + delta if k1 < len(ends) else n_new
    old_records = codec.records
    middle = [
        old_records[i] if i < p else old_records[i - delta] if i >= n_new - s else pack(entries[i])
        for i in range(start, stop)
    ]
    records = old_records[:start] + middle + old_records[ends[k1] if k1 < len(ends) else n_old :]
    codec.changed = (old[p:tail], entries[p : n_new - s])
    codec.kept_prefix, codec.kept_suffix = k0, len(ends) - k1 - 1 if k1 < len(ends) else 0
    _replace(codec, entries, records, start, stop, k0, k1, delta)
    return False


def _replace(codec: Codec, entries: list[Entry], records: list[bytes], start: int, stop: int, k0: int, k1: int, delta: int) -> None:
    """Cut ``records[start:stop]`` afresh in place of the old chunks ``k0`` to ``k1`` (all from
    ``k0`` on when ``k1`` is past the last), keeping the others (their ends shifted by ``delta``)."""
    keys = [e.path for e in entries[start:stop]]
    ends: list[int] = []
    chunks: list[bytes] = []
    cids: list[bytes] = []
    leaves: list[tuple[bytes, int]] = []
    for end, data in chunker.cut_record_bytes(keys, records[start:stop]):
        cid = objects.chunk_id(data)
        ends.append(start + end)
        chunks.append(data)
        cids.append(cid)
        leaves.append((cid, len(data)))
    last = min(k1 + 1, len(codec.ends))  # the first old chunk kept after the fresh ones
    size = codec.size - sum(s for _, s in codec.leaves[k0:last]) + sum(s for _, s in leaves)
    tail_ends = codec.ends[last:]
    codec.ends = codec.ends[:k0] + ends + ([e + delta for e in tail_ends] if delta else tail_ends)
    codec.chunks = codec.chunks[:k0] + chunks + codec.chunks[last:]
    codec.cids = codec.cids[:k0] + cids + codec.cids[last:]
    codec.leaves = codec.leaves[:k0] + leaves + codec.leaves[last:]
    codec.entries, codec.records, codec.size, codec.fresh = entries, records, size, (k0, k0 + len(chunks))


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
