"""Snapshots in O(changed) when a watcher vouches for the rest of the tree.

A Store opened with ``watch=True`` (the resident service always is) keeps an inotify
:class:`~snapstore.tree.watcher.Watcher` in its context and, after each snapshot it commits, a
:class:`TreeState`: what the walk found, the stat cache and the entries.  The next snapshot then
re-examines only the paths the watcher names, instead of walking the tree and loading the whole
stat cache.  The state is used only when nothing else can have changed the store in between
(the newest log and oplog keys are still the ones this context wrote) and only for changes it
can patch exactly: content or metadata changes of files it already knows.  A directory whose
listing changed, a new subtree, a path that is not a known regular file, an overflow, a periodic
consistency check or any doubt means a full walk, whose result becomes the new state.  Events
narrow what is looked at; the stat cache (with its racy-file rule) still decides what is read.
"""

from __future__ import annotations

import os
import stat
from typing import Any, NamedTuple

from snapstore.ops.context import StageContext
from snapstore.records.manifest import EXEC, FILE, Entry
from snapstore.tree import scan, statcache, worktree

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


class Patched(NamedTuple):
    """The inputs of a snapshot, derived from the state instead of a walk."""

    found: list[scan.Found]
    cache: dict[bytes, bytes]
    entries: dict[bytes, Entry]
    to_read: list[scan.Found]
    #: Paths re-examined (for the report and the tests).
    examined: int


def watching(ctx: StageContext) -> bool:
    """Does a watcher run in this context (then each snapshot's state is kept for the next)?"""
    return ctx.memo.get(WATCHER) is not None


def prepare(ctx: StageContext, keys: Keys) -> Patched | None:
    """The snapshot's inputs from the watcher's hints, or None when a full walk is needed.

    Always drains the watcher first, so a full walk that follows covers every event so far.
    """
    watcher = ctx.memo.get(WATCHER)
    if watcher is None:
        return None
    changes = watcher.take()
    state = ctx.memo.get(KEY)
    if not isinstance(state, TreeState) or state.keys != keys:
        return None
    if changes.full and changes.reason == PERIODIC and not changes.dirs and not changes.subtrees:
        # The walk that follows checks the watcher: what it finds must be what the state says,
        # but for the paths the events name.
        ctx.memo[CHECK] = (state.found, changes.paths)
    if changes.full or changes.dirs or changes.subtrees:
        return None
    changed: list[scan.Found] = []
    for path in changes.paths:
        known = state.found.get(path)
        if known is None:
            continue  # an ignored or excluded file (a new one would have changed its directory)
        if known.kind not in (FILE, EXEC):
            return None
        try:
            st = os.lstat(os.path.join(ctx.root_bytes, path))
        except OSError:
            return None  # gone (the directory event may still be queued) or too deep: walk
        if not stat.S_ISREG(st.st_mode):
            return None
        f = scan.Found(path, EXEC if st.st_mode & 0o100 else FILE, scan.compact(st), b"")
        state.found[path] = f
        changed.append(f)
    entries = dict(state.entries)
    if changed:
        fresh, to_read = worktree.classify(changed, state.cache)
        entries.update(fresh)
    else:
        to_read = []
    return Patched(list(state.found.values()), state.cache, entries, to_read, len(changed))


def inputs(
    ctx: StageContext, keys: Keys, report: scan.ScanReport
) -> tuple[list[scan.Found], dict[bytes, bytes], dict[bytes, Entry], list[scan.Found], list[bytes], Any]:
    """What a snapshot starts from: ``(found, cache, entries, to_read, stale cache keys, the
    found records to remember)``, from the watcher's hints when they suffice, else by a walk.

    Without a watcher the walk is paired with the stat cache in one merge pass over a cursor
    (:func:`worktree.classify_sorted`): the cache is never held as a dict (``cache`` is empty).
    """
    patched = prepare(ctx, keys)
    if patched is not None:
        state = ctx.memo[KEY].found
        return patched.found, patched.cache, patched.entries, patched.to_read, [], state
    found = scan.walk(ctx.root_bytes, ctx.excluded, report)
    check = ctx.memo.pop(CHECK, None)
    if check is not None:
        _compare(ctx, found, *check)
    with ctx.backend.read() as view:
        if watching(ctx):  # the watcher's state keeps the cache as a dict
            cache = dict(view.items("statcache"))
            entries, to_read = worktree.classify(found, cache)
            return found, cache, entries, to_read, stale_cache_keys(cache, found), found
        entries, to_read, stale = worktree.classify_sorted(found, view.items("statcache"))
    return found, {}, entries, to_read, stale, found


#: The watcher's reason for a full walk that checks it (tree.watcher.Watcher.take).
PERIODIC = "periodic consistency check"


def divergences(
    found: list[scan.Found], expected: dict[bytes, scan.Found], named: set[bytes]
) -> list[bytes]:
    """Paths where a walk and the watcher-kept state disagree, but for those events named."""
    seen = {f.path: f for f in found}
    out = []
    for path in seen.keys() | expected.keys():
        if path in named:
            continue
        a, b = seen.get(path), expected.get(path)
        if a is None or b is None or a.kind != b.kind or a.st != b.st:
            out.append(path)
    return sorted(out)


def _compare(
    ctx: StageContext, found: list[scan.Found], expected: dict[bytes, scan.Found], named: set[bytes]
) -> None:
    missed = divergences(found, expected, named)
    watcher = ctx.memo.get(WATCHER)
    if missed and watcher is not None:
        watcher.divergences += len(missed)
        shown = ", ".join(p.decode("utf-8", "replace") for p in missed[:5])
        watcher.last_divergence = f"{len(missed)} path(s) changed without an event: {shown}"
        import logging  # only when there is something to log: not on every snapshot's import

        logging.getLogger("snapstore.watcher").warning("consistency check: %s", watcher.last_divergence)


def remember(
    ctx: StageContext,
    found: list[scan.Found],
    cache: dict[bytes, bytes],
    updates: dict[bytes, bytes],
    stale: list[bytes],
    entries: dict[bytes, Entry],
    keys: Keys,
) -> None:
    """Keep what this snapshot committed for the next one (only when a watcher runs)."""
    if ctx.memo.get(WATCHER) is None:
        return
    for key in stale:
        cache.pop(key, None)
    cache.update(updates)
    by_path = found if isinstance(found, dict) else {f.path: f for f in found}
    ctx.memo[KEY] = TreeState(by_path, cache, entries, keys)


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
