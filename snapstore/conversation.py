"""Conversation state: a list of JSON-compatible messages kept with a checkpoint.

Each message is stored as its compact JSON text (one msgpack string per message) in a record
stream cut between messages, so two checkpoints of a growing conversation share every chunk but
the last, and reading a checkpoint's conversation gives back exactly the list that was given.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import msgpack

from . import chunker, objects
from .errors import CorruptError, UsageError


def encode_messages(messages: Any) -> list[tuple[bytes, bytes]]:
    """Validate and encode ``messages`` (a list of JSON-compatible values) as records."""
    if not isinstance(messages, list | tuple):
        raise UsageError("a conversation must be a JSON list of messages")
    records = []
    for i, message in enumerate(messages):
        try:
            text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"conversation message {i} is not JSON-compatible: {exc}") from exc
        encoded = msgpack.packb(text, use_bin_type=True)
        records.append((encoded, encoded))
    return records


def write(messages: Any, put, level: int = objects.DEFAULT_LEVEL, *, encode: bool = True):
    """Store a conversation; returns ``(stream id, size, record or None)``."""
    groups = chunker.cut_records(encode_messages(messages))
    return objects.write_stream((b"".join(g) for g in groups), put, level, encode=encode)


def decode(cid: bytes, chunks: Iterable[bytes]) -> list[Any]:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=256 << 20)
    out = []
    try:
        for data in chunks:
            unpacker.feed(data)
            for text in unpacker:
                if not isinstance(text, str):
                    raise ValueError("a message is not a JSON string")
                out.append(json.loads(text))
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"conversation {cid.hex()} is damaged: {exc}") from exc
    return out


def read(get, cid: bytes) -> list[Any]:
    return decode(cid, objects.iter_stream(get, cid))
