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

    def __init__(self, get: Getter, *, skip_leaves: frozenset[bytes] = frozenset(), track: bool = False) -> None:
        self.get = get
        self.chunks: dict[bytes, None] = {}
        self.streams: dict[bytes, None] = {}
        self.conversations: dict[bytes, None] = {}
        #: Manifest chunks whose entries are not walked (the caller knows where their closure is).
        self.skip_leaves = skip_leaves
        #: With ``track``: each walked manifest chunk's file streams, and each stream's nodes
        #: (all of them: a stream is then walked whole, never cut short at a node seen before).
        self.track = track
        self.leaf_streams: dict[bytes, list[bytes]] = {}
        self.stream_nodes: dict[bytes, list[bytes]] = {}
        self._streams_done: set[bytes] = set()
        self._walked: dict[bytes, int] = {}

    def stream(self, sid: bytes, *, distinct: bool = False) -> None:
        if sid in self._streams_done:
            return
        self._streams_done.add(sid)
        if self.get("streams", sid) is not None:
            self.streams[sid] = None
        walked = None if self.track else self._walked
        nodes = [nid for nid, _, _ in objects.walk_stream(self.get, sid, walked=walked, distinct=distinct)]
        for nid in nodes:
            self.chunks[nid] = None
        if self.track:
            self.stream_nodes[sid] = nodes

    def checkpoint(self, cid: bytes, packed: bytes) -> None:
        """Add what checkpoint ``cid`` (its record ``packed``) reaches; CorruptError when
        something it names cannot be read."""
        mid, conv = references(cid, packed)
        self.stream(mid, distinct=True)
        for leaf in objects.leaf_ids(self.get, mid):
            if leaf in self.skip_leaves or leaf in self.leaf_streams:
                continue
            data = objects.load_chunk(self.get, leaf)
            files = []
            for e in manifest.iter_entries_of_chunks(mid, [data]):
                if e.is_file:
                    self.stream(e.ref)
                    files.append(e.ref)
            if self.track:
                self.leaf_streams[leaf] = files
        if conv is None:
            return
        if self.get("conversations", conv) is not None:
            for rid, record in conversation.segments(self.get, conv):
                self.conversations[rid] = None
                for ref in record["chunks"]:
                    self.chunks[ref[0]] = None
        else:  # a conversation stored as a plain stream (older layout)
            self.stream(conv)


def manifest_leaves(get: Getter, records: list[tuple[bytes, bytes]]) -> set[bytes]:
    """The manifest chunks of the checkpoints ``(id, record)`` (their index walked, no entry read)."""
    out: set[bytes] = set()
    for cid, packed in records:
        out.update(objects.leaf_ids(get, references(cid, packed)[0]))
    return out


def of(
    get: Getter, records: list[tuple[bytes, bytes]], *, skip_leaves: frozenset[bytes] = frozenset(),
    track: bool = False,
) -> Closure:
    """The closure of the checkpoints ``(id, record)``, less what the entries of the manifest
    chunks ``skip_leaves`` reach (see :class:`Closure`)."""
    c = Closure(get, skip_leaves=skip_leaves, track=track)
    for cid, packed in records:
        try:
            c.checkpoint(cid, packed)
        except CorruptError as exc:
            raise CorruptError(f"checkpoint {cid.hex()} cannot be read whole ({exc}); run 'snapstore verify'") from exc
    return c
