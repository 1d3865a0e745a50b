"""Format v2 index entries: where a chunk lives inside a pack, and how it is read back.

In a v2 store the ``chunks`` table maps a chunk id (the BLAKE3-256 of its plain bytes) to a small
**entry** instead of the chunk's bytes.  The bytes live in the ``packs`` table: values of about
1 MiB, each the concatenation of **frames**.  An entry is ``FLAG_PACKED`` followed by

    codec (u8) | chunk size (u32) | offset of the chunk in the frame's plain bytes (u32)
    | frame offset in the pack (u32) | frame length (u32) | pack id (16 bytes)

all big-endian; a ``CODEC_DELTA`` entry adds ``base chunk id (32 bytes) | depth (u8)``.

* ``CODEC_ZSTD``: the frame is one zstd frame of several chunks compressed together ("solid").
  Incompressible data is kept in zstd's raw blocks (3 bytes of header per 128 KiB), so every
  frame is self-delimiting and records its plain size: an entry whose length or offset is
  damaged is found by the frame check, not only by the chunk's hash.
* ``CODEC_DELTA``: the frame is one zstd frame of this chunk alone, compressed with the plain bytes
  of the base chunk as a raw-content dictionary; ``depth`` is the chain's length (a base that is
  not a delta has depth 0, so ``depth >= 1``), and each base's depth is strictly smaller.

A v1 value (``FLAG_RAW``/``FLAG_ZSTD`` + bytes, see :mod:`snapstore.storage.objects`) stays
readable in the same table, so a v1 store and a store being upgraded read through one path.

Reading a chunk decompresses its frame; the last few frames are cached per process, shared by its threads (a file's
chunks are usually neighbours in one frame).  The cache is keyed by pack id, which is the hash
of the pack's bytes, so an entry can never be served from another store's or an older pack.
Every chunk is still checked against its id after it is sliced out of its frame.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeGuard

from snapstore.errors import CorruptError

FLAG_PACKED = 2

CODEC_ZSTD = 1
CODEC_DELTA = 2
CODECS = (CODEC_ZSTD, CODEC_DELTA)

_FIXED = struct.Struct(">BIIII16s")
_DELTA = struct.Struct(">32sB")
ENTRY_SIZE = 1 + _FIXED.size
DELTA_ENTRY_SIZE = ENTRY_SIZE + _DELTA.size

#: No frame may inflate past this (a hard cap on one decompression's allocation).
MAX_FRAME_BYTES = 64 << 20

#: No delta chain may be longer, whatever an entry claims (the configured depth is far below).
MAX_CHAIN = 64

#: A chunk ending before this fraction of its frame is decoded by prefix (streaming costs more
#: per byte than one whole decode, so a chunk near the end is cheaper decoded whole).
PREFIX_BELOW = 0.6

#: Decompressed frames kept per process (shared by its threads).
CACHE_BYTES = 16 << 20

#: Verified chunks kept per process (see :func:`cached_chunk`).
CHUNK_CACHE_BYTES = 16 << 20


class PackEntry(NamedTuple):  # (not a dataclass: importing dataclasses costs every CLI process)
    """Where one chunk's bytes are: a frame of a pack, and the slice of its plain bytes."""

    pack: bytes
    frame_off: int
    frame_len: int
    codec: int
    offset: int
    size: int
    base: bytes | None = None
    depth: int = 0

    def encode(self) -> bytes:
        """The ``chunks`` table value of this entry."""
        head = bytes((FLAG_PACKED,)) + _FIXED.pack(
            self.codec, self.size, self.offset, self.frame_off, self.frame_len, self.pack
        )
        if self.codec == CODEC_DELTA:
            assert self.base is not None
            return head + _DELTA.pack(self.base, self.depth)
        return head


def is_entry(value: bytes | None) -> TypeGuard[bytes]:
    """Whether a ``chunks`` value is a v2 pack entry (not a v1 inline chunk)."""
    return value is not None and value[:1] == bytes((FLAG_PACKED,))


def parse(cid: bytes, value: bytes) -> PackEntry:
    """The entry a ``chunks`` value holds; CorruptError when it is not a well-formed one."""
    codec = value[1] if len(value) > 1 else -1
    want = DELTA_ENTRY_SIZE if codec == CODEC_DELTA else ENTRY_SIZE
    if len(value) != want or value[0] != FLAG_PACKED or codec not in CODECS:
        raise CorruptError(f"chunk {cid.hex()} has a damaged index entry")
    codec, size, offset, frame_off, frame_len, pack = _FIXED.unpack_from(value, 1)
    base, depth = None, 0
    if codec == CODEC_DELTA:
        base, depth = _DELTA.unpack_from(value, ENTRY_SIZE)
        if not 1 <= depth <= MAX_CHAIN or base == cid or offset != 0:
            raise CorruptError(f"chunk {cid.hex()} has a damaged delta entry")
    if offset + size > MAX_FRAME_BYTES:
        raise CorruptError(f"chunk {cid.hex()} has a damaged index entry")
    return PackEntry(pack, frame_off, frame_len, codec, offset, size, base, depth)


def entry_size(head: bytes) -> int:
    """The chunk size an entry's first bytes give (0 when they are too short to say)."""
    if len(head) < 6:
        return 0
    size: int = int.from_bytes(head[2:6], "big")
    return size


# -- reading ---------------------------------------------------------------------------------

# Decompressed frames, shared by every thread of the process (restore and verify read with a
# pool: a per-thread cache decoded each frame once per thread).  Keyed by pack id, which is the
# hash of the pack's bytes, so a frame can never be stale.
#: (pack, frame offset, frame length, delta base or b"") -> plain bytes.
_FrameKey = tuple[bytes, int, int, bytes]
_frames: OrderedDict[_FrameKey, bytes] = OrderedDict()
_frame_bytes = [0]
_frames_lock = threading.Lock()


def _cached_frame(key: _FrameKey) -> bytes | None:
    with _frames_lock:
        plain = _frames.get(key)
        if plain is not None:
            _frames.move_to_end(key)
        return plain


def _remember(key: _FrameKey, plain: bytes) -> None:
    with _frames_lock:
        old = _frames.pop(key, None)
        if old is not None:
            _frame_bytes[0] -= len(old)
        _frames[key] = plain
        _frame_bytes[0] += len(plain)
        while _frame_bytes[0] > CACHE_BYTES and len(_frames) > 1:
            _, old = _frames.popitem(last=False)
            _frame_bytes[0] -= len(old)


def cached_upto(entry: PackEntry) -> int:
    """How many plain bytes of ``entry``'s frame the frame cache holds (0: none), without
    touching its order."""
    with _frames_lock:
        plain = _frames.get((entry.pack, entry.frame_off, entry.frame_len, entry.base or b""))
    return 0 if plain is None else len(plain)


def clear_cache() -> None:
    """Forget the decompressed frames and chunks (verify; tests that damage a store)."""
    with _frames_lock:
        _frames.clear()
        _frame_bytes[0] = 0
    with _chunks_lock:
        _chunks.clear()
        _chunk_bytes[0] = 0


# Verified chunks, keyed by id, shared by every thread and store of the process: an id is the
# hash of the bytes, so an entry can never be stale.  It makes the second read of a chunk free
# (a restore reads every source before its first write, then again to write it), whatever the
# order of the reads and however many frames they span.
_chunks: OrderedDict[bytes, bytes] = OrderedDict()
_chunk_bytes = [0]
_chunks_lock = threading.Lock()


def cached_chunk(cid: bytes) -> bytes | None:
    """A chunk read (and hash-checked) earlier in this process, or None."""
    with _chunks_lock:
        data = _chunks.get(cid)
        if data is not None:
            _chunks.move_to_end(cid)
        return data


def remember_chunk(cid: bytes, data: bytes) -> None:
    """Keep a hash-checked chunk for :func:`cached_chunk` (small chunks only)."""
    if len(data) > CHUNK_CACHE_BYTES // 16:
        return
    with _chunks_lock:
        if cid in _chunks:
            return
        _chunks[cid] = data
        _chunk_bytes[0] += len(data)
        while _chunk_bytes[0] > CHUNK_CACHE_BYTES:
            _, old = _chunks.popitem(last=False)
            _chunk_bytes[0] -= len(old)


def _prefix(frame: bytes, upto: int) -> bytes:
    import zstandard  # here, not at import: a no-change snapshot never needs it

    reader = zstandard.ZstdDecompressor().stream_reader(frame)
    out = bytearray()
    while len(out) < upto:
        more = reader.read(upto - len(out))
        if not more:
            break
        out += more
    return bytes(out)


def frame_bytes(cid: bytes, entry: PackEntry, pack: bytes | None) -> bytes:
    """The stored bytes of ``entry``'s frame, checked to lie inside its pack."""
    if pack is None:
        return frame_part(cid, entry, None)
    end = entry.frame_off + entry.frame_len
    return frame_part(cid, entry, (len(pack), pack[entry.frame_off : end]))


def frame_part(cid: bytes, entry: PackEntry, part: tuple[int, bytes] | None) -> bytes:
    """``entry``'s frame from ``part``, ``(length of its pack, the pack's bytes from the frame's
    offset to its end)`` (None: no such pack), checked to lie inside the pack."""
    if part is None:
        raise CorruptError(f"chunk {cid.hex()} names pack {entry.pack.hex()}, which is missing")
    pack_len, frame = part
    end = entry.frame_off + entry.frame_len
    if end > pack_len:
        raise CorruptError(
            f"chunk {cid.hex()} points outside its pack {entry.pack.hex()} "
            f"(bytes {entry.frame_off}..{end} of {pack_len})"
        )
    return frame


def zstd_frame_length(frame: bytes) -> int:
    """The length of the zstd frame at the start of ``frame``, from its block headers.

    zstd ignores bytes after a frame, so an entry whose length overshoots its frame would read
    back fine; verify and readers compare this with the entry's length instead.
    """
    import zstandard  # here, not at import: a no-change snapshot never needs it

    pos = zstandard.frame_header_size(frame)
    while True:
        if pos + 3 > len(frame):
            raise ValueError("truncated block header")
        header = int.from_bytes(frame[pos : pos + 3], "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        pos += 3 + (1 if kind == 1 else size)  # an RLE block stores one byte
        if kind == 3:
            raise ValueError("reserved block type")
        if last:
            break
    if zstandard.get_frame_parameters(frame).has_checksum:
        pos += 4
    if pos > len(frame):
        raise ValueError("truncated block")
    return pos


def inflate(
    cid: bytes, frame: bytes, limit: int, dictionary: bytes | None = None, *, upto: int | None = None
) -> bytes:
    """Decompress one zstd frame of at most ``limit`` plain bytes (else CorruptError).

    The frame must fill ``frame`` exactly and record its plain size in its header.  With
    ``upto``, decoding may stop once that many bytes are out (a prefix of the frame).
    """
    import zstandard  # here, not at import: a no-change snapshot never needs it

    try:
        claimed = zstandard.frame_content_size(frame)
        if claimed < 0:
            raise CorruptError(f"chunk {cid.hex()}: its frame does not record its size")
        if zstd_frame_length(frame) != len(frame):
            raise CorruptError(f"chunk {cid.hex()}: its entry's frame length does not match the frame")
        if claimed > limit:
            raise CorruptError(f"chunk {cid.hex()}: its frame claims {claimed} bytes, more than {limit}")
        if upto is not None and dictionary is None and upto < PREFIX_BELOW * claimed:
            return _prefix(frame, upto)
        if dictionary is None:
            plain: bytes = zstandard.ZstdDecompressor().decompress(frame, max_output_size=max(limit, 1))
        else:
            from snapstore.storage import patchfrom

            plain = patchfrom.decompress(frame, dictionary, claimed)
    except (zstandard.ZstdError, ValueError) as exc:
        raise CorruptError(f"chunk {cid.hex()}: its frame does not decompress ({exc})") from exc
    if len(plain) != claimed:
        raise CorruptError(f"chunk {cid.hex()}: its frame holds {len(plain)} bytes, its header says {claimed}")
    return plain


def frame_plain(
    cid: bytes,
    entry: PackEntry,
    load_frame: Callable[[], bytes],
    load_base: Callable[[], bytes] | None = None,
    *,
    whole: bool = False,
) -> bytes:
    """The plain bytes of ``entry``'s frame, at least up to the end of its chunk (cached).

    ``load_frame`` reads the frame's stored bytes (:func:`frame_part`) and ``load_base`` the
    delta base's plain bytes, only on a miss.
    A chunk early in a solid frame costs only the frame's prefix: zstd decodes in order, so
    decoding stops once the chunk is out (a random chunk costs about half a whole decode).
    ``whole``: decode it all now (the caller reads the chunks that follow).
    """
    # The length is part of the key: an entry whose length was damaged must not be served a
    # good frame that a sound neighbour's entry put in the cache.
    # The base too: a delta frame decodes to different bytes on different bases, and two
    # deltas can be the same bytes (the same edit of two versions that differ elsewhere: two
    # manifest leaves whose one changed entry is the same), stored once in one pack.
    key = (entry.pack, entry.frame_off, entry.frame_len, entry.base or b"")
    need = entry.offset + entry.size
    plain = _cached_frame(key)
    if plain is not None and len(plain) >= need:
        return plain
    frame = load_frame()
    if entry.codec == CODEC_ZSTD:
        # A prefix that fell short (a later chunk of the same frame): decode it all this time,
        # so reading a frame's chunks in order decodes it at most twice.
        prefix_ok = plain is None and not whole
        plain = inflate(cid, frame, MAX_FRAME_BYTES, upto=need if prefix_ok else None)
    else:
        plain = inflate(cid, frame, MAX_FRAME_BYTES, load_base() if load_base is not None else None)
    _remember(key, plain)
    return plain


def slice_chunk(cid: bytes, entry: PackEntry, plain: bytes) -> bytes:
    """The chunk's bytes out of its frame's plain bytes."""
    end = entry.offset + entry.size
    if end > len(plain):
        raise CorruptError(
            f"chunk {cid.hex()} points outside its frame ({entry.offset}..{end} of {len(plain)})"
        )
    return plain if entry.offset == 0 and end == len(plain) else plain[entry.offset : end]


def pack_members(
    items: Iterable[tuple[bytes, bytes]], packs: set[bytes] | dict[bytes, Any] | None = None
) -> dict[bytes, list[tuple[bytes, PackEntry]]]:
    """The chunks of each pack, from the ``chunks`` table's ``(id, value)`` items (packs do not
    list their members: every entry is read).  Only the packs in ``packs`` when given (each
    present in the result, maybe empty), else every pack an entry names.  An entry that does
    not parse names no pack anyone can know: skipped (verify reports it, gc leaves it)."""
    members: dict[bytes, list[tuple[bytes, PackEntry]]] = {pid: [] for pid in packs} if packs is not None else {}
    for cid, value in items:
        if not is_entry(value):
            continue
        try:
            e = parse(cid, value)
        except CorruptError:
            continue
        if packs is None:
            members.setdefault(e.pack, []).append((cid, e))
        elif e.pack in members:
            members[e.pack].append((cid, e))
    return members
