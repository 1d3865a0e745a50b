"""Which requests of the resident service took effect (exactly-once answers for its clients).

A client that sent a command to the service and lost the answer (the service was killed after
doing the work, before replying) must never run the command again: an ``undo`` would undo
twice, an ``edit`` insert its line twice.  So every request carries an id, and the transaction
that makes its effect durable also writes ``requests/<id>``: the command and what it did (the
checkpoint recorded, the operation logged, the file about to be written).  The client then
reads that row to say what happened.  A request whose effect spans several transactions (a
restore: its safety checkpoint, its journal, its operation; an edit: the checkpoint, then the
file) updates its row in each (:func:`record` merges), and every other transaction made while
the request runs is stamped too (:func:`stamp`, ``writes``: how many committed), so a request
with no row wrote nothing at all.  A request that commits nothing (an unchanged snapshot, an
undo with nothing to undo) gets a row with its exit code in its own small transaction before
the answer goes out.

The table keeps the newest :data:`KEEP` rows, give or take :data:`SLACK` (a client looks its
id up at once, so a row needs to outlive its request by seconds, not days).
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    from snapstore.storage.backend import Backend, ReadView, WriteBatch

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
    """Add ``what`` to ``request``'s row in ``batch`` (the transaction of its effect): the row
    as this batch leaves it, merged; nothing when the work is not done for a service request."""
    if request is None:
        return
    seam(request, "before-" + str(what.get("stage") or next(iter(what), "")))
    row = _pending(batch, request.id)
    row.update(what, command=request.command, time_ns=time.time_ns())
    batch.put(TABLE, request.id, msgpack.packb(row, use_bin_type=True))
    with batch.reading() as view:
        for key in stale(view):
            batch.delete(TABLE, key)


def note(backend: Backend, request: Request | None, **what: Any) -> None:
    """Add ``what`` to ``request``'s row in a transaction of its own (a step whose effect is
    not a store transaction: an edit's file write, announced just before it)."""
    if request is None:
        return
    with backend.write() as batch:
        record(batch, request, **what)


def stamp(batch: WriteBatch, request: Request) -> None:
    """Count one more committed transaction in ``request``'s row (the backend calls this for
    every non-empty batch while the request runs, after the stage's own :func:`record`)."""
    row = _pending(batch, request.id)
    record(batch, request, writes=int(row.get("writes", 0)) + 1)


def _pending(batch: WriteBatch, rid: bytes) -> dict[str, Any]:
    raw = batch.get(TABLE, rid)
    if raw is None:
        return {}
    row = _decode(raw)
    return row if row is not None else {}


def seam(request: Request | None, point: str) -> None:
    """Crash tests: SIGKILL this process (the service) at ``point`` when the request's
    ``SNAPSTORE_TEST_KILL_SERVICE`` names it.  Points: ``before-<what>`` (as a transaction
    recording ``checkpoint``, ``safety``, ``begun``, ``done``, ``writing``, ``reverted``,
    ``writes`` or ``exit`` is about to commit), ``mid-restore`` (half of a restore's steps
    done), ``after-command`` (everything recorded, the answer not sent), ``after-answer`` (the answer sent, the
    work left for after it, a restore's record of the tree, not done).  Never in-process:
    only a request run by the service has a ``request``."""
    if request is not None and os.environ.get("SNAPSTORE_TEST_KILL_SERVICE") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def find(view: ReadView, rid: bytes) -> dict[str, Any] | None:
    """The row of request ``rid``, or None (a damaged row reads as None: it says nothing)."""
    raw = view.get(TABLE, rid)
    return None if raw is None else _decode(raw)


def _decode(raw: bytes) -> dict[str, Any] | None:
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
