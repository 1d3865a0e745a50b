"""The value rules every stored record is checked against when it is read.

A record's hash proves it was not altered after it was written, not that it was written by
snapstore: a store copied from elsewhere (a shared archive, a downloaded project) can hold
records with valid hashes and hostile values (an infinite time, bytes where text belongs,
metadata nested a thousand levels).  Each reader checks the decoded value against these rules
and raises ``ValueError`` (its caller turns that into CorruptError, "damaged", exit 6), so one
bad record is isolated like a bad hash instead of bringing a command down.

The same bounds apply on write to what a user hands in (metadata): :func:`check_metadata`
raises UsageError there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from snapstore.errors import UsageError

ID_BYTES = 32

#: ``get(table, key)``: a read view's lookup (None when absent), what readers are handed.
Get = Callable[[str, bytes], "bytes | None"]
#: ``put(id, value)``: where a writer hands each object it made.
Put = Callable[[bytes, bytes], None]

#: A time in nanoseconds since the epoch: not before it, and below 2**63 (year 2262), which
#: every date function handles.
MAX_TIME_NS = (1 << 63) - 1

#: The largest integer a record may hold (msgpack's range; a count, a size, a sequence number).
MAX_INT = (1 << 64) - 1
MIN_INT = -(1 << 63)

#: Metadata: nesting depth (a dict or list inside another counts one level), and the total
#: number of values (keys, items and leaves) and of string characters.
MAX_METADATA_DEPTH = 32
MAX_METADATA_ITEMS = 100_000
MAX_METADATA_CHARS = 16 << 20

#: A message, task or tag: text of at most this many characters.
MAX_TEXT = 1 << 20


def is_int(value: object) -> bool:
    """An int that is not a bool (msgpack yields ``True`` for its true, which ``int`` accepts)."""
    return type(value) is int


def check_id(value: object, what: str) -> bytes:
    """A 32-byte object id."""
    if not isinstance(value, bytes) or len(value) != ID_BYTES:
        raise ValueError(f"bad {what} id")
    return value


def check_optional_id(value: object, what: str) -> bytes | None:
    """None, or a 32-byte object id."""
    return None if value is None else check_id(value, what)


def check_time(value: object, what: str = "time_ns") -> int:
    """A time in nanoseconds: an int in ``[0, MAX_TIME_NS]`` (floats, inf and NaN refused)."""
    if not is_int(value):
        raise ValueError(f"{what} is not an integer")
    assert isinstance(value, int)
    if not 0 <= value <= MAX_TIME_NS:
        raise ValueError(f"{what} {value} is out of range")
    return value


def check_count(value: object, what: str) -> int:
    """A non-negative integer within msgpack's range."""
    if not is_int(value):
        raise ValueError(f"{what} is not an integer")
    assert isinstance(value, int)
    if not 0 <= value <= MAX_INT:
        raise ValueError(f"{what} {value} is out of range")
    return value


def check_text(value: object, what: str) -> str:
    """A string of at most MAX_TEXT characters."""
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a string")
    if len(value) > MAX_TEXT:
        raise ValueError(f"{what} is longer than {MAX_TEXT} characters")
    return value


def check_optional_text(value: object, what: str) -> str | None:
    return None if value is None else check_text(value, what)


def check_texts(value: object, what: str) -> list[str]:
    """A list of strings."""
    if not isinstance(value, list):
        raise ValueError(f"{what} is not a list")
    return [check_text(v, what) for v in value]


class _Budget:
    """What is left of the metadata bounds while one value is checked."""

    __slots__ = ("chars", "items")

    def __init__(self) -> None:
        self.items = MAX_METADATA_ITEMS
        self.chars = MAX_METADATA_CHARS


def json_problem(value: object) -> str | None:
    """Why ``value`` is not JSON-like within the metadata bounds, or None when it is.

    JSON-like: None, bool, an int within msgpack's range, a finite float, a string, a list of
    JSON-like values, a dict with string keys and JSON-like values.  Recursion stops at
    MAX_METADATA_DEPTH, far below Python's limit, whatever the input's depth.  Kept cheap
    (scalars tested inline, one call per container): this runs on every checkpoint record
    every listing reads.
    """
    budget = _Budget()
    return _container_problem(value, 0, budget) if isinstance(value, (dict, list, tuple)) else (
        _scalar_problem(value, budget)
    )


def _scalar_problem(v: object, budget: _Budget) -> str | None:
    if isinstance(v, str):
        budget.chars -= len(v)
    elif v is None or isinstance(v, bool):
        pass
    elif isinstance(v, int):
        if not MIN_INT <= v <= MAX_INT:
            return f"the integer {v} is out of range"
    elif isinstance(v, float):
        if not math.isfinite(v):
            return f"the number {v} is not finite"
    else:
        return f"a value is of type {type(v).__name__}, not JSON"
    return None


def _container_problem(value: object, depth: int, budget: _Budget) -> str | None:
    if depth >= MAX_METADATA_DEPTH:
        return f"nested deeper than {MAX_METADATA_DEPTH} levels"
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                return f"a key is not a string ({type(k).__name__})"
            budget.chars -= len(k)
        values: Iterable[object] = value.values()
        budget.items -= 2 * len(value)
    else:
        assert isinstance(value, (list, tuple))
        values = value
        budget.items -= len(value)
    if budget.items < 0:
        return f"more than {MAX_METADATA_ITEMS} values"
    for v in values:
        if isinstance(v, (dict, list, tuple)):
            problem = _container_problem(v, depth + 1, budget)
        elif isinstance(v, str):
            budget.chars -= len(v)
            continue
        else:
            problem = _scalar_problem(v, budget)
        if problem:
            return problem
    if budget.chars < 0:
        return f"more than {MAX_METADATA_CHARS} characters of text"
    return None


def check_json_map(value: object, what: str) -> dict[str, Any]:
    """A dict with string keys and JSON-like values within the metadata bounds."""
    if not isinstance(value, dict):
        raise ValueError(f"{what} is not a map")
    problem = json_problem(value)
    if problem:
        raise ValueError(f"{what}: {problem}")
    return value


def check_stats(value: object) -> dict[str, Any]:
    """A checkpoint's stats: string keys, values non-negative ints or one level of such maps."""
    if not isinstance(value, dict):
        raise ValueError("stats is not a map")
    for key, v in value.items():
        if type(v) is int and type(key) is str and 0 <= v <= MAX_INT:
            continue  # the common case, tested in one line
        if not isinstance(key, str):
            raise ValueError("a stats key is not a string")
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if not isinstance(k2, str):
                    raise ValueError("a stats key is not a string")
                check_count(v2, f"stats {key}.{k2}")
        else:
            check_count(v, f"stats {key}")
    return value


def check_new_record(message: object, task: object, metadata: object) -> None:
    """Refuse (UsageError) a message, task or metadata that a reader would refuse."""
    for what, value in (("message", message), ("task", task)):
        if value is None and what == "task":
            continue
        if not isinstance(value, str):
            raise UsageError(f"the {what} must be a string")
        if len(value) > MAX_TEXT:
            raise UsageError(f"the {what} is longer than {MAX_TEXT} characters")
    if metadata is not None:
        check_metadata(metadata)


def check_metadata(metadata: object) -> None:
    """Refuse (UsageError) metadata a reader would refuse: the write-side bound."""
    if not isinstance(metadata, dict):
        raise UsageError("metadata must be a dict")
    problem = json_problem(metadata)
    if problem:
        raise UsageError(f"metadata is refused: {problem}")


#: What stands for a character that is not valid Unicode (a lone surrogate: half of a cut
#: emoji, or a byte of a command-line argument that was not UTF-8).
REPLACEMENT = "\ufffd"


def clean_text(value: Any) -> tuple[Any, bool]:
    """``value`` with every lone surrogate in its strings (keys included) replaced by U+FFFD,
    and whether any was: such strings cannot be stored (UTF-8) nor sent (JSON).  Values without
    one are returned as they are (no copy)."""
    if isinstance(value, str):
        if value.isascii():
            return value, False
        try:
            value.encode("utf-8")
            return value, False
        except UnicodeEncodeError:
            # Through UTF-16 with surrogatepass: a valid pair becomes its character again, a
            # lone half becomes U+FFFD.
            fixed = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
            return fixed, True
    if isinstance(value, dict):
        changed = False
        out = {}
        for k, v in value.items():
            k2, c1 = clean_text(k)
            v2, c2 = clean_text(v)
            changed = changed or c1 or c2
            out[k2] = v2
        return (out, True) if changed else (value, False)
    if isinstance(value, list | tuple):
        items = [clean_text(v) for v in value]
        if any(c for _, c in items):
            return [v for v, _ in items], True
        return value, False
    return value, False
