"""Delta frames: new bytes compressed, and read back, with their base as zstd's raw-content dictionary.

zstandard's compressor API takes a dictionary as an object it turns into a digested dictionary
(a ``ZSTD_CDict``: every position of the base hashed into both of level 3's tables) inside a
new compression context, for every delta: loading the base was ~3/4 of a delta's cost.  zstd's
one-shot ``ZSTD_compress_usingDict`` loads the base straight into a context (the fast fill:
fewer positions hashed) and the context is kept, one per thread.  On this project's own edit
history (351 consecutive versions of its files, median 12 KB) a delta took 28-33 us instead of
116-118 us under load, its frame ~4% larger (367 vs 354 bytes on average).  The frame is the
same standard zstd frame (content size, no checksum, no dictionary id), read back as before.

zstd's one-shot calls read a base that starts with the dictionary magic as a formatted
dictionary (the frame would then name it, or not decode): such a base, which any file can be,
goes through the public API, which is told it is raw content, on both sides.

The one-shot call comes from the zstandard package's own cffi module (``zstandard._cffi``,
part of its wheels, which exposes zstd's C API); where that module does not load, deltas are
made through the compressor API, as before.
"""

from __future__ import annotations

import threading
from typing import Any

_local = threading.local()
#: What a formatted zstd dictionary starts with (``ZSTD_MAGIC_DICTIONARY``).
_DICT_MAGIC = b"\x37\xa4\x30\xec"
# None: not tried yet; False: the cffi module does not load here.
_api: list[Any] = [None]


def _cffi() -> Any:
    """``(ffi, lib)`` of zstandard's cffi module, or False when it does not load."""
    if _api[0] is None:
        try:
            from zstandard import _cffi  # type: ignore[attr-defined]

            lib = _cffi.lib
            for name in ("ZSTD_compress_usingDict", "ZSTD_decompress_usingDict", "ZSTD_sizeof_CCtx"):
                getattr(lib, name)  # (an older build without one: AttributeError)
            _api[0] = (_cffi.ffi, lib)
        except Exception:  # (an install without it: the compressor API serves)
            _api[0] = False
    return _api[0]


def compress(data: bytes | memoryview, base: bytes, level: int) -> bytes:
    """``data`` as one zstd frame compressed with ``base`` as its raw-content dictionary
    (decoded by any zstd decoder given ``base`` as such a dictionary)."""
    api = _cffi()
    if api and base[:4] != _DICT_MAGIC:
        ffi, lib = api
        cctx = getattr(_local, "cctx", None)
        if cctx is None:
            cctx = _local.cctx = ffi.gc(lib.ZSTD_createCCtx(), lib.ZSTD_freeCCtx)
        cap = lib.ZSTD_compressBound(len(data))
        out = _new(ffi)("char[]", cap)
        src, dic = ffi.from_buffer(data), ffi.from_buffer(base)
        size = lib.ZSTD_compress_usingDict(cctx, out, cap, src, len(data), dic, len(base), level)
        if not lib.ZSTD_isError(size):
            return bytes(ffi.buffer(out, size))
    return _by_compressor(data, base, level)


def decompress(frame: bytes, base: bytes, size: int) -> bytes:
    """The plain bytes of delta ``frame`` (at most ``size``: its header's content size),
    decoded with ``base`` as its raw-content dictionary, through zstd's one-shot call on a
    context this thread keeps (the decompressor API otherwise).  ValueError when the frame does
    not decode (damage, a wrong base, more than ``size`` bytes)."""
    api = _cffi()
    if not api or base[:4] == _DICT_MAGIC:
        import zstandard

        d = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        try:
            out: bytes = zstandard.ZstdDecompressor(dict_data=d).decompress(frame, max_output_size=max(size, 1))
        except zstandard.ZstdError as exc:
            raise ValueError(str(exc)) from None
        if len(out) > size:
            raise ValueError(f"the frame holds {len(out)} bytes, more than {size}")
        return out
    ffi, lib = api
    dctx = getattr(_local, "dctx", None)
    if dctx is None:
        dctx = _local.dctx = ffi.gc(lib.ZSTD_createDCtx(), lib.ZSTD_freeDCtx)
    buf = _new(ffi)("char[]", max(size, 1))
    got = lib.ZSTD_decompress_usingDict(dctx, buf, size, ffi.from_buffer(frame), len(frame), ffi.from_buffer(base), len(base))
    if lib.ZSTD_isError(got):
        raise ValueError(ffi.string(lib.ZSTD_getErrorName(got)).decode(errors="replace"))
    return bytes(ffi.buffer(buf, got))


def _new(ffi: Any) -> Any:
    """An allocator that leaves the output buffer uncleared (zstd writes what is returned)."""
    alloc = getattr(_local, "alloc", None)
    if alloc is None:
        alloc = _local.alloc = ffi.new_allocator(should_clear_after_alloc=False)
    return alloc


def _by_compressor(data: bytes | memoryview, base: bytes, level: int) -> bytes:
    import zstandard

    d = zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    out: bytes = zstandard.ZstdCompressor(level=level, dict_data=d, write_checksum=False).compress(data)
    return out


def context_bytes() -> int:
    """The bytes of the context this thread keeps (0: none yet).  zstd sizes it for the
    largest base and chunk it compressed, within the level's tables (~1.3 MB at level 3 for
    chunks of up to 128 KiB: chunker.MAX_SIZE)."""
    cctx = getattr(_local, "cctx", None)
    return 0 if cctx is None else int(_cffi()[1].ZSTD_sizeof_CCtx(cctx))


def loaded() -> bool:
    """Whether deltas go through the one-shot call (the cffi module loaded)."""
    return bool(_cffi())
