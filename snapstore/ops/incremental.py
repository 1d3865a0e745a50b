"""Snapshots in O(changed) when a watcher vouches for the rest of the tree.

A Store opened with ``watch=True`` (the resident service always is) keeps an inotify
:class:`~snapstore.tree.watcher.Watcher` in its context and, after each snapshot it commits, a
:class:`TreeState`: what the walk found, each directory's listing, the stat cache and the
entries.  The next snapshot then patches that state with what the watcher names
(:mod:`snapstore.tree.rescan`: changed files are lstat-ed again, directories whose listing
changed are listed again, new subtrees walked) instead of walking the tree and loading the
whole stat cache.  The state is used only when nothing else can have changed the store in
between (the newest log and oplog keys are still the ones this context wrote).  An overflow, a
failed watch, a changed ignore file, a periodic consistency check or any doubt means a full
walk, whose result becomes the new state.  Events narrow what is looked at; the stat cache
(with its racy-file rule) still decides what is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from snapstore.ops.context import StageContext
from snapstore.records.manifest import Entry
from snapstore.tree import rescan, scan, statcache, worktree

KEY = "snapshot.incremental"
WATCHER = "watcher"
CHECK = "snapshot.incremental.check"

Keys = tuple[bytes | None, bytes | None]


class TreeState(NamedTuple):
    """What a watching context knows of the tree since its last committed snapshot."""

    found: dict[bytes, scan.Found]
    cache: dict[bytes, bytes]
    entries: dict[bytes, Entry]
    #: The newest ``log`` and ``oplog`` keys right after that snapshot.
    keys: Keys
    #: Each walked directory's listing (what :mod:`snapstore.tree.rescan` patches).
    listings: scan.Listings


class Walked(NamedTuple):
    """What a snapshot's inputs came from, to keep as the next state (:func:`remember`)."""

    found: dict[bytes, scan.Found] | list[scan.Found]
    listings: scan.Listings | None


class Patched(NamedTuple):
    """The inputs of a snapshot, derived from the state instead of a walk."""

    found: list[scan.Found]
    cache: dict[bytes, bytes]
    entries: dict[bytes, Entry]
    to_read: list[scan.Found]
    #: Stat-cache keys of the paths that are gone (deleted with the snapshot).
    stale: list[bytes]
    #: Paths re-examined (for the report and the tests).
    examined: int
    #: Every path whose entry may differ from the state's (removed, found anew or again).
    touched: set[bytes]


def watching(ctx: StageContext) -> bool:
    """Does a watcher run in this context (then each snapshot's state is kept for the next)?"""
    return ctx.memo.get(WATCHER) is not None


def prepare(ctx: StageContext, keys: Keys, report: scan.ScanReport | None = None) -> Patched | None:
    """The snapshot's inputs from the watcher's hints, or None when a full walk is needed.

    Always drains the watcher first, so a full walk that follows covers every event so far.
    The state is patched in place (a snapshot that fails drops it: :func:`forget`).
    """
    watcher = ctx.memo.get(WATCHER)
    if watcher is None:
        return None
    changes = watcher.take()
    state = ctx.memo.get(KEY)
    if not isinstance(state, TreeState) or state.keys != keys:
        return None
    check = changes.full and changes.reason == PERIODIC
    if changes.full and not check:
        return None
    patched = _patch(ctx, state, state.found, state.listings, changes, scan.ScanReport(), watcher)
    if patched is not None and not check and not _report(report or scan.ScanReport(), state.listings):
        return None
    if check:
        # The walk that follows checks the watcher (and this patching): what it finds must be
        # what the patched state says.
        if patched is not None:
            ctx.memo[CHECK] = state.found
        return None
    return patched


def _report(report: scan.ScanReport, listings: scan.Listings) -> bool:
    """Fill ``report`` as a walk of the tree the listings describe would (the same warnings,
    in the walk's order, and counts); False when a listing cannot say (then walk)."""
    stack = [b""]
    while stack:
        listing = listings.get(stack.pop())
        if listing is None:
            continue  # (a subdirectory that vanished during the walk: it reported that)
        if listing.notes is None:
            return False
        if listing.notes:
            report.warnings.extend(listing.notes)
        report.special += listing.special
        report.unreadable += listing.unreadable
        stack.extend(listing.subdirs)  # popped last first, as the walk's stack does
    return True


def _patch(
    ctx: StageContext,
    state: TreeState,
    found: dict[bytes, scan.Found],
    listings: scan.Listings,
    changes: Any,
    report: scan.ScanReport,
    watcher: Any,
) -> Patched | None:
    """Apply ``changes`` to ``found`` and ``listings`` and derive the entries (a new dict)."""
    patch = rescan.apply(ctx.root_bytes, ctx.excluded, found, listings, changes, report, watcher.watch_tree)
    if patch is None:
        return None
    entries = dict(state.entries)  # (the old dict is also the manifest memo's: keep it intact)
    stale: list[bytes] = []
    cache = state.cache
    for path in patch.removed:
        if path not in found:
            entries.pop(path, None)
            key = statcache.key(path)
            if key in cache:
                stale.append(key)
    changed = list({f.path: f for f in patch.updated if found.get(f.path) is f}.values())
    if changed:
        fresh, to_read = worktree.classify(changed, cache)
        entries.update(fresh)
    else:
        to_read = []
    touched = set(patch.removed)
    touched.update(f.path for f in changed)
    return Patched(list(found.values()), cache, entries, to_read, stale, len(changed), touched)


def inputs(
    ctx: StageContext, keys: Keys, report: scan.ScanReport
) -> tuple[list[scan.Found], dict[bytes, bytes], dict[bytes, Entry], list[scan.Found], list[bytes], Any]:
    """What a snapshot starts from: ``(found, cache, entries, to_read, stale cache keys, the
    found records to remember)``, from the watcher's hints when they suffice, else by a walk.

    Without a watcher the walk is paired with the stat cache in one merge pass over a cursor
    (:func:`worktree.classify_sorted`): the cache is never held as a dict (``cache`` is empty).
    """
    patched = prepare(ctx, keys, report)
    watcher = ctx.memo.get(WATCHER)
    if watcher is not None:  # (serve --status shows how often each way was taken)
        if patched is None:
            watcher.walks += 1
        else:
            watcher.patched += 1
    if patched is not None:
        state = ctx.memo[KEY]
        walked = Walked(state.found, state.listings)
        return patched.found, patched.cache, patched.entries, patched.to_read, patched.stale, walked
    if not watching(ctx):
        found = scan.walk(ctx.root_bytes, ctx.excluded, report)
        with ctx.backend.read() as view:
            entries, to_read, stale = worktree.classify_sorted(found, view.items("statcache"))
        return found, {}, entries, to_read, stale, Walked(found, None)
    listings: scan.Listings = {}
    found = scan.walk(ctx.root_bytes, ctx.excluded, report, listings)
    check = ctx.memo.pop(CHECK, None)
    if check is not None:
        _compare(ctx, found, check)
    with ctx.backend.read() as view:  # the watcher's state keeps the cache as a dict
        cache = dict(view.items("statcache"))
    entries, to_read = worktree.classify(found, cache)
    return found, cache, entries, to_read, stale_cache_keys(cache, found), Walked(found, listings)


def current_state(ctx: StageContext) -> tuple[dict[bytes, Entry], dict[bytes, scan.Found]] | None:
    """:func:`snapstore.tree.worktree.current_state` from the watcher's state, without a walk
    (None when it cannot vouch: then the caller walks).

    Nothing is committed and nothing is consumed: the state is patched on copies and the
    watcher's pending changes stay pending, for the next snapshot.
    """
    looked = _look(ctx)
    return None if looked is None else (looked[0], looked[1])


def worktree_difference(
    ctx: StageContext,
    manifest_id: bytes,
    against: Callable[[dict[bytes, Entry]], tuple[dict[bytes, Entry], dict[bytes, Entry]]],
) -> tuple[dict[bytes, Entry], dict[bytes, Entry]] | None:
    """``(old, new)`` entries to compare manifest ``manifest_id`` with the working tree, from
    the watcher's state (None when it cannot vouch: then the caller walks).

    When that manifest is the one this context last wrote and its entries are the state's, only
    the paths the pending changes touched can differ: both sides hold just those (comparing
    them gives every change), so neither the manifest is decoded nor the whole tree compared.
    Otherwise ``against(the tree's entries)`` compares them with the manifest.
    """
    looked = _look(ctx)
    if looked is None:
        return None
    entries, _, touched, base = looked
    memo = ctx.memo.get(MANIFEST_MEMO)
    if memo is None or getattr(memo, "mid", None) != manifest_id or getattr(memo, "entries", None) is not base:
        return against(entries)
    old = {p: base[p] for p in touched if p in base}
    new = {p: entries[p] for p in touched if p in entries}
    return old, new


#: ops.snapshot's manifest memo (the entries of the last manifest this context wrote).
MANIFEST_MEMO = "snapshot.manifest"


def _look(
    ctx: StageContext,
) -> tuple[dict[bytes, Entry], dict[bytes, scan.Found], set[bytes], dict[bytes, Entry]] | None:
    """The tree's entries and found records now, the paths that may differ from the state's
    entries, and those entries; None when the state cannot vouch."""
    watcher = ctx.memo.get(WATCHER)
    state = ctx.memo.get(KEY)
    if watcher is None or not isinstance(state, TreeState):
        return None
    with ctx.backend.read() as view:
        last_item = next(iter(view.items("log", reverse=True)), None)
        last_op = next(iter(view.items("oplog", reverse=True)), None)
    if state.keys != (last_item[0] if last_item else None, last_op[0] if last_op else None):
        return None
    changes = watcher.peek()
    if changes.full:
        return None
    found = dict(state.found)
    report = scan.ScanReport()
    patched = _patch(ctx, state, found, dict(state.listings), changes, report, _NoWatch())
    if patched is None:
        return None
    entries = patched.entries
    worktree.hash_misses(ctx.root_bytes, patched.to_read, entries, report)
    watcher.looks += 1
    return entries, found, patched.touched, state.entries


class _NoWatch:
    """A watcher stand-in whose ``watch_tree`` does nothing: a read-only look must not change
    what is watched (the next snapshot's patch adds the watch)."""

    def watch_tree(self, rel: bytes) -> None:
        return None


#: The watcher's reason for a full walk that checks it (tree.watcher.Watcher.take).
PERIODIC = "periodic consistency check"


def divergences(found: list[scan.Found], expected: dict[bytes, scan.Found]) -> list[bytes]:
    """Paths where a walk and the watcher-kept state disagree."""
    seen = {f.path: f for f in found}
    out = []
    for path in seen.keys() | expected.keys():
        a, b = seen.get(path), expected.get(path)
        if a is None or b is None or a.kind != b.kind or a.st != b.st or a.target != b.target:
            out.append(path)
    return sorted(out)


def _compare(ctx: StageContext, found: list[scan.Found], expected: dict[bytes, scan.Found]) -> None:
    missed = divergences(found, expected)
    watcher = ctx.memo.get(WATCHER)
    if missed and watcher is not None:
        watcher.divergences += len(missed)
        shown = ", ".join(p.decode("utf-8", "replace") for p in missed[:5])
        watcher.last_divergence = f"{len(missed)} path(s) changed without an event: {shown}"
        import logging  # only when there is something to log: not on every snapshot's import

        logging.getLogger("snapstore.watcher").warning("consistency check: %s", watcher.last_divergence)


def remember(
    ctx: StageContext,
    walked: Walked,
    cache: dict[bytes, bytes],
    updates: dict[bytes, bytes],
    stale: list[bytes],
    entries: dict[bytes, Entry],
    keys: Keys,
) -> None:
    """Keep what this snapshot committed for the next one (only when a watcher runs)."""
    if ctx.memo.get(WATCHER) is None or walked.listings is None:
        return
    for key in stale:
        cache.pop(key, None)
    cache.update(updates)
    found = walked.found
    by_path = found if isinstance(found, dict) else {f.path: f for f in found}
    ctx.memo[KEY] = TreeState(by_path, cache, entries, keys, walked.listings)


def forget(ctx: StageContext) -> None:
    """Drop the state (after anything this context cannot account for)."""
    ctx.memo.pop(KEY, None)


def stale_cache_keys(cache: dict[bytes, bytes], found: list[scan.Found]) -> list[bytes]:
    """The keys of ``cache`` that no path of ``found`` has (deleted with the snapshot)."""
    if not cache:
        return []
    present = {f.path for f in found}
    stale = [k for k in cache if k not in present]
    if stale and any(k[:1] == b"\x00" for k in stale):  # hashed keys of long paths (rare)
        key = statcache.key
        hashed = {key(p) for p in present if len(p) > statcache.MAX_KEY}
        stale = [k for k in stale if k not in hashed]
    return stale
