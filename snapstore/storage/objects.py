"""Chunks and streams: how bytes are stored and read back.

A **chunk** is keyed by the BLAKE3-256 of its plain bytes.  In a format-1 store its value is one
flag byte followed by a zstd frame (``FLAG_ZSTD``) or by the plain bytes when zstd does not shrink
them (``FLAG_RAW``).  In a format-2 store the value is an index entry into a pack
(:mod:`snapstore.storage.entries`, written by :mod:`snapstore.storage.packs`); both are read by
:func:`load_chunk`, so every reader works on either format.

A **stream** is any byte sequence (a file's content, a manifest, a conversation).  Its id is the
BLAKE3-256 of the whole content.  A stream of one chunk is that chunk (same id, no extra record).
A longer stream has a record in the ``streams`` table, ``[size, height, root]``, where ``root`` is
an index chunk: a msgpack list of ``[child id, child size]`` pairs whose children are index chunks
of the level below or, at height 1, the data chunks.  Index nodes are cut where a child id meets
a mask, so a local change rewrites one node per level and the tree dedups like the data does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import blake3
import msgpack

from snapstore.errors import CorruptError
from snapstore.storage import entries
from snapstore.storage.index_tree import Ref, build_index

if TYPE_CHECKING:
    import zstandard

FLAG_RAW = 0
FLAG_ZSTD = 1

DEFAULT_LEVEL = 3

#: No chunk's plain bytes may exceed this (data chunks are at most chunker.MAX_SIZE, manifest and
#: conversation chunks hold whole records): a hard cap on what one decompression allocates.
MAX_CHUNK_BYTES = 64 << 20

#: No stream may claim more (a hard cap on the work of walking a damaged or hostile index).
MAX_STREAM_BYTES = 1 << 42

#: An index node lists at most NODE_MAX children of ~44 packed bytes: far below this bound.
INDEX_NODE_MAX_BYTES = 1 << 20

_local = threading.local()

#: ``get(table, key)``: how readers reach the store (a read view's ``get``).
Getter = Callable[[str, bytes], "bytes | None"]


def chunk_id(data: bytes | memoryview) -> bytes:
    """The BLAKE3-256 of ``data``: the id of a chunk (and of a stream) holding it."""
    digest: bytes = blake3.blake3(data).digest()
    return digest


def pack_id(pack: bytes) -> bytes:
    """The key of a format-2 pack: the first 16 bytes of the BLAKE3 of its bytes."""
    digest: bytes = blake3.blake3(pack).digest()[:16]
    return digest


def _compressor(level: int) -> zstandard.ZstdCompressor:
    import zstandard  # here, not at import: a no-change snapshot never needs it

    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    comp = cache.get(level)
    if comp is None:
        comp = cache[level] = zstandard.ZstdCompressor(level=level, write_checksum=False)
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
    import zstandard  # here, not at import: a no-change snapshot never needs it

    d = getattr(_local, "decompressor", None)
    if d is None:
        d = _local.decompressor = zstandard.ZstdDecompressor()
    return d


def encode_chunk(data: bytes | memoryview, level: int = DEFAULT_LEVEL) -> bytes:
    """The stored value of a chunk: compressed when that makes it smaller, else raw."""
    if len(data) >= 64:
        packed = _compressor(level).compress(data)
        if len(packed) < len(data):
            return bytes((FLAG_ZSTD,)) + packed
    return bytes((FLAG_RAW,)) + bytes(data)


def decode_chunk(
    cid: bytes, value: bytes | None, *, check: bool = True, max_size: int = MAX_CHUNK_BYTES
) -> bytes:
    """Plain bytes of a stored chunk value; raises CorruptError if missing or damaged.

    Decompression is bounded by ``max_size`` (the size the index records for the chunk when the
    caller knows it, else :data:`MAX_CHUNK_BYTES`): a frame whose header claims more, or that
    inflates past it, is damage, and no more than ``max_size`` bytes are ever allocated.
    """
    if value is None:
        raise CorruptError(f"chunk {cid.hex()} is missing from the store")
    if not value:
        raise CorruptError(f"chunk {cid.hex()} is empty in the store")
    max_size = min(max_size, MAX_CHUNK_BYTES)
    flag = value[0]
    if flag == FLAG_RAW:
        data = bytes(value[1:])
    elif flag == FLAG_ZSTD:
        data = _inflate(cid, value[1:], max_size)
    else:
        raise CorruptError(f"chunk {cid.hex()} has an unknown flag {flag}")
    if len(data) > max_size:
        raise CorruptError(f"chunk {cid.hex()} holds {len(data)} bytes, more than the {max_size} expected")
    if check and chunk_id(data) != cid:
        raise CorruptError(f"chunk {cid.hex()} is corrupt (its content does not match its hash)")
    return data


def load_chunk(
    get: Getter,
    cid: bytes,
    *,
    max_size: int = MAX_CHUNK_BYTES,
    check: bool = True,
    whole_frame: bool = False,
) -> bytes:
    """The plain bytes of chunk ``cid``, whichever format stores it; raises CorruptError.

    ``max_size`` bounds what is accepted (the size an index gives the chunk, when known).
    ``whole_frame``: the caller will read the chunks that follow (a long stream), so a solid
    frame is decoded whole at once rather than up to this chunk first.
    """
    cached = entries.cached_chunk(cid)
    if cached is not None:
        if len(cached) > max_size:
            raise CorruptError(f"chunk {cid.hex()} holds {len(cached)} bytes, more than the {max_size} expected")
        return cached
    value = get("chunks", cid)
    if not entries.is_entry(value):
        return decode_chunk(cid, value, check=check, max_size=max_size)
    data = _load_packed(get, cid, value, min(max_size, MAX_CHUNK_BYTES), whole_frame)
    if check:
        if chunk_id(data) != cid:
            raise CorruptError(f"chunk {cid.hex()} is corrupt (its content does not match its hash)")
        entries.remember_chunk(cid, data)
    return data


def _load_packed(get: Getter, cid: bytes, value: bytes, max_size: int, whole_frame: bool) -> bytes:
    entry = entries.parse(cid, value)
    if entry.size > max_size:
        raise CorruptError(f"chunk {cid.hex()} holds {entry.size} bytes, more than the {max_size} expected")

    def load_base() -> bytes:
        base = entry.base
        assert base is not None
        bvalue = get("chunks", base)
        if bvalue is None:
            raise CorruptError(f"chunk {cid.hex()}: its delta base {base.hex()} is missing")
        if entries.is_entry(bvalue):
            bentry = entries.parse(base, bvalue)
            if bentry.codec == entries.CODEC_DELTA and bentry.depth >= entry.depth:
                # Depths strictly fall along a chain, so a chain is finite and loop-free.
                raise CorruptError(f"chunk {cid.hex()}: its delta chain loops (through {base.hex()})")
        return load_chunk(get, base)

    plain = entries.frame_plain(
        cid,
        entry,
        lambda: _frame(get, cid, entry),
        load_base if entry.codec == entries.CODEC_DELTA else None,
        whole=whole_frame,
    )
    return entries.slice_chunk(cid, entry, plain)


def _frame(get: Getter, cid: bytes, entry: entries.PackEntry) -> bytes:
    """The stored bytes of ``entry``'s frame.  When ``get`` is a view's own method and the view
    reads parts of values (the LMDB view's ``part``), only the frame's bytes are copied, not
    the whole pack."""
    part = getattr(getattr(get, "__self__", None), "part", None)
    if part is None:
        return entries.frame_bytes(cid, entry, get("packs", entry.pack))
    start = entry.frame_off
    got: tuple[int, bytes] | None = part("packs", entry.pack, start, start + entry.frame_len)
    return entries.frame_part(cid, entry, got)


def _inflate(cid: bytes, frame: bytes, max_size: int) -> bytes:
    import zstandard  # here, not at import: a no-change snapshot never needs it

    try:
        claimed = zstandard.frame_content_size(frame)
        if claimed > max_size:
            # zstandard allocates what the header claims: refuse before it does.
            raise CorruptError(
                f"chunk {cid.hex()} claims {claimed} bytes, more than the {max_size} expected"
            )
        # Without a size in the header, max_output_size bounds the output buffer.
        data: bytes = _decompressor().decompress(frame, max_output_size=max(max_size, 1))
    except zstandard.ZstdError as exc:
        raise CorruptError(f"chunk {cid.hex()} does not decompress ({exc})") from exc
    return data


# -- building streams -----------------------------------------------------------------------


def stream_record(size: int, height: int, root: bytes) -> bytes:
    """The ``streams`` table value of a stream of more than one chunk."""
    packed: bytes = msgpack.packb([size, height, root])
    return packed


#: The BLAKE3 key-derivation context of tree ids: a hash function of its own, so no tree id
#: is the plain BLAKE3 of any byte string (a one-chunk stream's id).
TREE_ID_CONTEXT = "snapstore 2026-11-26 stream tree id v1"


def tree_id(record: bytes) -> bytes:
    """The id of a stream named by its tree (manifests): BLAKE3 in key-derivation mode over
    its ``streams`` record ``[size, height, root]``.  The root names every index node and
    chunk below it by hash, so the id commits to the content as the whole-content hash does,
    and a stream that changed in one chunk gets its id from O(log n) new nodes."""
    digest: bytes = blake3.blake3(record, derive_key_context=TREE_ID_CONTEXT).digest()
    return digest


def id_matches(sid: bytes, record: bytes) -> bool:
    """Whether stream ``sid`` is named by its tree (:func:`tree_id`) through ``record``."""
    return tree_id(record) == sid


def parse_stream_record(sid: bytes, value: bytes) -> tuple[int, int, bytes]:
    try:
        size, height, root = msgpack.unpackb(value)
        if not (isinstance(size, int) and isinstance(height, int) and isinstance(root, bytes)):
            raise ValueError("bad field types")
        if height < 1 or height > 16 or len(root) != 32 or size < 0:
            raise ValueError("bad field values")
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"stream {sid.hex()} has a damaged record ({exc})") from exc
    return size, height, root


def parse_index_node(nid: bytes, plain: bytes) -> list[Ref]:
    try:
        items = msgpack.unpackb(plain)
        refs = [(bytes(c), int(s)) for c, s in items]
        if not refs or any(len(c) != 32 or s < 0 for c, s in refs):
            raise ValueError("bad entries")
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"index chunk {nid.hex()} is damaged ({exc})") from exc
    return refs


class StreamBuilder:
    """Assemble a stream from its chunks, in order; stores nothing itself.

    :meth:`add` records one chunk (its bytes feed the whole-stream hash); :meth:`finish` builds
    the index tree, hands each index node to ``put(id, stored value)`` and returns
    ``(stream id, size, stream record or None)``.  With ``tree``, a stream of more than one
    chunk is named by its tree (:func:`tree_id`, manifests) instead of its content's hash.
    """

    def __init__(self, *, tree: bool = False, content_id: bytes | None = None) -> None:
        #: ``content_id``: the content's id, when the caller hashed it whole (a buffer, in one
        #: call): each chunk's bytes are then hashed for its own id only.
        self._content_id = content_id
        self._hasher = None if tree or content_id is not None else blake3.blake3()
        self._leaves: list[Ref] = []
        self._size = 0

    def add(self, data: bytes | memoryview, cid: bytes | None = None) -> bytes:
        """Append one chunk's bytes; returns its id."""
        if self._hasher is not None:
            self._hasher.update(data)
        if cid is None:
            cid = chunk_id(data)
        self._leaves.append((cid, len(data)))
        self._size += len(data)
        return cid

    def finish(
        self, put: Callable[[bytes, bytes], None], level: int = DEFAULT_LEVEL, *, encode: bool = True
    ) -> tuple[bytes, int, bytes | None]:
        """Build the index; ``put`` gets each index node (encoded, or plain if not ``encode``)."""
        if not self._leaves:
            self.add(b"")
        if len(self._leaves) == 1:
            return self._leaves[0][0], self._size, None
        emit = (lambda nid, plain: put(nid, encode_chunk(plain, level))) if encode else put
        height, root = build_index(self._leaves, emit)
        record = stream_record(self._size, height, root)
        if self._content_id is not None:
            sid = self._content_id
        else:
            sid = tree_id(record) if self._hasher is None else self._hasher.digest()
        return sid, self._size, record


def write_stream_known(
    chunks: Iterable[tuple[bytes, bytes]],
    put: Callable[[bytes, bytes], None],
    level: int = DEFAULT_LEVEL,
    *,
    encode: bool = True,
    tree: bool = False,
) -> tuple[bytes, int, bytes | None]:
    """Store a stream made of chunks given as ``(data, id)`` through ``put(id, value)``.

    ``value`` is the stored (encoded) form, or the plain bytes when ``encode`` is False (for a
    caller that compresses only the chunks the store lacks).  Returns ``(stream id, size,
    stream record or None)``; the caller stores the record.  ``tree``: name the stream by its
    tree (:func:`tree_id`), as manifests are.
    """
    builder = StreamBuilder(tree=tree)
    empty = True
    for data, cid in chunks:
        empty = False
        builder.add(data, cid)
        put(cid, encode_chunk(data, level) if encode else data)
    if empty:
        cid = builder.add(b"")
        put(cid, encode_chunk(b"", level) if encode else b"")
    return builder.finish(put, level, encode=encode)


# -- reading streams ------------------------------------------------------------------------

#: ``(id, size, height)`` of one node of a stream's tree: height 0 is a data chunk.
Node = tuple[bytes, int, int]


def stream_size(get: Getter, sid: bytes) -> int | None:
    """The size a stream's record gives, or None for a one-chunk stream (no record)."""
    record = get("streams", sid)
    if record is None:
        return None
    return parse_stream_record(sid, record)[0]


def walk_stream(
    get: Getter, sid: bytes, *, walked: dict[bytes, int] | None = None, distinct: bool = False
) -> Iterator[Node]:
    """Yield every node of stream ``sid`` in order: each index node before its children.

    The one walk of a stream's index tree.  A one-chunk stream yields ``(sid, -1, 0)`` (its size
    is known only by decoding it).  Each index node is decoded (bounded by
    :data:`INDEX_NODE_MAX_BYTES`) and checked before its children are visited: its children's
    sizes must add up to the size its parent (or the stream record) gives it.  So a tree that
    claims more than its record is damage found at its first inconsistent node, and the walk
    never yields more data chunks than the record's size covers.

    ``walked``: index nodes already checked, with the size they cover (gc and verify share it
    across every stream they walk): such a node is yielded, its size compared, and not descended,
    so a DAG that repeats nodes costs one visit per distinct node.  ``distinct``: a node seen
    twice in this stream is damage (a manifest's chunks hold sorted, unique entries).
    Raises CorruptError.
    """
    record = get("streams", sid)
    if record is None:
        yield sid, -1, 0
        return
    size, height, root = parse_stream_record(sid, record)
    if size > MAX_STREAM_BYTES:
        raise CorruptError(f"stream {sid.hex()} claims {size} bytes, more than any stream may hold")
    seen: set[bytes] = set()
    stack: list[Node] = [(root, size, height)]
    while stack:
        nid, nsize, h = stack.pop()
        if distinct:
            if nid in seen:
                raise CorruptError(f"stream {sid.hex()} repeats chunk {nid.hex()}")
            seen.add(nid)
        yield nid, nsize, h
        if h == 0:
            continue
        if walked is not None and nid in walked:
            if walked[nid] != nsize:
                raise CorruptError(
                    f"index chunk {nid.hex()} covers {walked[nid]} bytes, its parent says {nsize}"
                )
            continue
        children = parse_index_node(nid, load_chunk(get, nid, max_size=INDEX_NODE_MAX_BYTES))
        total = sum(s for _, s in children)
        if any(s < 1 for _, s in children):
            # Only the empty stream has an empty chunk, and it has no index: a child of zero
            # bytes would let a tree of any size claim nothing.
            raise CorruptError(f"index chunk {nid.hex()} lists an empty child")
        if total != nsize:
            if not stack and h == height and nid == root:
                raise CorruptError(f"stream {sid.hex()} has {total} bytes, its record says {nsize}")
            raise CorruptError(
                f"index chunk {nid.hex()} covers {total} bytes, its parent says {nsize}"
            )
        if walked is not None:
            walked[nid] = total
        stack.extend((cid, csize, h - 1) for cid, csize in reversed(children))


def index_children(get: Getter, nid: bytes, size: int) -> list[Ref]:
    """The children of index node ``nid``, which its parent says covers ``size`` bytes, checked
    as :func:`walk_stream` checks them (for a descent that visits one path of the tree)."""
    children = parse_index_node(nid, load_chunk(get, nid, max_size=INDEX_NODE_MAX_BYTES))
    if any(s < 1 for _, s in children):
        raise CorruptError(f"index chunk {nid.hex()} lists an empty child")
    total = sum(s for _, s in children)
    if total != size:
        raise CorruptError(f"index chunk {nid.hex()} covers {total} bytes, its parent says {size}")
    return children


def iter_stream(get: Getter, sid: bytes) -> Iterator[bytes]:
    """Yield the plain chunks of stream ``sid``; ``get(table, key)`` reads the store.

    Every chunk is checked against its hash and against the size its index gives it (which
    bounds its decompression); a missing or damaged object raises CorruptError.
    """
    for cid, size, height in walk_stream(get, sid):
        if height:
            continue
        if size < 0:
            yield load_chunk(get, cid)
            continue
        data = load_chunk(get, cid, max_size=size, whole_frame=True)
        if len(data) != size:
            raise CorruptError(f"chunk {cid.hex()} has {len(data)} bytes, its index says {size}")
        yield data


def read_stream(get: Getter, sid: bytes) -> bytes:
    """The whole content of stream ``sid`` (for small streams: it is held in memory)."""
    return b"".join(iter_stream(get, sid))


def leaf_ids(get: Getter, sid: bytes, *, distinct: bool = True) -> list[bytes]:
    """The data chunk ids of a stream, in order, reading only its index nodes.

    With ``distinct`` (for manifests, whose chunks never repeat) a repeated chunk is damage, so
    the list is never longer than the store has chunks.
    """
    return [cid for cid, _, height in walk_stream(get, sid, distinct=distinct) if height == 0]
