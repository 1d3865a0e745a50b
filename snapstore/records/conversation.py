"""Conversation state: a list of JSON-compatible messages kept with a checkpoint.

Each message is encoded as its compact JSON text (one msgpack string per message).  A
conversation's id is the BLAKE3-256 of the concatenated encoded messages.  Messages are grouped
into chunks (chunker.cut_messages) that go through the usual pipeline (dedup, zstd).

Agents checkpoint after every tool call while the conversation only grows, so a conversation is
stored as a *delta* on the previous checkpoint's conversation when that one is a prefix of it:
its record in the ``conversations`` table is ``{base, count, depth, chunks}`` — the base
conversation id, how many messages the base holds, the chain depth, and the chunks of the
appended messages only.  A conversation that grew by k messages therefore costs the chunks of
those k messages plus a record of about a hundred bytes.  Every MAX_DEPTH links a full record
(no base) bounds the work of reading one back.  A rewind that cuts the conversation back simply
stores a record on the longest stored prefix it is given, or a full one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import blake3
import msgpack

from snapstore.errors import CorruptError, UsageError
from snapstore.records import schema
from snapstore.records.schema import Get, Put
from snapstore.storage import chunker, objects

MAX_DEPTH = 32


def encode_messages(messages: Any) -> list[bytes]:
    """Validate and encode ``messages`` (a list of JSON-compatible values) as records."""
    if not isinstance(messages, list | tuple):
        raise UsageError("a conversation must be a JSON list of messages")
    records = []
    for i, message in enumerate(messages):
        try:
            text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"conversation message {i} is not JSON-compatible: {exc}") from exc
        records.append(msgpack.packb(text, use_bin_type=True))
    return records


def write(
    messages: Any,
    put: Put,
    level: int = objects.DEFAULT_LEVEL,
    *,
    encode: bool = True,
    base: tuple[bytes, int, int] | None = None,
) -> tuple[bytes, bytes | None]:
    """Prepare a conversation for storing; returns ``(conversation id, record or None)``.

    ``put(id, value)`` receives each chunk of messages (encoded, or plain if not ``encode``).
    ``base`` is ``(id, message count, depth)`` of a stored conversation that may be a prefix of
    this one (the previous checkpoint's); it is used only if it really is.  The record is None
    when the conversation is already stored under its id (the caller need not write it).
    """
    records = encode_messages(messages)
    hasher = blake3.blake3()
    start = 0
    depth = 0
    base_id = None
    if base is not None:
        bid, bcount, bdepth = base
        if bcount <= len(records) and bdepth < MAX_DEPTH:
            for r in records[:bcount]:
                hasher.update(r)
            if hasher.digest() == bid:
                start, depth, base_id = bcount, bdepth + 1, bid
            else:
                hasher = blake3.blake3()
    if base_id is None:
        hasher = blake3.blake3()
    refs = []
    for group in chunker.cut_messages(records[start:]):
        data = b"".join(group)
        hasher.update(data)
        cid = objects.chunk_id(data)
        put(cid, objects.encode_chunk(data, level) if encode else data)
        refs.append([cid, len(data), len(group)])
    cid = hasher.digest()
    if base_id is not None and cid == base_id:
        return cid, None  # nothing appended: the same conversation
    record = msgpack.packb(
        {"base": base_id, "count": start, "depth": depth, "total": len(records), "chunks": refs},
        use_bin_type=True,
    )
    return cid, record


def parse_record(cid: bytes, value: bytes) -> dict[str, Any]:
    """Decode and check a ``conversations`` record (see the module docstring for its fields)."""
    try:
        r = msgpack.unpackb(value, raw=False)
        if not isinstance(r, dict):
            raise ValueError("not a map")
        base = schema.check_optional_id(r["base"], "base")
        count = schema.check_count(r["count"], "count")
        depth = schema.check_count(r["depth"], "depth")
        total = schema.check_count(r["total"], "total")
        if base is None and (count or depth):
            raise ValueError("a full record has a count or a depth")
        if depth > MAX_DEPTH or total < count:
            raise ValueError("bad depth or total")
        chunks = r["chunks"]
        if not isinstance(chunks, list):
            raise ValueError("chunks is not a list")
        for ref in chunks:
            if not (isinstance(ref, list) and len(ref) == 3):
                raise ValueError("bad chunk reference")
            schema.check_id(ref[0], "chunk")
            schema.check_count(ref[1], "chunk size")
            schema.check_count(ref[2], "chunk message count")
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"conversation {cid.hex()} has a damaged record ({exc})") from exc
    return r


def chain(get: Get, cid: bytes) -> list[tuple[bytes, dict[str, Any]]]:
    """The records from the full one to ``cid`` (oldest first)."""
    out = []
    cur: bytes | None = cid
    while cur is not None:
        value = get("conversations", cur)
        if value is None:
            raise CorruptError(f"conversation {cur.hex()} is missing from the store")
        record = parse_record(cur, value)
        out.append((cur, record))
        if len(out) > MAX_DEPTH + 1:
            raise CorruptError(f"conversation {cid.hex()} has a chain longer than {MAX_DEPTH}")
        cur = record["base"]
    out.reverse()
    return out


def read(get: Get, cid: bytes) -> list[Any]:
    """The messages of conversation ``cid``, checked against its id."""
    hasher = blake3.blake3()
    out: list[Any] = []
    for rid, record in chain(get, cid):
        if len(out) != record["count"]:
            raise CorruptError(f"conversation {rid.hex()} does not continue its base")
        for ref in record["chunks"]:
            data = objects.load_chunk(get, ref[0])
            hasher.update(data)
            out.extend(_decode(rid, [data]))
        if len(out) != record["total"]:
            raise CorruptError(f"conversation {rid.hex()} holds {len(out)} messages, not {record['total']}")
    if hasher.digest() != cid:
        raise CorruptError(f"conversation {cid.hex()} does not match its id")
    return out


def _decode(cid: bytes, chunks: Iterable[bytes]) -> list[Any]:
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=256 << 20)
    out = []
    try:
        for data in chunks:
            unpacker.feed(data)
            for text in unpacker:
                if not isinstance(text, str):
                    raise ValueError("a message is not a JSON string")
                out.append(json.loads(text))
    except (ValueError, TypeError, RecursionError, msgpack.UnpackException) as exc:
        # RecursionError: JSON nested past Python's recursion limit (a hostile message).
        raise CorruptError(f"conversation {cid.hex()} is damaged: {exc}") from exc
    return out


def info(get: Get, cid: bytes) -> tuple[int, int]:
    """``(message count, depth)`` of a stored conversation, from its record alone."""
    value = get("conversations", cid)
    if value is None:
        raise CorruptError(f"conversation {cid.hex()} is missing from the store")
    r = parse_record(cid, value)
    return int(r["total"]), int(r["depth"])


def preview(messages: list[Any], width: int = 200) -> dict[str, Any]:
    """What an agent UI shows: the message count and the last user and assistant messages."""

    def text_of(message: Any) -> str:
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):  # content blocks: keep the text ones
            content = " ".join(
                b.get("text", "") if isinstance(b, dict) else str(b) for b in content
            )
        text = " ".join(str(content).split())
        return text if len(text) <= width else text[: width - 1] + "…"

    def last(role: str) -> str | None:
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == role:
                return text_of(m)
        return None

    return {"messages": len(messages), "last_user": last("user"), "last_assistant": last("assistant")}
