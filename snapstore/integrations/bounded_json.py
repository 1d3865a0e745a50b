"""JSON that an agent hands over (hook payloads, transcript lines), bounded before it is decoded.

``json.loads`` of text nested 100,000 deep raises RecursionError (not ValueError), and a few
MiB of ``[[],[],...]`` become hundreds of MiB of Python objects.  :func:`loads` therefore
measures the text first, cheaply and without recursion: its length, the number of values it
holds (commas and openings outside strings) and its depth (a running sum over the brackets left
once the strings are taken out); only text inside all three caps reaches the decoder.  Anything
else raises :class:`Unbounded`, a ValueError, so a caller that already skips undecodable text
skips it too.

:func:`read_stream` reads a hook's stdin up to a cap (an endless or huge stdin is not read
without bound); bytes that are not UTF-8 are kept as lone surrogates, as everywhere else.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import IO, Any

#: Deepest nesting accepted.  Real payloads and transcript lines nest a few dozen levels; the
#: stores' msgpack encoder refuses past 511, and Python's own recursion stops near 1,000.
MAX_DEPTH = 200
#: The largest hook payload read (a ``Write`` carries the whole file it writes; an event larger
#: than the service's frame still reaches the hook whole).
MAX_PAYLOAD_BYTES = 128 << 20
#: The most values a payload may hold (a Python object costs tens of bytes each).
MAX_PAYLOAD_VALUES = 2_000_000

# A JSON string, escapes included (the unrolled form: no backtracking per character).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class Unbounded(ValueError):
    """Text over a cap (size, values or depth): left undecoded.  ``reason`` says which."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def measure(text: str, max_values: int | None = None) -> tuple[int, int]:
    """``(values, depth)`` of JSON text, counted without decoding it (an upper bound on the
    values: every comma and opening outside a string, plus one).  Past ``max_values`` the depth
    is not counted (reported as 0): the text is refused anyway."""
    skeleton = _STRING.sub("", text)
    values = skeleton.count(",") + skeleton.count("[") + skeleton.count("{") + 1
    if max_values is not None and values > max_values:
        return values, 0
    brackets = _NOT_BRACKET.sub("", skeleton)
    del skeleton
    if not brackets:
        return values, 0
    return values, max(0, max(accumulate(map(_STEP.__getitem__, brackets))))


def loads(text: str, *, max_chars: int, max_values: int, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)`` when ``text`` is within the caps; :class:`Unbounded` otherwise, and
    ValueError for text that is not JSON."""
    return loads_counted(text, max_chars=max_chars, max_values=max_values, max_depth=max_depth)[0]


def loads_counted(text: str, *, max_chars: int, max_values: int, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """:func:`loads`, and the values counted (for a caller that caps several texts together)."""
    if len(text) > max_chars:
        raise Unbounded(f"{len(text)} characters (more than {max_chars})")
    values, depth = measure(text, max_values)
    if values > max_values:
        raise Unbounded(f"{values} values (more than {max_values})")
    if depth > max_depth:
        raise Unbounded(f"nested {depth} deep (more than {max_depth})")
    try:
        return json.loads(text), values
    except RecursionError as exc:  # not reached within MAX_DEPTH; kept as the last guard
        raise Unbounded("nested too deep to decode") from exc


def loads_payload(text: str) -> Any:
    """A hook payload decoded within the payload caps; UsageError (one line, for the hook's log
    and the agent's notice) for text that is not JSON or is over a cap."""
    from snapstore.errors import UsageError

    try:
        return loads(text, max_chars=MAX_PAYLOAD_BYTES, max_values=MAX_PAYLOAD_VALUES)
    except Unbounded as exc:
        raise UsageError(f"the hook's event is over snapstore's limits: {exc.reason}") from None
    except ValueError as exc:
        raise UsageError(f"the hook's event is not JSON ({exc})") from None


def read_stream(stream: IO[Any], limit: int = MAX_PAYLOAD_BYTES) -> str:
    """At most ``limit`` bytes (plus one, so that a caller sees it was over) of ``stream`` as
    text; bytes that are not UTF-8 are kept as lone surrogates.  A text stream (the service
    replays a hook's stdin as one) is read the same way, counted in characters."""
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        text: str = stream.read(limit + 1)
        return text
    data: bytes = buffer.read(limit + 1)
    return data.decode("utf-8", "surrogateescape")
