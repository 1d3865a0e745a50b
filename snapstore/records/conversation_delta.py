"""The compact conversation record (format 2, written since 2026-11-28): a msgpack *array*
whose messages are one zstd frame compressed against the conversation's bytes before them.

An agent checkpoints after every tool call while its conversation grows by a message or two,
so each record holds little: compressed alone (the ``inline`` map of
:mod:`snapstore.records.conversation`), a message repeats what the earlier ones said (test
names, paths, quoted code) and the record's map keys cost more than its messages.  Here the
appended messages are compressed with the last :data:`WINDOW` bytes of the messages before them
as a raw-content zstd dictionary (what the reader has just decoded: it reads a conversation's
records in message order), at :data:`LEVEL` at least; and the record is an array, not a map:

    [FORM, base, count, depth, total, window, data]          (+ parts, for a full record ending a chain)

``window``: how many bytes before the record's own messages are the dictionary (0: none);
``data``: flag ``0x00`` and the raw bytes, or ``0x01`` and a zstd frame with its content size.
Readers that know only maps refuse such a record as damaged (they read every other one).
"""

from __future__ import annotations

from typing import Any

import msgpack

from snapstore.errors import CorruptError
from snapstore.records import schema
from snapstore.storage import objects

#: The first element of a compact record (a later form would take another).
FORM = 1
#: Bytes of the preceding messages a record is compressed against.
WINDOW = 32 << 10
#: The least zstd level of a compact record's frame (small frames: the level costs little).
LEVEL = 9


class Tail:
    """The last :data:`WINDOW` bytes of what was read so far (amortised: no copy per record of
    the whole window)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def add(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) > 4 * WINDOW:
            del self._buf[: len(self._buf) - WINDOW]

    def last(self) -> bytes:
        """The last :data:`WINDOW` bytes (one copy)."""
        with memoryview(self._buf) as view:
            return bytes(view[-WINDOW:])


def before_tail(records: list[bytes], start: int) -> bytes:
    """The last :data:`WINDOW` bytes of ``records[:start]`` (encoded messages), joined."""
    parts: list[bytes] = []
    size = 0
    for r in reversed(records[:start]):
        parts.append(r)
        size += len(r)
        if size >= WINDOW:
            break
    return b"".join(reversed(parts))[-WINDOW:]


def pack(
    fields: dict[str, Any], own: bytes, before: bytes, level: int, parts: list[bytes] | None = None
) -> bytes:
    """The compact record of ``own`` (the record's messages, encoded) after ``before`` (the
    messages before them; its last :data:`WINDOW` bytes are the dictionary).  ``fields``: base,
    count, depth, total."""
    import zstandard

    window = before[-WINDOW:] if len(before) >= 8 else b""
    data = bytes((objects.FLAG_RAW,)) + own
    if own:
        dictionary = (
            zstandard.ZstdCompressionDict(window, dict_type=zstandard.DICT_TYPE_RAWCONTENT) if window else None
        )
        comp = zstandard.ZstdCompressor(
            level=max(level, LEVEL), dict_data=dictionary, write_checksum=False, write_dict_id=False
        )
        frame = comp.compress(own)
        if len(frame) + 1 < len(data):
            data = bytes((objects.FLAG_ZSTD,)) + frame
    row: list[Any] = [FORM, fields["base"], fields["count"], fields["depth"], fields["total"], len(window), data]
    if parts is not None:
        row.append(parts)
    packed: bytes = msgpack.packb(row, use_bin_type=True)
    return packed


def unpack(row: list[Any], max_size: int) -> dict[str, Any]:
    """The fields of a compact record (decoded ``row``) as the map form names them, with
    ``delta`` (its data) and ``window``; raises ValueError when it is not one.  ``max_size``:
    the most bytes its messages may take."""
    if not 7 <= len(row) <= 8 or row[0] != FORM:
        raise ValueError("not a compact record")
    _, base, count, depth, total, window, data = row[:7]
    if not isinstance(data, bytes) or not data or data[0] not in (objects.FLAG_RAW, objects.FLAG_ZSTD):
        raise ValueError("bad message data")
    if schema.check_count(window, "window") > WINDOW:
        raise ValueError("window too large")
    if data[0] == objects.FLAG_RAW and len(data) - 1 > max_size:
        raise ValueError("messages too large")
    out: dict[str, Any] = {
        "base": base, "count": count, "depth": depth, "total": total, "chunks": [], "delta": data, "window": window,
    }
    if len(row) == 8:
        out["parts"] = row[7]
    return out


def inflate(rid: bytes, record: dict[str, Any], before: bytes, max_size: int) -> bytes:
    """The messages a compact record holds (their encodings, concatenated); ``before``: at least
    the last ``record["window"]`` bytes of the messages before them."""
    import zstandard

    data, window = record["delta"], record["window"]
    if data[0] == objects.FLAG_RAW:
        return bytes(data[1:])
    if window > len(before):
        raise CorruptError(f"conversation {rid.hex()} is compressed against more than the messages before it")
    try:
        frame = data[1:]
        claimed = zstandard.frame_content_size(frame)
        if claimed < 0 or claimed > max_size:
            raise CorruptError(f"conversation {rid.hex()} claims {claimed} bytes of messages")
        dictionary = (
            zstandard.ZstdCompressionDict(before[len(before) - window :], dict_type=zstandard.DICT_TYPE_RAWCONTENT)
            if window else None
        )
        plain: bytes = zstandard.ZstdDecompressor(dict_data=dictionary).decompress(frame, max_output_size=max_size)
    except zstandard.ZstdError as exc:
        raise CorruptError(f"conversation {rid.hex()} does not decompress ({exc})") from exc
    return plain
