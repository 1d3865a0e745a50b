"""What a set of checkpoints reaches, in the order a reader meets it.

A push uploads exactly this (less what the remote already has) and a fetch checks that it
arrived whole.  The walk is gc's (:class:`snapstore.ops.gc.Marker`): manifest streams, the
content stream of every file entry, conversation record chains; kept here in first-seen order
so chunks of one file land in one frame of one pack.
"""

from __future__ import annotations

from snapstore.errors import CorruptError
from snapstore.records import conversation, manifest
from snapstore.records.checkpoint import references
from snapstore.storage import objects
from snapstore.storage.objects import Getter


class Closure:
    """Ordered sets (dicts) of chunk ids, stream record ids and conversation record ids."""

    def __init__(self, get: Getter) -> None:
        self.get = get
        self.chunks: dict[bytes, None] = {}
        self.streams: dict[bytes, None] = {}
        self.conversations: dict[bytes, None] = {}
        self._streams_done: set[bytes] = set()
        self._walked: dict[bytes, int] = {}

    def stream(self, sid: bytes, *, distinct: bool = False) -> None:
        if sid in self._streams_done:
            return
        self._streams_done.add(sid)
        if self.get("streams", sid) is not None:
            self.streams[sid] = None
        for nid, _, _ in objects.walk_stream(self.get, sid, walked=self._walked, distinct=distinct):
            self.chunks[nid] = None

    def checkpoint(self, cid: bytes, packed: bytes) -> None:
        """Add what checkpoint ``cid`` (its record ``packed``) reaches; CorruptError when
        something it names cannot be read."""
        mid, conv = references(cid, packed)
        self.stream(mid, distinct=True)
        for leaf in objects.leaf_ids(self.get, mid):
            data = objects.load_chunk(self.get, leaf)
            for e in manifest.iter_entries_of_chunks(mid, [data]):
                if e.is_file:
                    self.stream(e.ref)
        if conv is None:
            return
        if self.get("conversations", conv) is not None:
            for rid, record in conversation.segments(self.get, conv):
                self.conversations[rid] = None
                for ref in record["chunks"]:
                    self.chunks[ref[0]] = None
        else:  # a conversation stored as a plain stream (older layout)
            self.stream(conv)


def of(get: Getter, records: list[tuple[bytes, bytes]]) -> Closure:
    """The closure of the checkpoints ``(id, record)``."""
    c = Closure(get)
    for cid, packed in records:
        try:
            c.checkpoint(cid, packed)
        except CorruptError as exc:
            raise CorruptError(f"checkpoint {cid.hex()} cannot be read whole ({exc}); run 'snapstore verify'") from exc
    return c
