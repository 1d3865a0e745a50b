"""Checking many conversations of one store without reading each one from its first message.

An agent's session stores one conversation per checkpoint, each the previous one plus a few
messages: checking every checkpoint's conversation from its start reads and decodes
O(checkpoints x messages). A conversation's id is the hash of all its messages, so once one has
been checked, any conversation that passes through the same record holds exactly the same
messages up to it (the same hash). :class:`Checker` keeps, for the last conversations it
checked, the hash state, message count and last bytes at their end, and starts the next check
from the newest record it already knows. Checking conversations by growing message count (what
:func:`order` gives) makes each check read only what its conversation added.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import blake3

from snapstore.errors import CorruptError
from snapstore.records import conversation, conversation_delta
from snapstore.records.schema import Get

#: Conversations whose end state is kept: one per session interleaved in the order checked.
KEEP = 64


class Checker:
    """Checks conversations of one read view against their ids, each message decoded once."""

    def __init__(self, get: Get, keep: int = KEEP) -> None:
        self._get = get
        self._keep = keep
        #: conversation id -> (hash state, message count, its last bytes) at its end.
        self._known: OrderedDict[bytes, tuple[Any, int, bytes]] = OrderedDict()

    def check(self, cid: bytes) -> int:
        """The message count of conversation ``cid``; CorruptError when it is damaged (as
        :func:`conversation.read` finds it)."""
        segments, after = conversation.segments_after(self._get, cid, self._known)
        hasher, count, tail = blake3.blake3(), 0, conversation_delta.Tail()
        if after is not None:
            self._known.move_to_end(after)
            state, count, last = self._known[after]
            hasher = state.copy()
            tail.add(last)
        for rid, record in segments:
            if count != record["count"]:
                raise CorruptError(f"conversation {rid.hex()} does not continue its base")
            for data in conversation.own_pieces(self._get, rid, record, tail.last()):
                hasher.update(data)
                count += _count(rid, data)
                tail.add(data)
            if count != record["total"]:
                raise CorruptError(f"conversation {rid.hex()} holds {count} messages, not {record['total']}")
        if hasher.digest() != cid:
            raise CorruptError(f"conversation {cid.hex()} does not match its id")
        self._known[cid] = (hasher, count, tail.last())
        if len(self._known) > self._keep:
            self._known.popitem(last=False)
        return count


def _count(rid: bytes, data: bytes) -> int:
    """How many messages ``data`` holds, each decoded (a damaged one raises CorruptError)."""
    return len(conversation.decode_pieces(rid, [data]))


def order(get: Get, cids: Iterable[bytes]) -> list[bytes]:
    """``cids``, deduplicated, by growing message count (one whose count cannot be read first:
    its check says what is wrong with it)."""
    counted: list[tuple[int, bytes]] = []
    for cid in dict.fromkeys(cids):
        try:
            total, _ = conversation.info(get, cid)
        except CorruptError:
            total = -1
        counted.append((total, cid))
    counted.sort()
    return [cid for _, cid in counted]
