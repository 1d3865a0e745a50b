"""A stream's index tree, built whole or updated where its leaves changed.

An index node lists ``[child id, child size]`` pairs; a node ends after a child whose id's
first byte has the :data:`NODE_MASK` bits clear (once it has two children), after
:data:`NODE_MAX` children, or at the level's last child.  Each cut depends only on the children
since the node began and on whether the child is the level's last, so when a few leaves change
the cuts before the node holding the first change are the same, and after the change the cuts
fall where they fell before as soon as a new node starts where an old one started inside the
unchanged tail.  :class:`IndexTree` keeps every level of the last tree it built and re-cuts only
between those two places, level by level: a manifest that changed in one chunk costs a few
nodes per level instead of a pass over every chunk (tests/test_index_tree.py checks it against
:func:`build_index` on random edits).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator

import blake3
import msgpack

#: Index nodes: a boundary after a child whose id's first byte has these bits clear (1 in 16),
#: with at least 2 and at most NODE_MAX children so every level is at least halved.
NODE_MASK = 0x0F
NODE_MAX = 64

Ref = tuple[bytes, int]  # (id, plain size)

#: ``emit(id, plain)``: receives each index node built afresh.
Emit = Callable[[bytes, bytes], None]


def _node(children: list[Ref]) -> tuple[bytes, bytes, int]:
    """``(id, plain bytes, size covered)`` of the index node listing ``children``."""
    plain: bytes = msgpack.packb([[c, s] for c, s in children])
    nid: bytes = blake3.blake3(plain).digest()
    return nid, plain, sum(s for _, s in children)


class _IndexLevel:
    """The nodes built over one level's refs: where each ends, their refs and plain bytes, and
    how many refs they were cut over (``n``: the refs' list may be the caller's, edited in place
    since, as the manifest codec's leaves and the level below's parents are)."""

    __slots__ = ("n", "ends", "parents", "plains")

    def __init__(self, refs: list[Ref], ends: list[int], parents: list[Ref], plains: list[bytes]) -> None:
        self.n, self.ends, self.parents, self.plains = len(refs), ends, parents, plains


def _cut(refs: list[Ref], start: int, resync: Callable[[int], bool] | None) -> tuple[list[int], list[Ref], list[bytes], int]:
    """Cut ``refs`` into nodes from node start ``start`` until the end or until ``resync(j)``
    holds at a node start ``j``; returns ``(ends, parents, plains, j)``."""
    ends: list[int] = []
    parents: list[Ref] = []
    plains: list[bytes] = []
    n = len(refs)
    first = start
    i = start
    while i < n:
        count = i - first + 1
        if i == n - 1 or count >= NODE_MAX or (count >= 2 and refs[i][0][0] & NODE_MASK == 0):
            nid, plain, size = _node(refs[first : i + 1])
            ends.append(i + 1)
            parents.append((nid, size))
            plains.append(plain)
            first = i + 1
            if resync is not None and first < n and resync(first):
                return ends, parents, plains, first
        i += 1
    return ends, parents, plains, n


def _build_level(refs: list[Ref]) -> _IndexLevel:
    ends, parents, plains, _ = _cut(refs, 0, None)
    return _IndexLevel(refs, ends, parents, plains)


def build_index(leaves: list[Ref], emit: Emit) -> tuple[int, bytes]:
    """Build the index tree over ``leaves``; ``emit(id, plain)`` receives each index node.

    Returns ``(height, root id)``; height 0 means the single leaf is the root.
    """
    tree = IndexTree()
    return tree.build(leaves, emit)


class IndexTree:
    """The last index tree built over a stream's leaves (every level's nodes), so the next
    one over leaves that share a prefix and a suffix with them re-cuts only between."""

    __slots__ = ("levels",)

    def __init__(self) -> None:
        self.levels: list[_IndexLevel] = []

    def build(self, leaves: list[Ref], emit: Emit) -> tuple[int, bytes]:
        """The whole tree over ``leaves``: ``(height, root id)``; every node goes to ``emit``."""
        self.levels = []
        return self._grow(leaves, 0, emit)

    def update(self, leaves: list[Ref], prefix: int, suffix: int, emit: Emit) -> tuple[int, bytes]:
        """The tree over ``leaves``, whose first ``prefix`` and last ``suffix`` refs are those
        of the leaves of the last call (the caller vouches for it); only nodes built afresh go
        to ``emit``.  Returns ``(height, root id)``, as :meth:`build` would."""
        if not self.levels:
            return self.build(leaves, emit)
        refs = leaves
        h = 0
        while len(refs) > 1:
            if h >= len(self.levels) or self.levels[h].n < 2:
                del self.levels[h:]
                return self._grow(refs, h, emit)
            level = self.levels[h]
            prefix, suffix = _update_level(level, refs, prefix, suffix, emit)
            refs = level.parents
            h += 1
        del self.levels[h:]
        return h, refs[0][0]

    def nodes(self) -> Iterator[tuple[bytes, bytes]]:
        """Every index node of the current tree, ``(id, plain bytes)``."""
        for level in self.levels:
            for (nid, _), plain in zip(level.parents, level.plains):
                yield nid, plain

    def _grow(self, refs: list[Ref], h: int, emit: Emit) -> tuple[int, bytes]:
        while len(refs) > 1:
            level = _build_level(refs)
            for (nid, _), plain in zip(level.parents, level.plains):
                emit(nid, plain)
            self.levels.append(level)
            refs = level.parents
            h += 1
        return h, refs[0][0]


def _update_level(level: _IndexLevel, refs: list[Ref], prefix: int, suffix: int, emit: Emit) -> tuple[int, int]:
    """Re-cut ``level`` (in place) for its new ``refs``; returns the parents' common prefix and
    suffix with the old parents.  The level's lists are edited where they changed, not copied:
    a copy touches every node's objects (their reference counts), O(leaves) a checkpoint."""
    old_n, n = level.n, len(refs)
    delta = n - old_n
    ends = level.ends
    prefix = min(prefix, old_n, n)
    suffix = min(suffix, old_n - prefix, n - prefix)
    # The node holding the first changed ref (the last node when refs were only appended: its
    # end was the level's end, a cut that need not happen now).
    k0 = min(bisect_right(ends, prefix), len(ends) - 1)
    start = ends[k0 - 1] if k0 else 0
    tail = n - suffix

    def resync(j: int) -> bool:
        # A node starts at j in the unchanged tail where an old node started: the rest repeats.
        if j < tail:
            return False
        i = bisect_left(ends, j - delta)
        return i < len(ends) and ends[i] == j - delta

    fresh_ends, fresh_parents, fresh_plains, j = _cut(refs, start, resync)
    for (nid, _), plain in zip(fresh_parents, fresh_plains):
        emit(nid, plain)
    if j < n:
        k1 = bisect_left(ends, j - delta) + 1  # the old node that starts at j - delta
        new_suffix = len(level.parents) - k1
        if delta:
            for i in range(k1, len(ends)):
                ends[i] += delta
    else:
        k1 = len(ends)
        new_suffix = 0
    ends[k0:k1] = fresh_ends
    level.parents[k0:k1] = fresh_parents
    level.plains[k0:k1] = fresh_plains
    level.n = n
    return k0, new_suffix
