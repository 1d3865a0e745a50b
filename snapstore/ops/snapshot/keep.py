"""A touched file keeps its parent's entry: a manifest records content changes, not touches.

A file rewritten with its own bytes (a ``touch``, a formatter that changed nothing, a checkout
laying out the same content, a benchmark rewriting its files) has a new stat, so the snapshot
reads it; when its kind, mode, size and stream id are those of the parent checkpoint's entry,
that entry is recorded, mtime included.  The tree is then the parent's: an agent's
``skip_unchanged`` checkpoint records nothing, a restore's safety checkpoint is the latest one.
The stat cache learns the new stat with the kept mtime beside it (tree.statcache.encode), so
the next snapshot reads nothing and makes the same entry from the cache, whichever way it finds
the tree (a watcher's patch or a walk).

Which files are compared (:meth:`Keeper.note`): each one read whose content the stat cache shows
unchanged since its last read (the same stream id) while the mtime that read's entry recorded
differs, and each one the cache has no value for.  One whose stream id differs changed since its
last read, and that read's entry is the parent's: nothing to compare, no cost on an edit.

The parent's entries (:meth:`Keeper.apply`): the manifest memo's order when it is the parent's
(a watching Store, or the record a restore makes after its safety checkpoint; a bisection in
memory), else the stored manifest's leaves that hold those paths
(:func:`snapstore.records.manifest.find_many`), never the whole manifest.
"""

from __future__ import annotations

from collections.abc import Callable

from snapstore.errors import CorruptError
from snapstore.ops.context import StageContext
from snapstore.records.manifest import Entry
from snapstore.tree import scan, statcache

#: What reading a file gave: (stream id, the stat it was read under, when) (ops.snapshot.read).
Read = tuple[bytes, scan.Stat, int]


class Keeper:
    """The files a snapshot read that may keep their parent's entry, and the keeping."""

    __slots__ = ("previous", "candidates")

    def __init__(self, previous: Callable[[bytes], bytes | None] | None) -> None:
        #: path -> its stat-cache value before this snapshot (None: none), read before the
        #: snapshot stores the new one; None when the store has no stat cache at all.
        self.previous = previous
        #: ``(path, read)`` of each file to compare with the parent's entry.
        self.candidates: list[tuple[bytes, Read]] = []

    def note(self, path: bytes, read: Read) -> None:
        """A file was read (before its new stat-cache value is stored)."""
        value = self.previous(path) if self.previous is not None else None
        if value is not None:
            known = statcache.known(value)
            if known is not None and (known[0] != read[0] or known[1] == read[1].st_mtime_ns):
                return  # changed since its last read, or recorded as that read did
        self.candidates.append((path, read))

    def apply(
        self, ctx: StageContext, parent: bytes, entries: dict[bytes, Entry], cache_updates: dict[bytes, bytes]
    ) -> int:
        """Record the parent's entry (manifest ``parent``) for each candidate whose kind, mode,
        size and stream id it has, and, in ``cache_updates`` (stored with the checkpoint, after
        any value the writer thread stored), the file's stat-cache value with the mtime kept.
        Returns how many entries were kept."""
        candidates, self.candidates = self.candidates, []
        if not candidates:
            return 0
        theirs = _parent_entries(ctx, parent, sorted(path for path, _ in candidates))
        kept = 0
        for path, (sid, st, recorded) in candidates:
            was, now = theirs.get(path), entries.get(path)
            if was is None or now is None or was == now:
                continue
            if (was.kind, was.mode, was.size, was.ref) == (now.kind, now.mode, now.size, now.ref):
                entries[path] = was
                cache_updates[statcache.key(path)] = statcache.encode(st, sid, recorded, was.mtime_ns)
                kept += 1
        return kept


def _parent_entries(ctx: StageContext, parent: bytes, paths: list[bytes]) -> dict[bytes, Entry]:
    """The entries of sorted ``paths`` in manifest ``parent`` (none when it cannot be read:
    the snapshot then records what it read, and its counts report the damage)."""
    memo = ctx.manifest_memo
    if memo.mid == parent and memo.ordered is not None:
        order = memo.ordered.entries
        return {path: e for path in paths if (e := order.find(path)) is not None}
    from snapstore.records import manifest

    try:
        with ctx.backend.read() as view:
            return manifest.find_many(view.get, parent, paths)
    except CorruptError:
        return {}
