"""Which requests of the resident service took effect (exactly-once answers for its clients).

A client that sent a command to the service and lost the answer (the service was killed after
doing the work, before replying) must never run the command again: an ``undo`` would undo
twice, an ``edit`` insert its line twice.  So every request carries an id, and the transaction
that makes its effect durable also writes ``requests/<id>``: the command and what it did (the
checkpoint recorded, the operation logged, the file written).  The client then reads that row
to say what happened.  A request whose effect spans several transactions (an edit: the
checkpoint first, then the file) writes its row in each, the last one saying it finished.

The table keeps the newest :data:`KEEP` rows, give or take :data:`SLACK` (a client looks its
id up at once).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    from snapstore.storage.backend import ReadView, WriteBatch

TABLE = "requests"
#: How many rows are kept (the oldest go when a write finds more).
KEEP = 1024
SLACK = 256


class Request:
    """The request a StageContext is working for: its id and command (set by the service)."""

    __slots__ = ("id", "command")

    def __init__(self, rid: bytes, command: str) -> None:
        self.id = rid
        self.command = command


def record(batch: WriteBatch, request: Request | None, **what: Any) -> None:
    """Write ``request``'s row into ``batch`` (the transaction of its effect); nothing when the
    work is not done for a service request."""
    if request is None:
        return
    row = {"command": request.command, "time_ns": time.time_ns(), **what}
    batch.put(TABLE, request.id, msgpack.packb(row, use_bin_type=True))
    with batch.reading() as view:
        for key in stale(view):
            batch.delete(TABLE, key)


def find(view: ReadView, rid: bytes) -> dict[str, Any] | None:
    """The row of request ``rid``, or None (a damaged row reads as None: it says nothing)."""
    raw = view.get(TABLE, rid)
    if raw is None:
        return None
    try:
        row = msgpack.unpackb(raw, raw=False)
    except (ValueError, msgpack.UnpackException):
        return None
    return row if isinstance(row, dict) else None


def stale(view: ReadView) -> list[bytes]:
    """The oldest rows past :data:`KEEP` once there are :data:`SLACK` more (so the scan runs
    once per SLACK requests), to delete; empty on almost every call."""
    if view.count(TABLE) <= KEEP + SLACK:
        return []
    rows = []
    for key, raw in view.items(TABLE):
        try:
            when = msgpack.unpackb(raw, raw=False).get("time_ns", 0)
        except (ValueError, AttributeError, msgpack.UnpackException):
            when = 0
        rows.append((when, key))
    rows.sort()
    return [key for _, key in rows[: len(rows) - KEEP]]
