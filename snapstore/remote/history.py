"""A ref's published history: the bundles under ``log/<ns>/``, less those a forget record names.

Every push publishes one bundle under its namespace's prefix, create-only under a key of its own
(``<time:020>-<writer>-<h16>``), so that prefix is the ref's log of pushes: append-only, sorted
by time, and listed in one request per 1,000 pushes.  A push that lost its ref race (exit 9)
is in it too: every published checkpoint stays reachable.  Retention (``remote forget``,
``remote ref delete``) publishes a **forget record** under the same prefix (create-only, key
``<time:020>-<writer>-<h16>.forget``) naming bundles of that namespace that left the history;
readers leave them out and ``remote gc`` reclaims what only they hold (two-phase, as for packs).
Nothing in a history is ever edited, so a reader resumes a listing where it stopped, less
:data:`SKEW_NS` (writers' clocks differ; a listing may lag a write).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, NamedTuple

import msgpack

from snapstore.errors import CorruptError
from snapstore.remote import layout, wire
from snapstore.remote.names import encode_name
from snapstore.remote.transport import Transport
from snapstore.storage.objects import chunk_id

FORGET_MAGIC = b"SNAPFRGT"
FORGET_V = 1
#: The largest forget record read (about 90 bytes per bundle it names): a larger one is refused unread.
MAX_FORGET = 64 << 20
#: Bundles one forget record may name.
MAX_FORGOTTEN = 1 << 20
#: A listing resumes this far (by the time in the keys) before the last key it saw.
SKEW_NS = 60 * 10**9
#: The last segment of a bundle key (and of a forget record's, less its suffix).
_SHAPE = re.compile(r"[0-9]{20}-[0-9a-f]{1,64}-[0-9a-f]{16}")


class Forget(NamedTuple):
    """A parsed forget record: who took which bundles of ``ns`` out of its history, and when."""

    key: str
    ns: str
    writer: str
    user: str
    host: str
    time_ns: int
    bundles: list[str]


def is_forget_key(key: str) -> bool:
    return key.startswith("log/") and key.endswith(layout.FORGET_SUFFIX)


def forget_key(ns: str, time_ns: int, writer: str, body: bytes) -> str:
    return f"{layout.log_prefix(ns)}{time_ns:020d}-{writer}-{chunk_id(body)[:8].hex()}{layout.FORGET_SUFFIX}"


def encode_forget(ns: str, writer: str, time_ns: int, bundles: list[str], *, user: str = "", host: str = "") -> bytes:
    doc = {
        "v": FORGET_V, "ns": ns, "writer": writer, "time_ns": time_ns, "user": user[: layout.MAX_WHO],
        "host": host[: layout.MAX_WHO], "bundles": sorted(bundles),
    }
    packed: bytes = msgpack.packb(doc, use_bin_type=True)
    return FORGET_MAGIC + packed


def parse_forget(key: str, body: bytes) -> Forget:
    """Parse and check a forget record read from ``key``: its size, its hash suffix, each
    field's type, and that every key it names is a bundle of its own namespace."""
    def bad(why: str) -> CorruptError:
        return CorruptError(f"remote object {key} is corrupt ({why})")

    if len(body) > MAX_FORGET:
        raise bad(f"{len(body)} bytes, more than a forget record holds")
    stem = key[: -len(layout.FORGET_SUFFIX)] if is_forget_key(key) else ""
    if not stem.endswith("-" + chunk_id(body)[:8].hex()):
        raise bad("its content does not match its name")
    if not body.startswith(FORGET_MAGIC):
        raise bad("not a forget record")
    try:
        doc = _read_forget(body, key.split("/")[1])
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise bad(f"damaged: {exc}") from None
    return Forget(key, doc["ns"], doc["writer"], doc.get("user", ""), doc.get("host", ""), doc["time_ns"], doc["bundles"])


def _read_forget(body: bytes, segment: str) -> dict[str, Any]:
    r = wire.SchemaReader(memoryview(body)[len(FORGET_MAGIC) :])
    doc: dict[str, Any] = {}
    for _ in range(r.map()):
        field = r.str_(32)
        if layout.read_header(r, field, doc):
            continue
        if field == "bundles":
            doc[field] = keys = []
            count = r.array()
            if count > MAX_FORGOTTEN:
                raise ValueError(f"it names {count} bundles, more than {MAX_FORGOTTEN}")
            for _ in range(count):
                k = r.str_(layout.MAX_KEY)
                if not (layout.is_data_key(k) and k.startswith(f"log/{segment}/")):
                    raise ValueError(f"it names {k[:80]!r}, not a bundle of its namespace")
                keys.append(k)
        else:
            raise ValueError(f"unexpected field {field!r}")
    r.done()
    if doc.get("v") != FORGET_V:
        raise ValueError(f"unknown forget record version {doc.get('v')!r}")
    for field in ("ns", "writer", "time_ns", "bundles"):
        if field not in doc:
            raise KeyError(field)
    if encode_name(doc["ns"]) != segment:
        raise ValueError("its namespace is not the one its key names")
    return doc


class RefHistory(NamedTuple):
    """What a listing of a namespace found: its bundles (oldest first, forgotten ones left
    out), the forget records read, the bundles they name, and the last key listed."""

    bundles: list[str]
    forgets: list[Forget]
    forgotten: set[str]
    last: str | None


def resume_point(ns: str, last: str | None) -> str | None:
    """Where a listing of ``ns`` resumes after ``last`` (the last key a listing gave):
    :data:`SKEW_NS` earlier by the time in the key; None to list from the start."""
    if last is None:
        return None
    prefix = layout.log_prefix(ns)
    try:
        t = int(last[len(prefix) :].split("-", 1)[0])
    except ValueError:
        return None
    if not last.startswith(prefix) or t <= SKEW_NS:
        return None
    return f"{prefix}{t - SKEW_NS:020d}"


def read(transport: Transport, ns: str, *, start_after: str | None = None) -> RefHistory:
    """List namespace ``ns`` (from ``start_after``) and read its forget records (one GET
    each, bounded): the live bundles listed, oldest first.  CorruptError for a damaged record."""
    bundles: list[str] = []
    forget_keys: list[str] = []
    last = None
    for entry in transport.list(layout.log_prefix(ns), start_after):
        last = entry.key
        name = entry.key.rsplit("/", 1)[-1]
        if is_forget_key(entry.key) and _SHAPE.fullmatch(name[: -len(layout.FORGET_SUFFIX)]):
            forget_keys.append(entry.key)
        elif layout.is_data_key(entry.key) and _SHAPE.fullmatch(name):
            bundles.append(entry.key)
        # (any other key is none a writer of ours made: skipped, as odd ref keys are)
    forgets = read_forgets(transport, forget_keys)
    forgotten = {k for f in forgets for k in f.bundles}
    return RefHistory([k for k in bundles if k not in forgotten], forgets, forgotten, last)


def read_forgets(transport: Transport, keys: Iterable[str]) -> list[Forget]:
    """The forget records ``keys`` (one GET each; one gone meanwhile is skipped)."""
    out = []
    for key in keys:
        got = transport.get(key, MAX_FORGET)
        if got is not None:
            out.append(parse_forget(key, got.body))
    return out
