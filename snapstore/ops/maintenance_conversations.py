"""Conversation records gathered again: records written before the compact form (each one's
messages compressed alone, ``inline``, or after a full ``gc`` of those days, in a chunk of their
own) rewritten as compact records (:mod:`snapstore.records.conversation_delta`), each compressed
against the messages before it.  Run by the maintenance passes (inline records only: a chunk a
record stops naming stays in its pack until ``gc``) and by ``gc`` before its mark (both forms:
the chunks no record names any more are then swept).

**Safe at every step.**  A record is replaced under its own key by one that holds the same
messages; a compact record depends on the *bytes* of the messages before it, not on how their
records store them, so any mix of old and new records reads back the same conversation.  Each
step reads and compresses without the writer lock, then, under ``locked()``, writes in one
transaction only the records whose stored value is still the one it read (a snapshot never
rewrites a record, a gc may delete one meanwhile).  A kill anywhere leaves every record in one
form or the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from snapstore.errors import CorruptError
from snapstore.records import conversation, conversation_delta
from snapstore.storage import packs
from snapstore.storage.backend import Backend

#: Records rewritten per transaction (each holds at most ``conversation.INLINE_MAX`` bytes).
STEP = 64


def legacy(backend: Backend) -> list[bytes]:
    """Ids of the records in the map form (the compact form is a msgpack array): one pass over
    the table's keys and first bytes."""
    return [rid for rid, _, head in backend.value_sizes("conversations") if _is_map(head)]


def _is_map(head: bytes) -> bool:
    return bool(head) and (head[0] & 0xF0 == 0x80 or head[0] in (0xDE, 0xDF))  # fixmap, map16, map32


def rewrites(backend: Backend, rids: list[bytes], level: int, chunks: bool) -> Iterator[tuple[bytes, bytes, bytes]]:
    """``(record id, stored value, compact value)`` for the records of ``rids`` that can be
    rewritten (``chunks``: those naming their chunks too, up to ``INLINE_MAX`` bytes), read a
    conversation at a time: the longest first, which covers the records of its prefixes."""
    todo = set(rids)
    with backend.read() as view:
        totals = []
        for rid in rids:
            value = view.get("conversations", rid)
            try:
                totals.append((conversation.parse_record(rid, value)["total"] if value else 0, rid))
            except CorruptError:
                todo.discard(rid)
    for _, head in sorted(totals, reverse=True):
        if head not in todo:
            continue
        with backend.read() as view:
            try:
                found = list(_conversation(view.get, head, todo, level, chunks))
            except CorruptError:
                todo.discard(head)  # verify names it; it stays as it is
                continue
        yield from found


def _conversation(
    get: Callable[[str, bytes], bytes | None], cid: bytes, todo: set[bytes], level: int, chunks: bool
) -> Iterator[tuple[bytes, bytes, bytes]]:
    tail = conversation_delta.Tail()
    for rid, record in conversation.segments(get, cid):
        before = tail.last()
        own = b"".join(conversation.own_pieces(get, rid, record, before))
        if rid in todo:
            todo.discard(rid)
            value = get("conversations", rid)
            if value is not None and _convertible(record, own, chunks):
                fields = {k: record[k] for k in ("base", "count", "depth", "total")}
                yield rid, value, conversation_delta.pack(fields, own, before, level, record.get("parts"))
        tail.add(own)


def _convertible(record: dict[str, Any], own: bytes, chunks: bool) -> bool:
    if len(own) > conversation.INLINE_MAX:
        return False
    return "inline" in record or (chunks and bool(record["chunks"]))


def run(
    backend: Backend, level: int, locked: Callable[[], AbstractContextManager[Any]], *, chunks: bool = False,
    stop: Callable[[], bool] | None = None,
) -> int:
    """Rewrite the store's map-form records as compact ones, :data:`STEP` per transaction under
    ``locked()``; ``stop()``, asked before each step, ends early.  How many were rewritten.
    Format 3 only: a format-1 or -2 store keeps what its readers read until ``upgrade``."""
    with backend.read() as view:
        if not packs.writes_compact_conversations(view.get):
            return 0
    rids = legacy(backend)
    if not rids:
        return 0
    done = 0
    step: list[tuple[bytes, bytes, bytes]] = []
    for item in rewrites(backend, rids, level, chunks):
        step.append(item)
        if len(step) >= STEP:
            if stop is not None and stop():
                return done
            done += _write(backend, step, locked)
            step = []
    if step and not (stop is not None and stop()):
        done += _write(backend, step, locked)
    return done


def _write(backend: Backend, step: list[tuple[bytes, bytes, bytes]], locked: Callable[[], AbstractContextManager[Any]]) -> int:
    written = 0
    with locked(), backend.write() as batch:
        for rid, old, new in step:
            if batch.get("conversations", rid) == old:  # (a gc may have deleted it meanwhile)
                batch.put("conversations", rid, new)
                written += 1
    return written
