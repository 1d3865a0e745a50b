"""A bundle's head read by range: its records without its inline data (docs/remote.md, "Browsing").

A bundle (:func:`layout.encode_bundle`) is ``BUNDLE_MAGIC`` and a msgpack map whose last field
is its inline pack; everything before that field is its **head**: version, namespace, writer,
time, who pushed it, the checkpoint records and the keys of the objects they need.  Browsing
takes up a ref's whole history (every pushed checkpoint is listed), so it reads each bundle's
head only: one ranged GET of the first :data:`HEAD_READ` bytes and, for a longer head, more
(three times as much as read so far each time) until the inline field's header.  The inline pack is
then read like a pack: its footer when a command first misses a chunk, and the frames it needs.

A head cannot be checked against the bundle's name (the hash of all its bytes: fetch, clone
and ``remote verify`` check that), so it is checked record by record: each checkpoint record
against its id and the schema, the namespace, writer and time against the bundle's key, each
needed key's shape, and the inline pack's extent, which must run exactly to the bundle's end
(the footer read checks the bundle's size against it).  Who pushed it (user, host) is as the
bundle says.
"""

from __future__ import annotations

from typing import Any

import msgpack

from snapstore.errors import CorruptError
from snapstore.remote import layout, wire
from snapstore.remote.names import encode_name
from snapstore.remote.transport import Transport

#: Bytes of a bundle's start read first: the head of a push of a few checkpoints.
HEAD_READ = 1 << 10
#: The largest first read a :class:`HeadReader` makes.
MAX_FIRST = 64 << 10
#: The longest head read (the largest object read whole).
MAX_HEAD = layout.MAX_OBJECT

_BIN = {0xC4: 1, 0xC5: 2, 0xC6: 4}  # msgpack bin headers: bytes of their length field


class _Short(Exception):
    """The bytes read end before the head does."""


class HeadReader:
    """:func:`read_head` for the bundles of one history, read oldest first: each first read is
    sized by the longest head seen so far, with room to grow (a push's head lists the objects
    its checkpoints need, so later heads are longer), so a head costs one request."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.first = HEAD_READ

    def __call__(self, key: str) -> layout.Bundle | None:
        bundle = read_head(self.transport, key, self.first)
        if bundle is not None and bundle.inline_at is not None:
            head = bundle.inline_at[0]
            self.first = max(self.first, min(head + head // 4 + 256, MAX_FIRST))  # (threads: a race loses a hint)
        return bundle


def read_head(transport: Transport, key: str, first: int = HEAD_READ) -> layout.Bundle | None:
    """The head of bundle ``key`` (``inline`` None, ``inline_at`` where its inline pack lies),
    or the whole bundle when the first read brought all of it; None when there is no such
    object; CorruptError for a head that fails a check."""
    data = b""
    want = first
    while True:
        # Each further read starts one byte back, so it never starts past the object's end.
        start = max(len(data) - 1, 0)
        more = transport.get_range(key, start, start + want)
        if more is None:
            if data:
                raise CorruptError(f"remote object {key} is corrupt (it went while being read)")
            return None
        data = data[:start] + more
        if len(more) < want:
            # All of it (a small bundle): checked whole, against its name too.
            return layout.parse_bundle(key, data)
        try:
            return parse_head(key, data, False)
        except _Short:
            if len(data) >= MAX_HEAD:
                raise _bad(key, "its records are larger than a bundle holds") from None
            want = 3 * len(data) + 1  # (four times as much in all: a push of many checkpoints)


def _bad(key: str, why: str) -> CorruptError:
    return CorruptError(f"remote object {key} is corrupt ({why})")


def parse_head(key: str, data: bytes, ended: bool) -> layout.Bundle:
    """The head of bundle ``key`` from its first bytes ``data`` (all of it when ``ended``);
    :class:`_Short` when ``data`` ends first, CorruptError when a check fails."""
    if len(data) < len(layout.BUNDLE_MAGIC):
        if ended:
            raise _bad(key, "not a bundle")
        raise _Short
    if not data.startswith(layout.BUNDLE_MAGIC):
        raise _bad(key, "not a bundle")
    try:
        doc, at = _read_fields(memoryview(data)[len(layout.BUNDLE_MAGIC) :])
        layout.check_bundle_fields({**doc, "inline": None})
        _check_key(key, doc)
    except (wire.Short, msgpack.OutOfData):
        raise _Short from None
    except CorruptError as exc:
        raise _bad(key, exc.message) from None
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise _bad(key, f"damaged: {exc}") from None
    at += len(layout.BUNDLE_MAGIC)
    return layout.Bundle(
        key, doc["ns"], doc["writer"], doc["time_ns"], doc["checkpoints"], doc["needs"], None,
        doc.get("user", ""), doc.get("host", ""), _inline_at(key, data, at, ended),
    )


def _read_fields(body: memoryview) -> tuple[dict[str, Any], int]:
    """The fields before ``inline`` and where the inline field's value starts in ``body``."""
    r = wire.SchemaReader(body, prefix=True)
    doc: dict[str, Any] = {}
    fields = r.map()
    for i in range(fields):
        field = r.str_(32)
        if field == "inline":
            if i != fields - 1:
                # (our writers put it last: a bundle is then read by range like a pack)
                raise ValueError("its inline pack is not its last field")
            return doc, r.tell()
        layout.read_bundle_field(r, field, doc)
    raise KeyError("inline")


def _inline_at(key: str, data: bytes, at: int, ended: bool) -> tuple[int, int] | None:
    """Where the inline pack whose msgpack header starts at ``at`` lies: ``(start, end)``,
    ``end`` being the bundle's size; None for a bundle without one."""
    if at >= len(data):
        raise _Short
    tag = data[at]
    if tag == 0xC0:  # nil: the bundle ends here
        if (ended and len(data) != at + 1) or (not ended and len(data) > at + 1):
            raise _bad(key, "bytes follow its records")
        return None
    width = _BIN.get(tag)
    if width is None:
        raise _bad(key, "damaged: its inline pack is not a byte string")
    if at + 1 + width > len(data):
        if ended:
            raise _bad(key, "it is cut short")
        raise _Short
    start = at + 1 + width
    end = start + int.from_bytes(data[at + 1 : start], "big")
    if end - start < len(layout.PACK_MAGIC) + layout.NONCE + layout.TAIL_SIZE:
        raise _bad(key, "its inline pack is too short to be one")
    if (ended and len(data) != end) or len(data) > end:
        raise _bad(key, "its inline pack does not end where the bundle does")
    return start, end


def _check_key(key: str, doc: dict[str, Any]) -> None:
    """ValueError unless the bundle's namespace, time and writer are the ones its key names
    (what :func:`layout.bundle_key` made of them)."""
    try:
        prefix = f"log/{encode_name(doc['ns'])}/"
    except Exception:  # UsageError: a name no writer of ours publishes under
        raise ValueError("its namespace is not the one its key names") from None
    stem = f"{doc['time_ns']:020d}-{doc['writer']}-"
    if not key.startswith(prefix) or not key[len(prefix) :].startswith(stem):
        raise ValueError("its namespace, time or writer is not the one its key names")
