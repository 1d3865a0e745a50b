"""Where a snapshot starts: the store as it is (the newest log and oplog keys, the parent) and
the tree as it is (a walk paired with the stat cache, or a watching context's patched state).

What the stat cache vouches for becomes an entry at once; the rest is ``to_read`` (:mod:`.read`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from snapstore.errors import CorruptError
from snapstore.ops.context import Keys, StageContext
from snapstore.ops.snapshot import incremental
from snapstore.ops.snapshot.incremental import Walked
from snapstore.records.checkpoint import (
    PATHS_INDEX_META,
    TASK_INDEX_META,
    Checkpoint,
    load_all,
    next_seq,
    parse_record,
)
from snapstore.records.manifest import Entry
from snapstore.storage import packs
from snapstore.storage.backend import Backend, ReadView
from snapstore.tree import packed, scan, worktree


class Start:
    """The store as a snapshot finds it (the caller holds the writer lock: it stays so)."""

    # (A plain class, not a dataclass: importing dataclasses would slow every CLI process's start.)
    __slots__ = ("keys", "packed", "cached", "indexed", "paths_indexed", "parent", "parent_record", "seq")

    def __init__(self, backend: Backend) -> None:
        with backend.read() as view:
            last_item = next(iter(view.items("log", reverse=True)), None)
            last_op = next(iter(view.items("oplog", reverse=True)), None)
            #: The newest ``log`` and ``oplog`` keys (a watching context's state must match them).
            self.keys: Keys = (last_item[0] if last_item else None, last_op[0] if last_op else None)
            #: Format 2: new chunks go into packs.
            self.packed = packs.writes_packs(view.get)
            #: No stat cache yet (a first checkpoint): no file has a previous version to look up.
            self.cached = next(iter(view.items("statcache")), None) is not None
            self.indexed = view.get("meta", TASK_INDEX_META) is not None
            self.paths_indexed = view.get("meta", PATHS_INDEX_META) is not None
            newest = newest_readable(view, last_item[1]) if last_item else None
        self.parent: Checkpoint | None = newest[0] if newest else None
        self.parent_record = newest[1] if newest else b""
        #: The new checkpoint's sequence number.
        self.seq = next_seq(self.keys[0])


def newest_readable(view: ReadView, latest: bytes) -> tuple[Checkpoint, bytes] | None:
    """The newest checkpoint whose record reads back (the parent of a new one) and its packed
    record; a damaged latest record (verify reports it) must not stop every later snapshot.
    ``view``: the read view the snapshot's start reads the store in (one transaction)."""
    packed = view.get("checkpoints", latest)
    if packed is not None:
        try:
            return parse_record(latest, packed), packed
        except CorruptError:
            pass
    readable = load_all(view)
    if not readable:
        return None
    newest = readable[-1]
    packed = view.get("checkpoints", bytes.fromhex(newest.id))
    return (newest, packed) if packed is not None else None


class Inputs:
    """What a snapshot starts from."""

    # (Not a NamedTuple: creating the class would slow the snapshot's import.)
    __slots__ = ("found", "cache", "entries", "to_read", "stale", "walked", "touched", "base", "early")

    def __init__(
        self,
        found: list[scan.Found] | Mapping[bytes, scan.Found],
        cache: dict[bytes, bytes],
        entries: dict[bytes, Entry],
        to_read: list[scan.Found],
        stale: list[bytes],
        walked: Walked | None,
    ) -> None:
        #: The walk's records: kept only when asked for (a SAFETY checkpoint) or when watching.
        self.found = found
        #: Stat-cache values set since the last snapshot (a watching context's:
        #: TreeState.cache); empty after a walk.
        self.cache = cache
        #: Every path's entry, those to read still with their stat-cache guess.
        self.entries = entries
        #: The files the stat cache cannot vouch for.
        self.to_read = to_read
        #: Stat-cache keys of paths that are gone (deleted with the snapshot).
        self.stale = stale
        #: What to keep as the watcher's next state (None without a watcher).
        self.walked = walked
        #: After a patch: the paths whose entries may differ from ``base``, the entries it
        #: started from (ops.snapshot.ordered); None after a walk.
        self.touched: set[bytes] | None = None
        self.base: dict[bytes, Entry] | None = None
        #: After a patch whose mapping scan still runs: the files it re-read for a mapping
        #: (incremental.settle takes the scan and patches in what else it finds).
        self.early: frozenset[bytes] | None = None


def inputs(ctx: StageContext, keys: Keys, report: scan.ScanReport, keep_found: bool) -> Inputs:
    """The snapshot's inputs from the watcher's hints when they suffice, else by a walk.

    Without a watcher the walk is paired with the stat cache in one merge pass over a cursor
    (:func:`worktree.classify_sorted`): the cache is never held as a dict, and the walk's
    records are dropped unless ``keep_found`` (then the reads free those of the files they read
    batch by batch, ~250 bytes a file, instead of at the end).
    """
    patched = incremental.prepare(ctx, keys, report)
    watcher = ctx.watcher
    if watcher is None:
        hint, ctx.found_hint = ctx.found_hint, None
        if hint is not None and hint[0] == keys[1]:  # right after that restore: no walk needed
            after = _after_restore(ctx, hint[2], hint[3], hint[1] if keep_found else [])
            if after is not None:
                return after
            found = hint[1]
        else:
            found = scan.walk(ctx.root_bytes, ctx.excluded, report)
        with ctx.backend.read() as view:
            entries, to_read, stale = worktree.classify_sorted(found, _released(ctx.backend, view.items("statcache")))
        return Inputs(found if keep_found else [], {}, entries, to_read, stale, None)
    state = ctx.tree_state
    if patched is not None and state is not None:  # (serve --status shows how often each way)
        watcher.patched += 1
        walked = Walked(state.found, state.listings, patched.links)
        out = Inputs([], patched.cache, patched.entries, patched.to_read, patched.stale, walked)
        out.touched, out.base, out.early = patched.touched, patched.base, patched.early
        if keep_found:  # (the caller uses the records: the scan is taken before they are handed over)
            settle(ctx, out)
            # (the state's own map, its scan's finds patched in, not a list of every record
            # made again: a restore reads it before anything patches the state again)
            out.found = patched.found
        return out
    watcher.walks += 1
    listings: scan.Listings = {}
    # Unless the caller keeps the walk's records, the walk packs each into the state as it
    # finds it (tree.packed.PackedWalk): the records as objects (~250 bytes a file) are never
    # all held, beside the entries or otherwise (the service's peak is its first checkpoint).
    into = None if keep_found else packed.PackedWalk()
    found = scan.walk(ctx.root_bytes, ctx.excluded, report, listings, into)
    if into is not None:
        kept, records = into.found, into.records()
        incremental.check_walk(ctx, kept)
    else:
        kept, records = packed.FoundMap(found), iter(found)
        incremental.check_walk(ctx, found)
    with ctx.backend.read() as view:  # (the watcher's state does not hold the stat cache)
        entries, to_read, stale = worktree.classify_sorted(
            records, _released(ctx.backend, view.items("statcache")), _kept_entries(len(kept))
        )
    del into, records  # (the sorted paths: 8 bytes a file)
    incremental.reread_mapped(watcher, kept, entries, to_read)  # (it takes any scan begun)
    watcher.forget_inodes()
    return Inputs(found, {}, entries, to_read, stale, Walked(kept, listings, report.links))


def settle(ctx: StageContext, tree: Inputs) -> list[scan.Found]:
    """After a patch whose mapping scan still runs (``tree.early``): take the scan
    (:func:`incremental.settle`) and add what it patched in to ``tree``; the files to read
    besides ``tree.to_read`` (added to it too)."""
    early, tree.early = tree.early, None
    if early is None or tree.walked is None or tree.touched is None:
        return []
    patched = incremental.settle(ctx, early, set(tree.walked.links))
    if patched is None:
        return []
    tree.touched |= patched.touched
    tree.stale.extend(patched.stale)
    tree.walked = tree.walked._replace(links=patched.links)
    tree.to_read.extend(patched.to_read)
    return patched.to_read


def _after_restore(
    ctx: StageContext, touched: dict[bytes, scan.Found | None], safety_manifest: bytes, found: list[scan.Found]
) -> Inputs | None:
    """The inputs of the record of the tree a restore just left, in O(changed): the safety
    checkpoint's entries (the manifest memo's, still that checkpoint's) with the ``touched``
    paths' records (ops.restore.after) classified against their stat-cache values alone.

    The other paths' records are the safety walk's, so their entries are the ones it recorded:
    a file it had to read (racy, or changed) is not read again, and the stat cache is not
    passed over.  None when the memo is not that checkpoint's (then the caller classifies).
    """
    memo = ctx.manifest_memo
    base = memo.entries
    if base is None or memo.mid != safety_manifest:
        return None
    from snapstore.tree import statcache

    keys = {statcache.key(p): p for p in touched}
    with ctx.backend.read() as view:
        cache = {k: v for k in keys if (v := view.get("statcache", k)) is not None}
    entries = base.copy()  # (a copy of the same kind: tree.packed.EntryMap stays packed)
    records: list[scan.Found] = []
    stale: list[bytes] = []
    for key, path in keys.items():
        entries.pop(path, None)
        record = touched[path]
        if record is not None:
            records.append(record)
        elif key in cache:
            stale.append(key)
    fresh, to_read = worktree.classify(records, cache)
    entries.update(fresh)
    out = Inputs(found, {}, entries, to_read, stale, None)
    out.touched, out.base = set(touched), base
    return out



#: From this many paths on, a watching Store keeps its entries packed (tree.packed.EntryMap):
#: ~120 bytes a file less, for ~1 microsecond an entry a checkpoint's manifest re-cut makes
#: again (a few hundred per checkpoint); below it, the memory saved is not worth that time.
PACK_ENTRIES_FROM = 20_000


def _kept_entries(paths: int) -> dict[bytes, Entry]:
    """The dict a watching Store's walk puts its entries in (see :data:`PACK_ENTRIES_FROM`)."""
    return packed.EntryMap() if paths >= PACK_ENTRIES_FROM else {}


#: Stat-cache items read between two releases of the store's mapped pages (:func:`_released`).
RELEASE_EVERY = 1 << 15


def _released(backend: Backend, items: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
    """``items`` (a cursor over the stat cache), the store's mapped pages dropped from the
    process every :data:`RELEASE_EVERY` items: a pass over the whole table would otherwise keep
    each page it read resident, counted in the process's memory (~100 bytes a file) at the
    moment its entries peak."""
    for i, item in enumerate(items, 1):
        if not i % RELEASE_EVERY:
            backend.release_memory()
        yield item
