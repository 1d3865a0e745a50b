"""Chunks and streams: how bytes are stored and read back.

A **chunk** is keyed by the BLAKE3-256 of its plain bytes; its value is one flag byte followed by
a zstd frame (``FLAG_ZSTD``) or by the plain bytes when zstd does not shrink them (``FLAG_RAW``).

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

import blake3
import msgpack
import zstandard

from snapstore.errors import CorruptError

FLAG_RAW = 0
FLAG_ZSTD = 1

DEFAULT_LEVEL = 3

#: Index nodes: a boundary after a child whose id's first byte has these bits clear (1 in 16),
#: with at least 2 and at most NODE_MAX children so every level is at least halved.
NODE_MASK = 0x0F
NODE_MAX = 64

_local = threading.local()

Ref = tuple[bytes, int]  # (id, plain size)


def chunk_id(data: bytes | memoryview) -> bytes:
    """The BLAKE3-256 of ``data``: the id of a chunk (and of a stream) holding it."""
    return blake3.blake3(data).digest()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    comp = cache.get(level)
    if comp is None:
        comp = cache[level] = zstandard.ZstdCompressor(level=level, write_checksum=False)
    return comp


def _decompressor() -> zstandard.ZstdDecompressor:
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


def decode_chunk(cid: bytes, value: bytes | None, *, check: bool = True) -> bytes:
    """Plain bytes of a stored chunk value; raises CorruptError if missing or damaged."""
    if value is None:
        raise CorruptError(f"chunk {cid.hex()} is missing from the store")
    if not value:
        raise CorruptError(f"chunk {cid.hex()} is empty in the store")
    flag = value[0]
    if flag == FLAG_RAW:
        data = bytes(value[1:])
    elif flag == FLAG_ZSTD:
        try:
            data = _decompressor().decompress(value[1:])
        except zstandard.ZstdError as exc:
            raise CorruptError(f"chunk {cid.hex()} does not decompress ({exc})") from exc
    else:
        raise CorruptError(f"chunk {cid.hex()} has an unknown flag {flag}")
    if check and chunk_id(data) != cid:
        raise CorruptError(f"chunk {cid.hex()} is corrupt (its content does not match its hash)")
    return data


# -- building streams -----------------------------------------------------------------------


def build_index(
    leaves: list[Ref], emit: Callable[[bytes, bytes], None]
) -> tuple[int, bytes]:
    """Build the index tree over ``leaves``; ``emit(id, plain)`` receives each new index node.

    Returns ``(height, root id)``; height 0 means the single leaf is the root.
    """
    level = leaves
    height = 0
    while len(level) > 1:
        parents: list[Ref] = []
        node: list[Ref] = []
        for i, ref in enumerate(level):
            node.append(ref)
            last = i == len(level) - 1
            if last or len(node) >= NODE_MAX or (len(node) >= 2 and ref[0][0] & NODE_MASK == 0):
                plain = msgpack.packb([[c, s] for c, s in node])
                nid = chunk_id(plain)
                emit(nid, plain)
                parents.append((nid, sum(s for _, s in node)))
                node = []
        level = parents
        height += 1
    return height, level[0][0]


def stream_record(size: int, height: int, root: bytes) -> bytes:
    return msgpack.packb([size, height, root])


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
    ``(stream id, size, stream record or None)``.
    """

    def __init__(self) -> None:
        self._hasher = blake3.blake3()
        self._leaves: list[Ref] = []
        self._size = 0

    def add(self, data: bytes | memoryview, cid: bytes | None = None) -> bytes:
        """Append one chunk's bytes; returns its id."""
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
        sid = self._hasher.digest()
        if len(self._leaves) == 1:
            return sid, self._size, None
        emit = (lambda nid, plain: put(nid, encode_chunk(plain, level))) if encode else put
        height, root = build_index(self._leaves, emit)
        return sid, self._size, stream_record(self._size, height, root)


def write_stream(
    chunks: Iterable[bytes],
    put: Callable[[bytes, bytes], None],
    level: int = DEFAULT_LEVEL,
    *,
    encode: bool = True,
) -> tuple[bytes, int, bytes | None]:
    """Store a stream made of ``chunks`` through ``put(id, value)``.

    ``value`` is the stored (encoded) form, or the plain bytes when ``encode`` is False (for a
    caller that compresses only the chunks the store lacks).  Returns ``(stream id, size,
    stream record or None)``; the caller stores the record.
    """
    builder = StreamBuilder()

    def emit(cid: bytes, data: bytes | memoryview) -> None:
        put(cid, encode_chunk(data, level) if encode else bytes(data))

    empty = True
    for data in chunks:
        empty = False
        emit(builder.add(data), data)
    if empty:  # an empty stream is the empty chunk, which must be stored like any other
        emit(builder.add(b""), b"")
    return builder.finish(put, level, encode=encode)


def write_stream_known(
    chunks: Iterable[tuple[bytes, bytes]],
    put: Callable[[bytes, bytes], None],
    level: int = DEFAULT_LEVEL,
    *,
    encode: bool = True,
) -> tuple[bytes, int, bytes | None]:
    """Like :func:`write_stream`, for chunks given as ``(data, id)`` with their ids known."""
    builder = StreamBuilder()
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


def iter_stream(get: Callable[[str, bytes], bytes | None], sid: bytes) -> Iterator[bytes]:
    """Yield the plain chunks of stream ``sid``; ``get(table, key)`` reads the store.

    Every chunk is checked against its hash; a missing or damaged object raises CorruptError.
    """
    record = get("streams", sid)
    if record is None:
        yield decode_chunk(sid, get("chunks", sid))
        return
    size, height, root = parse_stream_record(sid, record)
    total = 0
    for data in _iter_node(get, root, height):
        total += len(data)
        yield data
    if total != size:
        raise CorruptError(f"stream {sid.hex()} has {total} bytes, its record says {size}")


def _iter_node(get, nid: bytes, height: int) -> Iterator[bytes]:
    children = parse_index_node(nid, decode_chunk(nid, get("chunks", nid)))
    for cid, size in children:
        if height == 1:
            data = decode_chunk(cid, get("chunks", cid))
            if len(data) != size:
                raise CorruptError(f"chunk {cid.hex()} has {len(data)} bytes, its index says {size}")
            yield data
        else:
            yield from _iter_node(get, cid, height - 1)


def stream_chunk_ids(get, sid: bytes) -> Iterator[tuple[bytes, bool]]:
    """Yield ``(id, is_index)`` of every chunk a stream references (without reading leaves)."""
    record = get("streams", sid)
    if record is None:
        yield sid, False
        return
    _, height, root = parse_stream_record(sid, record)
    stack = [(root, height)]
    while stack:
        nid, h = stack.pop()
        yield nid, True
        for cid, _ in parse_index_node(nid, decode_chunk(nid, get("chunks", nid))):
            if h == 1:
                yield cid, False
            else:
                stack.append((cid, h - 1))


def read_stream(get, sid: bytes) -> bytes:
    return b"".join(iter_stream(get, sid))


def leaf_ids(get, sid: bytes) -> list[bytes]:
    """The data chunk ids of a stream, in order, reading only its index nodes."""
    record = get("streams", sid)
    if record is None:
        return [sid]
    _, height, root = parse_stream_record(sid, record)
    out: list[bytes] = []

    def walk(nid: bytes, h: int) -> None:
        for cid, _ in parse_index_node(nid, decode_chunk(nid, get("chunks", nid))):
            if h == 1:
                out.append(cid)
            else:
                walk(cid, h - 1)

    walk(root, height)
    return out
