"""The snapshot's entries in path order, and the files and bytes they hold, kept across a
watching Store's snapshots: O(changed) instead of a sort and a sum over every file.

After a snapshot, the context keeps the ordered entries it built (with their totals) beside the
manifest memo's entries dict.  The next snapshot whose inputs were patched from that very dict
(``Inputs.base is memo.entries``) and say which paths may differ (``touched``) edits them in
those places only.  The entries are held in chunks of about :data:`CHUNK` (:class:`Chunked`),
copied on write: an edit copies the outer list of chunks (one pointer a chunk) and the chunks
it changes, never a pointer a file, so a 1-file checkpoint of a million-file tree copies a few
thousand pointers, not two lists of a million.  Any other snapshot sorts afresh.
tests/test_snapshot_ordered.py checks both against each other.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain
from typing import overload

from snapstore.records.manifest import EXEC, Entry
from snapstore.tree.packed import EntryMap, entry_kind_size, unpack_entry

#: What a chunk holds for an entry: the entry, or the packed value an
#: :class:`~snapstore.tree.packed.EntryMap` keeps for it (made into the entry when asked for).
Value = bytes | Entry

#: Entries a chunk holds after a sort; an edited chunk is split when it doubles.
CHUNK = 1024

#: A chunk: its paths and their values, as tuples (the cyclic collector stops visiting a tuple
#: of bytes once it has seen it, where it visits every item of a list at each collection: the
#: service's idle sweep, ~2 items a file), lists only while an edit builds them.
Chunk = tuple[Sequence[bytes], Sequence[Value]]


class Chunked(Sequence[Entry]):
    """Entries in path order, in chunks ``(paths, values)``; never changed once built (an
    edit builds a new one sharing every chunk it does not change).  A value is the entry or,
    for entries kept in an :class:`~snapstore.tree.packed.EntryMap`, its packed value (the
    same object the map holds): the entry is made when asked for, so the order holds no entry
    object a file.  ``packed``: whether any value may be packed (else each is its entry, given
    as it is)."""

    __slots__ = ("chunks", "firsts", "starts", "n", "packed")

    def __init__(
        self,
        chunks: list[Chunk],
        packed: bool = False,
        firsts: list[bytes] | None = None,
        starts: list[int] | None = None,
    ) -> None:
        self.chunks = chunks
        self.packed = packed
        #: Each chunk's first path (to find a path's chunk), and its index in the whole (given
        #: when known: an edit that moved neither shares the lists of the order it edited).
        self.firsts = [c[0][0] for c in chunks] if firsts is None else firsts
        self.starts = [0, *accumulate(len(c[0]) for c in chunks)] if starts is None else starts
        self.n = self.starts[-1]

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Entry]:
        if not self.packed:
            return chain.from_iterable(c[1] for c in self.chunks)  # type: ignore[misc]
        return chain.from_iterable(map(unpack_entry, *c) for c in self.chunks)

    @overload
    def __getitem__(self, i: int) -> Entry: ...
    @overload
    def __getitem__(self, i: slice) -> list[Entry]: ...
    def __getitem__(self, i: int | slice) -> Entry | list[Entry]:
        if isinstance(i, slice):
            lo, hi, step = i.indices(self.n)
            if step != 1:
                return list(self)[i]
            out: list[Entry] = []
            k = max(bisect_right(self.starts, lo) - 1, 0)
            while lo < hi and k < len(self.chunks):
                base = self.starts[k]
                paths, values = self.chunks[k]
                if self.packed:
                    out.extend(map(unpack_entry, paths[lo - base : hi - base], values[lo - base : hi - base]))
                else:
                    out.extend(values[lo - base : hi - base])  # type: ignore[arg-type]
                lo = base + len(values)
                k += 1
            return out
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        k = bisect_right(self.starts, i) - 1
        paths, values = self.chunks[k]
        return unpack_entry(paths[i - self.starts[k]], values[i - self.starts[k]])

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Chunked | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def paths(self) -> list[bytes]:
        """Every path, in order (a new list)."""
        return list(chain.from_iterable(c[0] for c in self.chunks))

    def find(self, path: bytes) -> Entry | None:
        """The entry of ``path``, or None (a bisection of the chunks' first paths, then of
        the chunk's)."""
        if not self.chunks:
            return None
        paths, values = self.chunks[max(bisect_right(self.firsts, path) - 1, 0)]
        j = bisect_left(paths, path)
        return unpack_entry(path, values[j]) if j < len(paths) and paths[j] == path else None


class Ordered:
    """Entries in path order, and the count and total size of the files."""

    __slots__ = ("entries", "files", "size", "same", "span")

    def __init__(
        self,
        entries: Chunked,
        files: int,
        size: int,
        same: bool | None = None,
        span: tuple[Sequence[Entry], list[tuple[int, int, int, int]]] | None = None,
    ) -> None:
        self.entries, self.files, self.size = entries, files, size
        #: Whether the entries are those of the kept order's dict (known only when patched:
        #: then nobody need compare the two dicts); None when not known.
        self.same = same
        #: When patched: ``(the kept entries, runs)``, each run ``(old_lo, old_hi, new_lo,
        #: new_hi)`` a range of the kept entries replaced by one of these, in order, and every
        #: entry outside them the same object in both (the manifest codec then compares
        #: nothing and re-cuts each run on its own).
        self.span = span

    @property
    def paths(self) -> list[bytes]:
        """Every path, in order (a new list: for checks, not for the snapshot's path)."""
        return self.entries.paths()


def order(
    kept: Ordered | None,
    kept_of: dict[bytes, Entry] | None,
    entries: dict[bytes, Entry],
    touched: set[bytes] | None,
    base: dict[bytes, Entry] | None,
) -> Ordered:
    """``entries`` in path order: ``kept`` (the order of the dict ``kept_of``) edited at
    ``touched`` when ``entries`` were patched from that very dict (``base``), else sorted."""
    if kept is not None and touched is not None and base is not None and base is kept_of:
        if not touched:  # (the usual checkpoint: nothing to edit, nothing to copy)
            return Ordered(kept.entries, kept.files, kept.size, True, (kept.entries, []))
        return _patched(kept, entries, touched)
    return full(entries)


def full(entries: dict[bytes, Entry]) -> Ordered:
    paths = sorted(entries)
    ordered: list[Value]
    if isinstance(entries, EntryMap):  # (its packed values: no entry object a file)
        raw = dict.__getitem__
        ordered = [raw(entries, p) for p in paths]
        files = size = 0
        for v in ordered:  # (no list a file beside the order: the service's peak is here)
            kind, n = entry_kind_size(v)
            if kind <= EXEC:
                files, size = files + 1, size + n
    else:
        ordered = [entries[p] for p in paths]
        sizes = [e[3] for e in ordered if e[1] <= EXEC]  # files (FILE, EXEC): one pass, no property calls
        files, size = len(sizes), sum(sizes)
    chunks: list[Chunk] = [(tuple(paths[i : i + CHUNK]), tuple(ordered[i : i + CHUNK])) for i in range(0, len(paths), CHUNK)]
    return Ordered(Chunked(chunks, isinstance(entries, EntryMap)), files, size)


def _patched(kept: Ordered, entries: dict[bytes, Entry], touched: set[bytes]) -> Ordered:
    old = kept.entries
    get = entries.raw if isinstance(entries, EntryMap) else entries.get  # (packed values kept packed)
    chunks = list(old.chunks)  # (one pointer a chunk; a chunk is copied before it is edited)
    lists: dict[int, tuple[list[bytes], list[Value]]] = {}  # (the chunks copied, as lists while edited)
    copied: set[int] = set()
    files, size = kept.files, kept.size
    same = True
    runs: list[tuple[int, int, int, int]] = []
    delta = 0  # (entries inserted minus deleted so far: i - delta is the kept list's index)
    for path in sorted(touched):
        k = max(bisect_right(old.firsts, path) - 1, 0)  # (the kept chunks: same indexes here)
        if not chunks:
            chunks.append(([], []))
        if k not in copied:
            chunks[k] = lists[k] = (list(chunks[k][0]), list(chunks[k][1]))
            copied.add(k)
        cpaths, centries = lists[k]
        j = bisect_left(cpaths, path)
        i = old.starts[k] + j + _shift(old, chunks, copied, k)
        was = centries[j] if j < len(cpaths) and cpaths[j] == path else None
        new = get(path)
        if was is not None:
            kind, was_size = entry_kind_size(was)
            if kind <= EXEC:
                files, size = files - 1, size - was_size
        if new is not None:
            kind, new_size = entry_kind_size(new)
            if kind <= EXEC:
                files, size = files + 1, size + new_size
        if not _same(path, was, new):
            same = False
            olo, ohi, nhi = i - delta, i - delta + (was is not None), i + (new is not None)
            if runs and runs[-1][1] == olo:  # (adjacent to the last run: one run)
                runs[-1] = (runs[-1][0], ohi, runs[-1][2], nhi)
            else:
                runs.append((olo, ohi, i, nhi))
            delta += (new is not None) - (was is not None)
        if was is not None and new is not None:
            centries[j] = new
        elif was is not None:
            del centries[j], cpaths[j]
        elif new is not None:
            centries.insert(j, new)
            cpaths.insert(j, path)
    packed = old.packed or isinstance(entries, EntryMap)
    return Ordered(_edited(old, chunks, copied, packed), files, size, same, (old, runs))


def _edited(old: Chunked, chunks: list[Chunk], copied: set[int], packed: bool) -> Chunked:
    """The order of ``chunks`` (``old``'s, those of ``copied`` edited).  Where no edited chunk
    changed its length or its first path (a file modified), the index lists (``firsts``,
    ``starts``: one item a chunk) are ``old``'s, shared: making them again touches every
    chunk's lists, ~1,000 at a million files, at each checkpoint."""
    for k in copied:
        chunks[k] = (tuple(chunks[k][0]), tuple(chunks[k][1]))
    tidied = _tidy(chunks, copied)
    if tidied is not chunks or len(chunks) != len(old.chunks):
        return Chunked(tidied, packed)
    firsts = old.firsts
    starts: list[int] | None = old.starts
    if any(len(chunks[k][0]) != old.starts[k + 1] - old.starts[k] for k in copied):
        starts = None
    moved = [k for k in copied if chunks[k][0][0] != firsts[k]]
    if moved:
        firsts = list(firsts)
        for k in moved:
            firsts[k] = chunks[k][0][0]
    return Chunked(chunks, packed, firsts, starts)


def _same(path: bytes, a: Value | None, b: Value | None) -> bool:
    """Whether two values are the same entry (a packed one and an entry compared unpacked)."""
    if type(a) is type(b) or a is None or b is None:
        return a == b
    return unpack_entry(path, a) == unpack_entry(path, b)


def _shift(old: Chunked, chunks: list[Chunk], copied: set[int], k: int) -> int:
    """How many entries the edits so far added (minus removed) before chunk ``k``."""
    return sum(len(chunks[c][0]) - (old.starts[c + 1] - old.starts[c]) for c in copied if c < k)


def _tidy(chunks: list[Chunk], copied: set[int]) -> list[Chunk]:
    """The chunks with the edited ones that emptied dropped and those that doubled split."""
    if all(0 < len(chunks[k][0]) <= 2 * CHUNK for k in copied):
        return chunks
    out: list[Chunk] = []
    for k, (paths, ents) in enumerate(chunks):
        if k not in copied or 0 < len(paths) <= 2 * CHUNK:
            out.append((paths, ents))
            continue
        out.extend((paths[i : i + CHUNK], ents[i : i + CHUNK]) for i in range(0, len(paths), CHUNK))
    return out
