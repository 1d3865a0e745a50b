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

In a format-2 store (``inline``) a record holds its appended messages itself, as one zstd frame
(``inline``, plain size ``inline_size``; ``chunks`` is then empty) when they take at most
:data:`INLINE_MAX` bytes: one LMDB value per step instead of a record, a chunk entry and a pack.
The full record that ends a chain of MAX_DEPTH links does not repeat the messages: it lists the
records of that chain (``parts``: the previous full record, then the chain's delta records in
order) and holds only its own appended messages.  Every message is stored once, reading a
conversation visits its full records (one per MAX_DEPTH steps) and the records they list, and
each record's ``count`` (messages before its own) and ``total`` check the order.

Since 2026-11-28 such a record is written in the compact form of
:mod:`snapstore.records.conversation_delta` (an array; its messages compressed against the
messages before them); :func:`parse_record` returns either form as the same map (a compact one
with ``delta`` and ``window``), and maps written before still read.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Iterator
from typing import Any

import blake3
import msgpack

from snapstore.errors import CorruptError, UsageError
from snapstore.records import conversation_delta, schema
from snapstore.records.schema import Get, Put
from snapstore.storage import chunker, objects

MAX_DEPTH = 32

#: Appended messages up to this many bytes live in the record (format 2).
INLINE_MAX = 64 << 10

#: No conversation may be made of more records (a bound on reading a damaged or hostile one).
MAX_RECORDS = 1 << 20


def encode_messages(messages: Any, warnings: list[str] | None = None, first: int = 0) -> list[bytes]:
    """Validate and encode ``messages`` (a list of JSON-compatible values) as records
    (``first``: the index of the first one in its conversation, for the error message).

    Text that is not valid Unicode (a lone surrogate: half of an emoji a transcript cut) is
    stored with U+FFFD in its place and said in ``warnings``: one such message must not cost
    the conversation (every later checkpoint of the session would carry it again).
    """
    if not isinstance(messages, list | tuple):
        raise UsageError("a conversation must be a JSON list of messages")
    records = []
    replaced = 0
    for i, message in enumerate(messages, first):
        try:
            text = json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"conversation message {i} is not JSON-compatible: {exc}") from exc
        try:
            records.append(msgpack.packb(text, use_bin_type=True))
        except UnicodeEncodeError:
            replaced += 1
            text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
            records.append(msgpack.packb(text, use_bin_type=True))
    if replaced and warnings is not None:
        warnings.append(
            f"{replaced} conversation message(s) held text that is not valid Unicode (a cut emoji "
            "or raw bytes): stored with U+FFFD in its place"
        )
    return records


#: The most a :class:`Memo` keeps (encoded bytes of one conversation); a longer one is encoded
#: in full at every checkpoint, as without a memo.
MEMO_MAX = 64 << 20


class Memo:
    """The last conversation a long-lived Store wrote for one task: copies of its messages,
    their records and the hash state after them, so that the next checkpoint of a conversation
    that grew by appending encodes and hashes only the new messages.

    The old messages are compared with ``==`` against the copies (in C: a fraction of encoding
    them); an earlier message changed in place is then seen and the whole conversation encoded
    again.  (``==`` holds between 1, 1.0 and True, and between dicts whose keys are in another
    order: such a change of an earlier message keeps its first encoding.)
    """

    __slots__ = ("messages", "records", "hasher", "size")

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.records: list[bytes] = []
        self.hasher: Any = None
        self.size = 0

    def encode(self, messages: Any, warnings: list[str] | None) -> tuple[list[bytes], int]:
        """The records of ``messages`` and how many leading ones are this memo's (whose hash
        state is :attr:`hasher`)."""
        n = len(self.messages)
        if n and isinstance(messages, list | tuple) and len(messages) >= n and list(messages[:n]) == self.messages:
            return self.records + encode_messages(messages[n:], warnings, first=n), n
        return encode_messages(messages, warnings), 0

    def keep(self, messages: Any, known: int, records: list[bytes], hasher: Any) -> None:
        """Remember what was just written (``known`` leading messages were the memo's)."""
        import copy

        size = self.size if known else 0
        size += sum(len(r) for r in records[known:])
        if size > MEMO_MAX:
            self.__init__()  # type: ignore[misc]  # (reset in place)
            return
        fresh = copy.deepcopy(list(messages[known:]))  # the caller may change its own later
        self.messages = (self.messages[:known] if known else []) + fresh
        self.records, self.hasher, self.size = records, hasher.copy(), size


def write(
    messages: Any,
    put: Put,
    level: int = objects.DEFAULT_LEVEL,
    *,
    encode: bool = True,
    base: tuple[bytes, int, int] | None = None,
    inline: bool = False,
    get: Get | None = None,
    warnings: list[str] | None = None,
    memo: Memo | None = None,
    compact: bool = True,
) -> tuple[bytes, bytes | None]:
    """Prepare a conversation for storing; returns ``(conversation id, record or None)``.

    ``put(id, value)`` receives each chunk of messages (encoded, or plain if not ``encode``).
    ``inline`` (format 2): small appended messages go into the record, and a chain that is
    MAX_DEPTH long is ended by a full record listing it (``get`` reads the base's chain).
    ``base`` is ``(id, message count, depth)`` of a stored conversation that may be a prefix of
    this one (the previous checkpoint's); it is used only if it really is.  The record is None
    when the conversation is already stored under its id (the caller need not write it).
    ``memo`` (a long-lived Store's, per task) spares re-encoding and re-hashing the messages it
    holds (:class:`Memo`).  ``compact`` (format 3): an inline record in the compact form, else
    in the map form format-2 readers read.
    """
    records, known = memo.encode(messages, warnings) if memo is not None else (encode_messages(messages, warnings), 0)
    cid, record, hasher = _write(records, put, level, encode, base, (inline, compact), get, memo if known else None)
    if memo is not None:
        memo.keep(messages, known, records, hasher)
    return cid, record


def _map_record(fields: dict[str, Any], appended: bytes, level: int, parts: list[bytes] | None) -> bytes:
    """An inline record in the map form (format 2: what its readers read)."""
    fields.update(chunks=[], inline=objects.encode_chunk(appended, level), inline_size=len(appended))
    if parts is not None:
        fields["parts"] = parts
    return bytes(msgpack.packb(fields, use_bin_type=True))


def _write(
    records: list[bytes], put: Put, level: int, encode: bool, base: tuple[bytes, int, int] | None,
    form: tuple[bool, bool], get: Get | None, memo: Memo | None,
) -> tuple[bytes, bytes | None, Any]:
    """:func:`write` on encoded records; also returns the hash state after all of them.
    ``form``: ``(inline, compact)``.  ``memo``: its records lead ``records`` and its hash
    state is theirs."""
    inline, compact = form
    hasher = blake3.blake3()
    start = 0
    depth = 0
    base_id = None
    parts: list[bytes] | None = None
    if base is not None:
        bid, bcount, bdepth = base
        if bcount <= len(records) and (bdepth < MAX_DEPTH or (inline and get is not None)):
            if memo is not None and len(memo.records) == bcount:
                hasher = memo.hasher.copy()  # the same records: their hash is known
            else:
                for r in records[:bcount]:
                    hasher.update(r)
            if hasher.digest() != bid:
                pass
            elif bdepth < MAX_DEPTH:
                start, depth, base_id = bcount, bdepth + 1, bid
            else:
                assert get is not None
                parts = [rid for rid, _ in chain(get, bid)]
                start = bcount
    if base_id is None and parts is None:
        hasher = blake3.blake3()
    appended = b"".join(records[start:])
    if inline and len(appended) <= INLINE_MAX:
        hasher.update(appended)
        cid = hasher.digest()
        if base_id is not None and cid == base_id:
            return cid, None, hasher
        if parts is not None and cid == parts[-1]:
            return cid, None, hasher
        fields: dict[str, Any] = {"base": base_id, "count": start, "depth": depth, "total": len(records)}
        if compact:
            before = conversation_delta.before_tail(records, start)
            return cid, conversation_delta.pack(fields, appended, before, level, parts), hasher
        return cid, _map_record(fields, appended, level, parts), hasher
    if parts is not None:  # too big to be inline: a full record of chunks, as in format 1
        hasher, start = blake3.blake3(), 0
    refs = []
    for group in chunker.cut_messages(records[start:]):
        data = b"".join(group)
        hasher.update(data)
        cid = objects.chunk_id(data)
        put(cid, objects.encode_chunk(data, level) if encode else data)
        refs.append([cid, len(data), len(group)])
    cid = hasher.digest()
    if base_id is not None and cid == base_id:
        return cid, None, hasher  # nothing appended: the same conversation
    record = msgpack.packb(
        {"base": base_id, "count": start, "depth": depth, "total": len(records), "chunks": refs},
        use_bin_type=True,
    )
    return cid, record, hasher


def parse_record(cid: bytes, value: bytes) -> dict[str, Any]:
    """Decode and check a ``conversations`` record (see the module docstring for its fields)."""
    try:
        decoded = msgpack.unpackb(value, raw=False)
        if isinstance(decoded, list):
            r = conversation_delta.unpack(decoded, INLINE_MAX)
        elif isinstance(decoded, dict) and "delta" not in decoded and "window" not in decoded:
            r = decoded
        else:
            raise ValueError("not a record")
        base = schema.check_optional_id(r["base"], "base")
        count = schema.check_count(r["count"], "count")
        depth = schema.check_count(r["depth"], "depth")
        total = schema.check_count(r["total"], "total")
        parts = r.get("parts")
        if parts is not None:
            if base is not None or not isinstance(parts, list) or not 2 <= len(parts) <= MAX_DEPTH + 1:
                raise ValueError("bad parts")
            for part in parts:
                schema.check_id(part, "part")
        if base is None and (depth or (count and parts is None)):
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
        if "inline" in r:
            if not isinstance(r["inline"], bytes) or chunks:
                raise ValueError("bad inline messages")
            if schema.check_count(r["inline_size"], "inline size") > INLINE_MAX:
                raise ValueError("inline messages too large")
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"conversation {cid.hex()} has a damaged record ({exc})") from exc
    return r


def _load(get: Get, rid: bytes) -> dict[str, Any]:
    value = get("conversations", rid)
    if value is None:
        raise CorruptError(f"conversation {rid.hex()} is missing from the store")
    return parse_record(rid, value)


def chain(get: Get, cid: bytes) -> list[tuple[bytes, dict[str, Any]]]:
    """The records from the full one to ``cid`` (oldest first): the delta chain of ``cid``."""
    return _chain_after(get, cid, ())[0]


def _chain_after(
    get: Get, cid: bytes, known: Container[bytes]
) -> tuple[list[tuple[bytes, dict[str, Any]]], bytes | None]:
    """:func:`chain` from the record after the newest one in ``known`` (and that record)."""
    out: list[tuple[bytes, dict[str, Any]]] = []
    cur: bytes | None = cid
    while cur is not None:
        if cur in known:
            out.reverse()
            return out, cur
        record = _load(get, cur)
        out.append((cur, record))
        if len(out) > MAX_DEPTH + 1:
            raise CorruptError(f"conversation {cid.hex()} has a chain longer than {MAX_DEPTH}")
        cur = record["base"]
    out.reverse()
    return out, None


def segments(get: Get, cid: bytes) -> list[tuple[bytes, dict[str, Any]]]:
    """Every record of conversation ``cid`` in message order: whose own messages, one record
    after the other, make the conversation (full records' ``parts`` expanded)."""
    return segments_after(get, cid)[0]


def segments_after(
    get: Get, cid: bytes, known: Container[bytes] = ()
) -> tuple[list[tuple[bytes, dict[str, Any]]], bytes | None]:
    """:func:`segments`, from the record after the newest one in ``known`` (conversations
    already checked: the messages up to one are the same in every conversation through it);
    also returns that known record (None: from the first record)."""
    newest_first: list[tuple[bytes, dict[str, Any]]] = []
    seen: set[bytes] = set()
    links, stop = _chain_after(get, cid, known)
    while True:
        for rid, record in reversed(links):
            if rid in known:
                stop = rid
                break
            if rid in seen:
                raise CorruptError(f"conversation {cid.hex()} lists record {rid.hex()} twice")
            seen.add(rid)
            newest_first.append((rid, record))
        if len(newest_first) > MAX_RECORDS:
            raise CorruptError(f"conversation {cid.hex()} has more than {MAX_RECORDS} records")
        if stop is not None:
            break
        parts = links[0][1].get("parts")
        if parts is None:
            break
        # A full record's parts: the previous full record, then the delta records of its chain.
        listed = [(p, _load(get, p)) for p in parts]
        if listed[0][1]["base"] is not None or any(
            rec["base"] != prev for (prev, _), (_, rec) in zip(listed, listed[1:])
        ):
            raise CorruptError(f"conversation {links[0][0].hex()} lists records that are not a chain")
        links = listed
    newest_first.reverse()
    return newest_first, stop


def read(get: Get, cid: bytes) -> list[Any]:
    """The messages of conversation ``cid``, checked against its id."""
    hasher = blake3.blake3()
    out: list[Any] = []
    before = conversation_delta.Tail()  # the last bytes read: what a compact record is compressed against
    for rid, record in segments(get, cid):
        if len(out) != record["count"]:
            raise CorruptError(f"conversation {rid.hex()} does not continue its base")
        for data in own_pieces(get, rid, record, before.last()):
            hasher.update(data)
            out.extend(decode_pieces(rid, [data]))
            before.add(data)
        if len(out) != record["total"]:
            raise CorruptError(f"conversation {rid.hex()} holds {len(out)} messages, not {record['total']}")
    if hasher.digest() != cid:
        raise CorruptError(f"conversation {cid.hex()} does not match its id")
    return out


def own_pieces(get: Get, rid: bytes, record: dict[str, Any], before: bytes = b"") -> Iterator[bytes]:
    """The bytes of the messages a record itself holds: compact (compressed against
    ``before``, the conversation's bytes before them), inline, or in its chunks."""
    if "delta" in record:
        yield conversation_delta.inflate(rid, record, before, INLINE_MAX)
        return
    if "inline" in record:
        size = record["inline_size"]
        data = objects.decode_chunk(rid, record["inline"], check=False, max_size=size)
        if len(data) != size:
            raise CorruptError(f"conversation {rid.hex()} holds {len(data)} inline bytes, not {size}")
        yield data
        return
    for ref in record["chunks"]:
        yield objects.load_chunk(get, ref[0])


def decode_pieces(cid: bytes, chunks: Iterable[bytes]) -> list[Any]:
    """The messages that the encoded ``chunks`` of conversation record ``cid`` hold (CorruptError
    when one does not decode)."""
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
