"""Snapshots in O(changed) when a watcher vouches for the rest of the tree.

A Store opened with ``watch=True`` (the resident service always is) keeps an inotify
:class:`~snapstore.tree.watcher.Watcher` in its context (``ctx.watcher``) and, after each
snapshot it commits, a :class:`~snapstore.ops.context.TreeState` (``ctx.tree_state``): what the
walk found, each directory's listing, the stat cache and the entries.  The next snapshot then
patches that state with what the watcher names (:mod:`snapstore.tree.rescan`: changed files are
lstat-ed again, so are the entries that came or went, a directory is listed again only when
that cannot say what a walk would, new subtrees are walked) instead
of walking the tree and loading the whole stat cache.  The state is used only when nothing else
can have changed the store in between (the newest log and oplog keys are still the ones this
context wrote).  An overflow, a changed ignore file, a periodic consistency check or any doubt
means a full walk (:mod:`.walk`), whose result becomes the new state.  Events narrow what is
looked at; the stat cache (with its racy-file rule) still decides what is read.

What makes no event is looked at every time (:func:`blind_spots`): directories the watcher
could not watch are walked, files with more than one hard link (``TreeState.links``: a write
through another link names only that one) and files mapped shared and writable are re-stat'ed.
A file that gains a link it did not have means a full walk: its other links in the tree are
not known, and a write through it named none of them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import TYPE_CHECKING, NamedTuple

from snapstore.ops.context import Keys, StageContext, TreeState
from snapstore.records.manifest import EXEC, Entry
from snapstore.tree import rescan, scan, statcache, worktree
from snapstore.tree.packed import FoundMap, records_of

if TYPE_CHECKING:
    from snapstore.tree.watcher import Changes, Watcher


class Walked(NamedTuple):
    """What a snapshot's inputs came from, to keep as the next state (:func:`remember`)."""

    found: MutableMapping[bytes, scan.Found] | list[scan.Found]
    listings: scan.Listings
    #: The files with more than one hard link.
    links: set[bytes] | list[bytes]


class Patched(NamedTuple):
    """The inputs of a snapshot, derived from the state instead of a walk."""

    #: The state's records, patched (the state's own map, or an overlay of it for a look).
    found: MutableMapping[bytes, scan.Found]
    #: Stat-cache values set since the last snapshot (TreeState.cache).
    cache: dict[bytes, bytes]
    entries: dict[bytes, Entry]
    to_read: list[scan.Found]
    #: Stat-cache keys of the paths that are gone (deleted with the snapshot).
    stale: list[bytes]
    #: Every path whose entry may differ from the state's (removed, found anew or again).
    touched: set[bytes]
    #: The files with more than one hard link now (the state's next ``links``).
    links: set[bytes]
    #: The entries ``touched`` is relative to: the state's, or the dict a restore's patch copied
    #: them from (TreeState.carried); the manifest memo's when they agree.
    base: dict[bytes, Entry]
    #: Directories listed again and subtrees walked (none: the listings' reports are as they were).
    listed: int
    #: The files re-read for a mapping while this checkpoint's mapping scan still runs (the
    #: last one's finds): :func:`settle` takes the scan (None: taken already, or none begun).
    early: frozenset[bytes] | None = None


#: The watcher's reason for a full walk that checks it (tree.watcher.Watcher.take).
PERIODIC = "periodic consistency check"


def prepare(ctx: StageContext, keys: Keys, report: scan.ScanReport | None = None) -> Patched | None:
    """The snapshot's inputs from the watcher's hints, or None when a full walk is needed.

    Always drains the watcher first, so a full walk that follows covers every event so far.
    The state is patched in place, its entries too (the manifest memo's dict: a snapshot
    that fails, or that walks after all, drops both: :func:`forget`).
    """
    watcher = ctx.watcher
    if watcher is None:
        return None
    state = ctx.tree_state
    scanned = None
    if state is not None and state.keys == keys and state.carried is None and not watcher.scan_begun():
        # The scan before the events: a process that maps and writes a file, then goes away
        # after the events are read, has its close event after that read and its mapping
        # gone from a scan made after it (a library checkpoint's inline scan, blind_spots).
        scanned = scanned_now(watcher, state.found)
    changes = watcher.take()
    if state is None or state.keys != keys:
        return None
    check = changes.full and changes.reason == PERIODIC
    if changes.full and not check:
        return None
    late = not check and watcher.scan_begun()  # (the service began it while its client confirmed)
    mapped = blind_spots(watcher, state, changes, late=late, scanned=scanned)
    patched = patch(
        ctx, state, state.found, state.listings, changes, scan.ScanReport(), watcher.watch_tree, mapped,
        in_place=not check,
    )  # fmt: skip
    if patched is not None and not check and not _report(report or scan.ScanReport(), state.listings, watcher, patched.listed):
        forget(ctx)  # (its entries were patched in place: the walk's become the state)
        return None
    if check:
        # The walk that follows checks the watcher (and this patching): what it finds must be
        # what the patched state says.
        if patched is not None:
            ctx.walk_check = state.found
        return None
    if patched is not None and late:
        return patched._replace(early=frozenset(mapped))
    return patched


class Rewalk(Exception):
    """A file the checkpoint's mapping scan found cannot be patched in (gone, or no longer a
    file, with no event yet): the snapshot is taken again, by a full walk."""


def settle(ctx: StageContext, early: frozenset[bytes], links: set[bytes]) -> Patched | None:
    """Take the checkpoint's mapping scan (begun by the service before the checkpoint,
    :meth:`Watcher.begin_scan`, and run beside the patch and the reads) and patch in the files it finds mapped besides ``early`` (those the patch
    re-read: mapped at the last checkpoint's scan), re-stat'ed, to be read whatever the stat
    cache says, as :func:`blind_spots` makes a scan made inline do; None when there are none.
    ``links``: the files with more than one link after the patch.  The state's own maps are
    patched in place; :class:`Rewalk` when the patch cannot say."""
    watcher, state = ctx.watcher, ctx.tree_state
    if watcher is None or state is None:
        return None
    mapped = scanned_now(watcher, state.found)
    watcher.last_mapped = mapped
    extras = mapped - early
    if not extras:
        return None
    watcher.mapped_restatted += len(extras)
    from snapstore.tree.watcher import Changes

    report = scan.ScanReport()
    patched = patch(
        ctx, state, state.found, state.listings, Changes(full=False, paths=set(extras)), report, watcher.watch_tree,
        extras, in_place=True, links=links,
    )  # fmt: skip
    if patched is None or patched.listed or report.warnings:
        raise Rewalk
    return patched


#: A file mapped shared and writable up to this size is read again at every snapshot while it
#: is mapped; a larger one only re-stat'ed.
MAPPED_REREAD_MAX = 16 << 20


def blind_spots(
    watcher: Watcher, state: TreeState, changes: Changes, look: bool = False, late: bool = False,
    scanned: set[bytes] | None = None,
) -> set[bytes]:
    """Add to ``changes`` the files no event may name: every file with more than one hard link
    (re-stat'ed: a write through another link changes their mtime) and every file mapped
    shared and writable now or at the last snapshot (the mapping may have been written and
    gone since, and its ``IN_CLOSE_WRITE`` names the name it was made by), which it returns:
    those are read again (:func:`patch`), since a write to a page already dirty (or any
    write after the first on tmpfs) keeps the mtime.  (The directories the watcher cannot see
    are already in ``changes.blind``.)  ``look``: a read-only look, which remembers nothing.

    Right after a restore patched the state exactly (``TreeState.carried``, ops.restore.watching)
    with no event since and no file of more than one link, the record after the restore takes
    the scan its safety checkpoint made a moment before, under the same writer lock: it reads
    again what that scan found (kept in ``last_mapped``, so the next checkpoint reads it again
    too).  A file mapped since, and written through the mapping, is not one this record reads
    (no event names it): the next checkpoint's scan finds it if it is still mapped, and its
    ``IN_CLOSE_WRITE`` names it if not.

    ``late``: the scan runs in the watcher's thread (begun by the service while its client
    confirms the request, :meth:`Watcher.begin_scan`) while the checkpoint patches and reads;
    only the files mapped at the last scan are added now, and :func:`settle` adds those the
    scan finds besides.  Otherwise the scan is made in the calling thread (``scanned``: made
    already, before the events were read, by :func:`prepare`; else here): a library checkpoint
    has no idle moment to hide it in, and a scan thread beside its patch and reads competed
    with them for the interpreter (docs/benchmarks-design.md, Watching)."""
    if not look and state.carried is not None and not state.links and _quiet(changes):
        mapped = set(watcher.last_mapped)
        watcher.mapped_restatted += len(mapped)
        changes.paths |= mapped
        return mapped
    if late:
        mapped = set(watcher.last_mapped)
    elif not look:
        now = scanned_now(watcher, state.found) if scanned is None else scanned
        mapped, watcher.last_mapped = now | watcher.last_mapped, now
    else:
        mapped = (scanned_now(watcher, state.found) if scanned is None else scanned) | watcher.last_mapped
    watcher.links_restatted += len(state.links)
    watcher.mapped_restatted += len(mapped)
    changes.paths |= state.links
    changes.paths |= mapped
    return mapped


def scanned_now(watcher: Watcher, found: Mapping[bytes, scan.Found]) -> set[bytes]:
    """The tree's files some process maps shared and writable now (the watcher's scan); made
    before the watcher's events are read, then given to :func:`blind_spots`."""
    named, inodes = watcher.mapped_for_write()
    mapped = {p for p in named if p in found}  # (not the store's own lock file)
    if inodes:
        mapped |= _by_inode(watcher.inode_memo, found, _in_tree(watcher, found, inodes))
    return mapped


def _quiet(changes: Changes) -> bool:
    """No event at all (the restore's own were consumed by its patch)."""
    return not (changes.full or changes.paths or changes.dirs or changes.subtrees or changes.blind)


def _in_tree(watcher: Watcher, found: Mapping[bytes, scan.Found], inodes: set[int]) -> set[int]:
    """Of ``inodes`` (mapped shared and writable by some process, anywhere on the tree's
    device), those a file of the tree may have: the others are answered "not in the tree" in
    the memo at once.  Another program's databases on the same device (an LMDB store, a
    browser's cache) are mapped this way; without this each new one scanned every record."""
    memo = watcher.inode_memo
    unknown = {ino for ino in inodes if ino not in memo}
    if not unknown:
        return inodes
    index = watcher.inode_index
    if index is None:
        from array import array

        index = watcher.inode_index = array("Q", sorted(_inodes(found)))
        watcher.inode_recent = set()
    for ino in unknown:
        i = bisect.bisect_left(index, ino)
        if not (i < len(index) and index[i] == ino) and ino not in watcher.inode_recent:
            memo[ino] = ()
    return inodes


def _inodes(found: Mapping[bytes, scan.Found]) -> Iterable[int]:
    """The inode number of every file of ``found``."""
    if isinstance(found, FoundMap):
        return found.inodes()
    return (f.st.st_ino for f in found.values() if f.kind <= EXEC and f.st is not None)


def _by_inode(memo: dict[int, tuple[bytes, ...]], found: Mapping[bytes, scan.Found], inodes: set[int]) -> set[bytes]:
    """The tree's files with one of these inode numbers: files mapped by another name (outside
    the tree, or a name since deleted) still write to them.

    ``memo`` keeps the answer per inode (the watcher's ``inode_memo``; () when not in the tree),
    so the tree is searched only for an inode not seen before; an answer stands while the
    paths still have that inode, and a patch drops the inodes of what it found anew
    (:func:`patch`), a full walk all of them.
    """
    out: set[bytes] = set()
    unknown: set[int] = set()
    for ino in inodes:
        paths = memo.get(ino)
        if paths is None or not all(_has_inode(found.get(p), ino) for p in paths):
            unknown.add(ino)
        else:
            out.update(paths)
    if unknown:
        hits: dict[int, list[bytes]] = {ino: [] for ino in unknown}
        for f in records_of(found):
            if f.kind <= EXEC and f.st is not None and f.st.st_ino in hits:
                hits[f.st.st_ino].append(f.path)
        if len(memo) > 4096:  # (inodes of short-lived mappings elsewhere on the device)
            memo.clear()
        for ino, hit in hits.items():
            memo[ino] = tuple(hit)
            out.update(hit)
    return out


def _has_inode(f: scan.Found | None, ino: int) -> bool:
    return f is not None and f.st is not None and f.st.st_ino == ino


def reread_mapped(watcher: Watcher, found: Mapping[bytes, scan.Found], entries: dict[bytes, Entry], to_read: list[scan.Found]) -> None:
    """After a full walk: the files mapped shared and writable now or at the last snapshot are
    read whatever the stat cache says (see :func:`blind_spots`); ``entries`` and ``to_read``
    are changed in place."""
    mapped, _ = watcher.mapped_for_write()
    mapped, watcher.last_mapped = mapped | watcher.last_mapped, mapped
    for path in mapped:
        if path in entries and entries[path].kind <= EXEC:
            f = found.get(path)
            if f is not None and f.st is not None and f.st.st_size <= MAPPED_REREAD_MAX:
                del entries[path]
                to_read.append(f)


def _report(report: scan.ScanReport, listings: scan.Listings, watcher: Watcher, listed: int) -> bool:
    """Fill ``report`` as a walk of the tree the listings describe would (the same warnings,
    in the walk's order, and counts); False when a listing cannot say (then walk).

    A pass over every listing (O(directories)) only when the patch listed something again:
    otherwise the listings are those the watcher's memo was made from, and so is the report."""
    memo = watcher.report_memo
    if memo is not None and memo[0] is listings and not listed:
        report.warnings.extend(memo[1])
        report.special += memo[2]
        report.unreadable += memo[3]
        return True
    watcher.report_memo = None
    mine = scan.ScanReport()
    if not _walk_report(mine, listings):
        return False
    watcher.report_memo = (listings, tuple(mine.warnings), mine.special, mine.unreadable)
    report.warnings.extend(mine.warnings)
    report.special += mine.special
    report.unreadable += mine.unreadable
    return True


def _walk_report(report: scan.ScanReport, listings: scan.Listings) -> bool:
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


def patch(
    ctx: StageContext,
    state: TreeState,
    found: MutableMapping[bytes, scan.Found],
    listings: scan.Listings,
    changes: Changes,
    report: scan.ScanReport,
    watch: Callable[[bytes], None] | None,
    reread: set[bytes] | frozenset[bytes] = frozenset(),
    *,
    in_place: bool = False,
    links: set[bytes] | None = None,
) -> Patched | None:
    """Apply ``changes`` to ``found`` and ``listings`` and derive the entries: the state's own
    dict edited ``in_place`` (O(changed); the caller drops the state and the memo if the
    snapshot does not complete), else a copy (a look changes nothing: :mod:`.current_tree`
    passes an overlay of ``found``, a copy of ``listings`` and no ``watch``, since a look must
    not change what is watched).  The files of ``reread`` (up to MAPPED_REREAD_MAX) are read
    whatever the stat cache says.  The stat cache is read for the paths patched only.
    ``links``: the files with more than one link before (default: the state's)."""
    patch = rescan.apply(ctx.root_bytes, ctx.excluded, found, listings, changes, report, watch)
    if patch is None:
        return None
    links = _links_after(state.links if links is None else links, patch, found)
    if links is None:
        return None
    memo = ctx.watcher.inode_memo if ctx.watcher is not None else None
    if ctx.watcher is not None and ctx.watcher.inode_index is not None:
        ctx.watcher.inode_recent.update(f.st.st_ino for f in patch.updated if f.st is not None)
    if memo:
        for f in patch.updated:  # an inode answered "not in the tree" may be in it now
            if f.st is not None and memo.get(f.st.st_ino) == ():
                del memo[f.st.st_ino]  # (an answer with paths is checked when used)
    entries = state.entries if in_place else state.entries.copy()
    stale: list[bytes] = []
    # (a record found again may since have been found once more, or removed: the last one counts)
    changed = list({f.path: f for f in patch.updated if found.get(f.path) == f}.values())
    gone = [p for p in patch.removed if p not in found]
    cache = _cached(ctx, state.cache, gone + [f.path for f in changed])
    for path in gone:
        entries.pop(path, None)
        key = statcache.key(path)
        if key in cache:
            stale.append(key)
    if changed:
        fresh, to_read = worktree.classify(changed, cache)
        for path in reread:
            mapped = found.get(path)
            if path in fresh and mapped is not None and mapped.st is not None and mapped.st.st_size <= MAPPED_REREAD_MAX:
                del fresh[path]
                to_read.append(mapped)
        entries.update(fresh)
    else:
        to_read = []
    touched = set(patch.removed)
    touched.update(f.path for f in changed)
    base = state.entries
    if state.carried is not None:  # (a restore's writes since the memo's dict: touched too)
        base, since = state.carried
        touched |= since
    return Patched(found, state.cache, entries, to_read, stale, touched, links, base, patch.listed)


def _cached(ctx: StageContext, recent: dict[bytes, bytes], paths: list[bytes]) -> dict[bytes, bytes]:
    """The stat-cache values of ``paths`` (by key): those set since the last snapshot
    (``recent``), else the table's, read in one transaction; the table is never held whole
    (~180 bytes a file)."""
    out: dict[bytes, bytes] = {}
    rest: list[bytes] = []
    for path in paths:
        key = statcache.key(path)
        value = recent.get(key)
        if value is not None:
            out[key] = value
        else:
            rest.append(key)
    if rest:
        with ctx.backend.read() as view:
            for key in rest:
                value = view.get("statcache", key)
                if value is not None:
                    out[key] = value
    return out


def _links_after(before: set[bytes], patch: rescan.Patch, found: Mapping[bytes, scan.Found]) -> set[bytes] | None:
    """The files with more than one link after ``patch`` (a new set); None when a file gained
    a link: its other links in the tree may have been written with no event naming it (and
    their state is stale too), so only a full walk can say."""
    if not patch.links <= before:
        return None
    if not patch.removed and not patch.updated:
        return before
    after = set(before)
    for path in patch.removed:
        if path not in found:
            after.discard(path)
    for f in patch.updated:
        if f.path not in patch.links:
            after.discard(f.path)  # examined again, with one link now (or not a file)
    return after


def divergences(found: list[scan.Found] | FoundMap, expected: Mapping[bytes, scan.Found]) -> list[bytes]:
    """Paths where a walk and the watcher-kept state disagree (two packed maps are compared
    value by value: a file's packed value holds every field compared, and no record is made)."""
    if isinstance(found, FoundMap) and isinstance(expected, FoundMap):
        return sorted(found.differing(expected))
    seen = found if isinstance(found, FoundMap) else {f.path: f for f in found}
    out = []
    for path in seen.keys() | expected.keys():
        a, b = seen.get(path), expected.get(path)
        if a is None or b is None or a.kind != b.kind or a.st != b.st or a.target != b.target:
            out.append(path)
    return sorted(out)


def check_walk(ctx: StageContext, found: list[scan.Found] | FoundMap) -> None:
    """After a periodic check's full walk: count (and log) what the watcher's state missed."""
    expected, ctx.walk_check = ctx.walk_check, None
    if expected is None:
        return
    missed = divergences(found, expected)
    if missed and ctx.watcher is not None:
        note_divergences(ctx.watcher, missed, "consistency check")


def note_divergences(watcher: Watcher, missed: list[bytes], what: str) -> None:
    """Count ``missed`` (paths changed without an event) in ``serve --status`` and log them."""
    watcher.divergences += len(missed)
    shown = ", ".join(p.decode("utf-8", "replace") for p in missed[:5])
    watcher.last_divergence = f"{len(missed)} path(s) changed without an event: {shown}"
    import logging  # only when there is something to log: not on every snapshot's import

    logging.getLogger("snapstore.watcher").warning("%s: %s", what, watcher.last_divergence)


def remember(ctx: StageContext, walked: Walked | None, entries: dict[bytes, Entry], keys: Keys) -> None:
    """Keep what this snapshot committed for the next one (only when a watcher runs;
    ``walked`` is None when the snapshot's inputs did not come from a watching walk)."""
    if ctx.watcher is None or walked is None:
        return
    # The commit stored ``updates`` and deleted ``stale`` in the table, which the next snapshot
    # reads for the paths it examines: the state starts with no value of its own.
    found = walked.found
    by_path = found if isinstance(found, FoundMap) else FoundMap(found.values() if isinstance(found, Mapping) else found)
    links = walked.links if isinstance(walked.links, set) else set(walked.links)
    ctx.tree_state = TreeState(by_path, {}, entries, keys, walked.listings, links)


def forget(ctx: StageContext) -> None:
    """Drop the state and the manifest memo (after anything this context cannot account for:
    the memo's entries may be the state's, patched in place by a snapshot that did not finish,
    and must never again pass for the last manifest's)."""
    ctx.tree_state = None
    memo = ctx.manifest_memo
    memo.entries = memo.ordered = memo.mid = None


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
