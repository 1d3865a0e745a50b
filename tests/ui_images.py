"""Small, valid PNGs for the UI's image tests (built here: no binary fixtures)."""

from __future__ import annotations

import zlib


def _chunk(kind: bytes, data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + kind + data + zlib.crc32(kind + data).to_bytes(4, "big")


def _png(width: int, height: int, colour_type: int, rows: bytes) -> bytes:
    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, colour_type, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows)) + _chunk(b"IEND", b"")


def png(width: int = 1) -> bytes:
    """A grey PNG one pixel high and ``width`` wide."""
    return _png(width, 1, 0, b"\x00" + b"\x80" * width)


def chart(bars: list[int], width: int = 160, height: int = 80) -> bytes:
    """An RGB PNG bar chart (bars of the given heights, in pixels)."""
    step = width // len(bars)
    rows = bytearray()
    for y in range(height):
        rows += b"\x00"
        for x in range(width):
            k = min(x // step, len(bars) - 1)
            inside = x % step < step - 4 and height - y <= bars[k]
            rows += bytes((31, 95, 191) if inside else (244, 246, 248))
    return _png(width, height, 2, bytes(rows))
