"""A checkpoint's new manifest leaves as deltas on its parent's leaves at the same offsets.

A checkpoint that changes a few files rewrites the manifest leaves holding their entries, and
a leaf barely compresses alone (each entry holds a 32-byte hash): on a 400-file edit history
these leaves were 5.5 KB of the ~8 KB a checkpoint stored.  Leaves are cut between entries by
their paths, so the parent's leaf at the same byte offset holds nearly the same entries; the
new leaf is stored as a delta on it when that pays, as a file chunk is
(:meth:`snapstore.storage.packs.DeltaBases.on`).

Finding the bases reads index nodes only, never a leaf: the new leaves and their offsets come
from a descent of the new manifest's index through its new nodes (an unchanged node has no new
leaf below it), and each base from a descent of the parent's index by offset.  (A search by
path read several leaves per new leaf.)
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import OrderedDict
from itertools import accumulate

from snapstore.errors import CorruptError
from snapstore.ops.context import StageContext
from snapstore.storage import entries, objects, packs

#: Longest delta chain of a manifest leaf (at most the store's ``storage.delta-depth``).  The
#: newest manifest is read most (status, diff, restore, cat of the latest checkpoint) and is
#: the end of its leaves' chains: 4 links cost a read at most 4 small decodes more per leaf.
MANIFEST_DELTA_DEPTH = 4
#: Leaves a checkpoint stores as deltas at most; the others whole.  Each costs a base read and
#: a compression: an agent's checkpoint changes a few leaves, a 100-file one about a hundred,
#: whose deltas would cost more time than the bytes they save.
MAX_LEAVES = 32
#: A leaf compressed alone takes about this fraction of its plain bytes (its entries' 32-byte
#: hashes do not compress): the size a delta is weighed
#: against, so a leaf is compressed once.
ALONE = 0.75
#: Index nodes kept parsed per process, keyed by id (the hash of their bytes: never stale).  A
#: checkpoint's new nodes are the next checkpoint's parent's, so a long-lived Store (the
#: service, an agent's process) descends its parent's index without reading a node.
NODES_KEPT = 4096

Node = tuple[list[bytes], list[int]]  # children's ids, and the offset just past each
_nodes: OrderedDict[bytes, Node] = OrderedDict()
_nodes_lock = threading.Lock()


def _keep(nid: bytes, node: Node) -> None:
    with _nodes_lock:
        _nodes[nid] = node
        _nodes.move_to_end(nid)
        while len(_nodes) > NODES_KEPT:
            _nodes.popitem(last=False)


def _kept(nid: bytes) -> Node | None:
    with _nodes_lock:
        return _nodes.get(nid)


def split(
    ctx: StageContext,
    chunks: list[tuple[bytes, bytes]],
    mid: bytes,
    record: bytes | None,
    parent: bytes,
) -> tuple[list[tuple[bytes, bytes]], list[packs.Frame]]:
    """``(chunks kept whole, delta frames)`` for the new plain ``chunks`` of manifest ``mid``
    (its stream ``record``, None for a manifest of one chunk) given the ``parent`` manifest."""
    fresh = dict(chunks)
    try:
        leaves = _new_leaves(fresh, mid, record)[:MAX_LEAVES]
    except CorruptError:
        return chunks, []
    if not leaves:
        return chunks, []
    deltas: list[packs.Frame] = []
    done: set[bytes] = set()
    with ctx.backend.read() as view:
        bases = packs.DeltaBases(view.get, min(ctx.delta_depth, MANIFEST_DELTA_DEPTH))
        old = _Index(view.get, parent)
        for cid, offset in leaves:
            try:
                base = old.leaf_at(offset)
            except CorruptError:
                break  # a damaged parent: the rest stay whole (verify reports it, not a snapshot)
            data = fresh[cid]
            frame = bases.on(cid, data, base, ctx.level, alone=int(len(data) * ALONE))
            # The next checkpoint's leaf here wants this one as its base: keep it, so a
            # long-lived Store does not decode it back (its delta chain) from the store.
            entries.remember_chunk(cid, data)
            if frame is not None:
                deltas.append(frame)
                done.add(cid)
    return [(cid, data) for cid, data in chunks if cid not in done], deltas


def _new_leaves(fresh: dict[bytes, bytes], mid: bytes, record: bytes | None) -> list[tuple[bytes, int]]:
    """``(id, offset)`` of the leaves of manifest ``mid`` that are in ``fresh``."""
    if record is None:
        return [(mid, 0)] if mid in fresh else []
    _, height, root = objects.parse_stream_record(mid, record)
    out: list[tuple[bytes, int]] = []
    stack = [(root, height, 0)]
    while stack:
        nid, h, offset = stack.pop()
        plain = fresh.get(nid)
        if plain is None:
            continue  # stored already, and so is everything below it
        if h == 0:
            out.append((nid, offset))
            continue
        children = objects.parse_index_node(nid, plain)
        _keep(nid, ([c for c, _ in children], list(accumulate(s for _, s in children))))
        for child, size in children:
            stack.append((child, h - 1, offset))
            offset += size
    return out


class _Index:
    """The parent manifest's index, read node by node as descents need them."""

    def __init__(self, get: objects.Getter, mid: bytes) -> None:
        self._get = get
        self.mid = mid
        self._record = get("streams", mid)
        self._root: tuple[int, int, bytes] | None = None

    def leaf_at(self, offset: int) -> bytes:
        """The leaf holding byte ``offset`` (the last leaf past the end); CorruptError when the
        index is damaged."""
        if self._record is None:
            return self.mid  # a manifest of one chunk
        if self._root is None:  # (parsed once, on the first descent: a damaged record raises there)
            self._root = objects.parse_stream_record(self.mid, self._record)
        size, height, nid = self._root
        for _ in range(height):
            ids, ends = self._children(nid, size)
            i = min(bisect_right(ends, offset), len(ids) - 1)
            offset -= ends[i - 1] if i else 0
            nid, size = ids[i], ends[i] - (ends[i - 1] if i else 0)
        return nid

    def _children(self, nid: bytes, size: int) -> Node:
        node = _kept(nid)
        if node is None:
            children = objects.index_children(self._get, nid, size)  # (checked against ``size``)
            node = ([c for c, _ in children], list(accumulate(s for _, s in children)))
            _keep(nid, node)
        elif node[1][-1] != size:
            raise CorruptError(f"index chunk {nid.hex()} covers {node[1][-1]} bytes, its parent says {size}")
        return node
