"""Decoding what a remote holds without letting its bytes decide how much memory that takes.

A writer of the bucket can plant any bytes under any key.  msgpack turns one byte into a
Python object of 30-70 bytes (``[[], [], ...]``: 8 MB became 600 MiB), so every decode of
remote bytes goes through here:

* :class:`SchemaReader` walks an object of a known schema (bundle, pack footer, gc plan) with
  msgpack's streaming header reads: a container is opened only where the schema has one, a
  scalar is read only after its first byte says it is one, and the caller checks each element
  as it arrives, so a wrong one stops the read before the next is built.  Memory: the parsed
  result (a few times the bytes it came from) and nothing else.
* :func:`unpack` decodes a small free-form value (a ref, the config, a checkpoint or
  conversation record) under a budget: a container may hold at most one element per
  :data:`MIN_ITEM_BYTES` of input, and every container built is charged for itself and its
  elements, so any input costs a small multiple of its size (the decode stops at the first
  container past the budget).

Either raises ValueError (the callers turn it into CorruptError naming the object).
"""

from __future__ import annotations

from typing import Any

import msgpack

#: Python bytes the containers of a decoded value may cost per input byte.
FACTOR = 8
#: Input bytes per container element, at least (beyond the first :data:`_FREE_ITEMS`): a
#: longer array or map is refused before it is built.
MIN_ITEM_BYTES = 8
_FREE_ITEMS = 4096
#: Decoding headroom: a small value (a ref, a typical record) is never refused for its shape.
_FLOOR = 1 << 20
#: Charge per container and per element (an empty list is 56 bytes, an element a pointer and
#: its share of what it points to).
_CONTAINER, _ELEMENT = 64, 32


def unpack(data: bytes, *, strict_map_key: bool = True, items: int | None = None) -> Any:
    """``data`` decoded, at most about ``FACTOR * len(data)`` bytes of Python objects whatever
    it holds; ValueError (or a msgpack error) otherwise.

    With ``items`` (a value whose schema bounds its elements, such as a checkpoint record's
    metadata): at most that many containers and elements, whatever its length, so its cost is
    fixed by the schema, not by the input (a legal record of many tiny items passes)."""
    budget = FACTOR * len(data) + _FLOOR if items is None else (_CONTAINER + _ELEMENT) * items
    spent = 0

    def charge(n: int) -> None:
        nonlocal spent
        spent += _CONTAINER + _ELEMENT * n
        if spent > budget:
            raise ValueError("it decodes to far more than its size")

    def on_list(items: list[Any]) -> list[Any]:
        charge(len(items))
        return items

    def on_pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
        charge(2 * len(pairs))
        return dict(pairs)

    most = len(data) // MIN_ITEM_BYTES + _FREE_ITEMS if items is None else items
    return msgpack.unpackb(
        data, raw=False, strict_map_key=strict_map_key, list_hook=on_list, object_pairs_hook=on_pairs,
        max_array_len=most, max_map_len=most, max_ext_len=0,
    )


class Short(ValueError):
    """A prefix read by :class:`SchemaReader` ends before the value does: read more of it."""


_ARRAY = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])
_MAP = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])


class SchemaReader:
    """A schema-guided walk over one msgpack value (see the module docstring)."""

    def __init__(self, data: bytes | memoryview, *, prefix: bool = False) -> None:
        """``prefix``: ``data`` may be the start of a longer value (a bundle's head read by
        range): running out of it raises :class:`Short`, and counts are not checked against it."""
        self.data = data
        self.prefix = prefix
        self._u = msgpack.Unpacker(raw=False, max_buffer_size=max(len(data), 1), max_ext_len=0)
        self._u.feed(data)

    def _peek(self) -> int:
        pos: int = self._u.tell()
        if pos >= len(self.data):
            raise Short("it ends too soon") if self.prefix else ValueError("it ends too soon")
        return self.data[pos]

    def tell(self) -> int:
        """Where the next value starts in ``data``."""
        return int(self._u.tell())

    def _count(self, n: int) -> int:
        # Each element takes at least one byte: a count the rest cannot hold is a lie.
        if not self.prefix and n > len(self.data) - self._u.tell():
            raise ValueError("a count is larger than what follows it")
        return n

    def array(self) -> int:
        """Open an array; its length."""
        if self._peek() not in _ARRAY:
            raise ValueError("an array was expected")
        return self._count(int(self._u.read_array_header()))

    def map(self) -> int:
        """Open a map; its number of pairs."""
        if self._peek() not in _MAP:
            raise ValueError("a map was expected")
        return self._count(int(self._u.read_map_header()))

    def scalar(self) -> Any:
        if self._peek() in _ARRAY or self._peek() in _MAP:
            raise ValueError("a value was expected, not an array or map")
        return self._u.unpack()

    def bytes_(self, most: int | None = None) -> bytes:
        v = self.scalar()
        if not isinstance(v, bytes) or (most is not None and len(v) > most):
            raise ValueError("a byte string was expected" if not isinstance(v, bytes) else "a byte string is too long")
        return v

    def optional_bytes(self) -> bytes | None:
        v = self.scalar()
        if v is not None and not isinstance(v, bytes):
            raise ValueError("a byte string was expected")
        return v

    def int_(self) -> int:
        v = self.scalar()
        if type(v) is not int:
            raise ValueError("an integer was expected")
        return v

    def str_(self, most: int = 1024) -> str:
        v = self.scalar()
        if not isinstance(v, str) or len(v) > most:
            raise ValueError("a short string was expected")
        return v

    def pair(self) -> None:
        """Open a two-element array."""
        if self.array() != 2:
            raise ValueError("a pair was expected")

    def done(self) -> None:
        if self._u.tell() != len(self.data):
            raise ValueError("bytes follow the value")
