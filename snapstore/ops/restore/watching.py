"""A watching context keeps its tree state across a restore (the service's dirty set).

A Store opened with ``watch=True`` (the resident service) snapshots in O(changed) from the
watcher's events and a :class:`~snapstore.ops.context.TreeState` (``ctx.tree_state``).  A restore changes the
tree and the operation log; dropping the state would make the next snapshot (often the next
restore's safety checkpoint) walk the whole tree.  :func:`keep_state` keeps it instead, in one
of two ways:

* when the restore only wrote, created and deleted files (or deleted symlinks) in directories
  the state has listed and that keep a record, and removed directories whose every record it
  deleted, and every event the watcher queued since the safety checkpoint is one the restore
  caused (the written and deleted paths, our temp files, their directories), the state is
  patched exactly from the restore's own steps: each file's new stat, stat-cache value and
  entry, each deleted path's records gone, each directory's listing given the names and
  subdirectories it gained and lost (a removed directory's listing dropped); the events are
  consumed, so the next snapshot (the record after the restore) lists nothing again.  A
  listing's rules and notes stay as they were: a new file is recorded only where its
  directory's rules do not ignore it (else the fallback below), regular files add no note, and
  a removed directory's listing must have said nothing;
* otherwise (directories created, symlinks written, an ignore file, a directory left with no
  record or left in place, another process's work during the restore) the events are given back
  to the watcher and only the new stat-cache values and the new operation-log key are
  recorded: the next snapshot patches the state from those events (``tree.rescan``: it lists
  again only the directories the restore touched) and the stat cache vouches for every file
  written, so none is read back.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from snapstore.ops.context import StageContext, TreeState
from snapstore.ops.restore.apply import TMP_PREFIX
from snapstore.ops.restore.plan import Step
from snapstore.records.manifest import EXEC, FILE, SYMLINK
from snapstore.tree import ignore, scan, statcache, worktree
from snapstore.tree.ignore import IGNORE_FILES

if TYPE_CHECKING:
    from snapstore.tree.watcher import Changes


def keep_state(
    ctx: StageContext, steps: list[Step], written: dict[bytes, tuple[os.stat_result, bytes]], oplog_key: bytes
) -> None:
    """Patch the watching context's tree state with what the restore wrote, or leave the
    restore's events to the next snapshot (see the module's docstring)."""
    watcher = ctx.watcher
    state = ctx.tree_state
    if watcher is None or state is None:
        return
    changes = watcher.take()  # our own events (and any other), drained
    if _patch(ctx, state, changes, steps, written, oplog_key):
        return
    watcher.give_back(changes)
    for p, (st, sid) in written.items():
        value = statcache.written(st, st, sid)
        if value is not None:
            state.cache[statcache.key(p)] = value
    state.keys = (state.keys[0], oplog_key)


#: What the exact patch handles (the fallback gives the events back for anything else).
_FILE_ACTIONS = frozenset({"write", "chmod", "delete"})
_DIR_REMOVALS = frozenset({"rmdir", "prune"})


def _patch(
    ctx: StageContext,
    state: TreeState,
    changes: Changes,
    steps: list[Step],
    written: dict[bytes, tuple[os.stat_result, bytes]],
    oplog_key: bytes,
) -> bool:
    if changes.full or changes.subtrees or changes.blind:
        return False
    deleted = [s.path for s in steps if s.action == "delete"]
    removed = [s.path for s in steps if s.action in _DIR_REMOVALS]
    if len(written) + len(deleted) + len(removed) != len(steps) or any(
        s.action not in _FILE_ACTIONS and s.action not in _DIR_REMOVALS for s in steps
    ):
        return False  # directories made, symlinks written, or a file the write rule cannot vouch for
    if any(s.path.rpartition(b"/")[2] in IGNORE_FILES for s in steps):
        return False  # the rules kept in the listings change: a listing says what they hide
    dirs = {s.path.rpartition(b"/")[0] for s in steps} | set(removed)
    if not _only_ours(changes, steps, dirs):
        return False
    after = _listings_after(ctx, state, written, deleted, removed)
    if after is None or not _as_written(ctx.root_bytes, written) or not _gone(ctx.root_bytes, deleted + removed):
        return False  # (a directory left in place holds ignored files: a listing says what)
    values: dict[bytes, bytes] = {}
    for p, (st, sid) in written.items():
        value = statcache.written(st, st, sid)
        if value is None:
            return False
        values[p] = value
    # A new entries dict: the old one is also the snapshot's manifest memo (the entries of the
    # last manifest written), which must keep describing that manifest.
    base, since = state.carried if state.carried is not None else (state.entries, set())
    entries = state.entries.copy()  # (of the same kind: tree.packed.EntryMap stays packed)
    for p in deleted + removed:  # (a removed directory's record: an empty one's DIR)
        state.found.pop(p, None)
        entries.pop(p, None)
        state.cache.pop(statcache.key(p), None)
        state.links.discard(p)
    for p, (st, sid) in written.items():  # (after: a file may replace what was removed)
        kind = EXEC if st.st_mode & 0o100 else FILE
        state.found[p] = scan.Found(p, kind, scan.compact(st), b"")
        entries[p] = worktree.file_entry(p, st, sid)
        state.cache[statcache.key(p)] = values[p]
    for d, listing in after.items():
        if listing is None:
            del state.listings[d]
        else:
            state.listings[d] = listing
    _new_inodes(ctx, written)
    state.entries, state.keys = entries, (state.keys[0], oplog_key)
    state.carried = (base, since | written.keys() | set(deleted) | set(removed))
    return True


def _only_ours(changes: Changes, steps: list[Step], dirs: set[bytes]) -> bool:
    """Is every queued event one the restore caused (its paths, its temp files, their
    directories)?"""
    if not changes.dirs <= dirs:
        return False
    paths = {s.path for s in steps}
    for p in changes.paths:
        parent, _, name = p.rpartition(b"/")
        if p not in paths and p not in dirs and not (parent in dirs and name.startswith(TMP_PREFIX)):
            return False  # something the restore did not do
    return True


def _listings_after(
    ctx: StageContext, state: TreeState, written: dict[bytes, tuple[os.stat_result, bytes]], deleted: list[bytes],
    removed: list[bytes],
) -> dict[bytes, scan.Listing | None] | None:
    """Each changed directory's listing after the restore (None: the directory is gone); None
    when a walk could find more than the steps say (a new name its rules ignore, a directory
    left with no record, one the state has no listing of, a kind the patch does not make)."""
    found, listings = state.found, state.listings
    gained: dict[bytes, list[bytes]] = {}
    lost: dict[bytes, set[bytes]] = {}
    for p in written:
        known = found.get(p)
        if known is None:
            gained.setdefault(p.rpartition(b"/")[0], []).append(p)
        elif known.kind not in (FILE, EXEC):
            return None
    for p in deleted:
        known = found.get(p)
        if known is None or known.kind not in (FILE, EXEC, SYMLINK):
            return None
        lost.setdefault(p.rpartition(b"/")[0], set()).add(p)
    out: dict[bytes, scan.Listing | None] = {}
    gone = set(removed)
    for d in removed:
        listing = listings.get(d)
        if listing is None or listing.kind != scan.LISTED or not gone.issuperset(listing.subdirs):
            return None
        if listing.notes != () or listing.special or listing.unreadable:
            return None  # (a walk's report would lose what it said: the memo of it would not)
        if not lost.get(d, set()).issuperset(listing.names):
            return None  # it held a record the restore did not delete
        out[d] = None
        lost.setdefault(d.rpartition(b"/")[0], set()).add(d)
    for d in gained.keys() | lost.keys():
        if d in gone:
            continue
        listing = listings.get(d)
        if listing is None or listing.kind != scan.LISTED or d in found:
            return None  # not listed, or recorded as an empty directory
        if not _may_record(ctx, listing, gained.get(d, [])):
            return None
        less = lost.get(d, set())
        names = tuple([n for n in listing.names if n not in less]) + tuple(gained.get(d, []))
        subdirs = tuple([n for n in listing.subdirs if n not in less])
        if not names and not subdirs:
            return None  # empty now, or holding only what it ignores: a listing says which
        out[d] = listing._replace(names=names, subdirs=subdirs)
    return out


def _may_record(ctx: StageContext, listing: scan.Listing, new: list[bytes]) -> bool:
    """Would a walk record each of ``new`` (files just created in the listing's directory)?"""
    for p in new:
        name = p.rpartition(b"/")[2]
        if name in scan.ALWAYS_EXCLUDED or name in scan.STORE_MARKERS or p in ctx.excluded:
            return False
        if listing.rules and ignore.is_ignored(listing.rules, p, False):
            return False
    return True


def _as_written(root: bytes, written: dict[bytes, tuple[os.stat_result, bytes]]) -> bool:
    """Is every file the restore wrote still as it wrote it (one link)?"""
    for p, (st, _) in written.items():
        try:
            now = os.lstat(os.path.join(root, p))
        except OSError:
            return False
        if now.st_nlink != 1 or (now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns, now.st_mode) != (
            st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode,
        ):  # fmt: skip
            return False  # changed since the restore looked (its events may be drained above)
    return True


def _gone(root: bytes, deleted: list[bytes]) -> bool:
    """Is every path the restore deleted still absent?"""
    for p in deleted:
        try:
            os.lstat(os.path.join(root, p))
        except FileNotFoundError:
            continue
        except OSError:
            return False
        return False  # there again: someone else's
    return True


def _new_inodes(ctx: StageContext, written: dict[bytes, tuple[os.stat_result, bytes]]) -> None:
    """The written files' inodes are the tree's now: the watcher's answers for mappings by
    inode (ops.snapshot.incremental) must not call them foreign, as a rescan's patch would not."""
    watcher = ctx.watcher
    if watcher is None:
        return
    inodes = {st.st_ino for st, _ in written.values()}
    if watcher.inode_index is not None:
        watcher.inode_recent.update(inodes)
    memo = watcher.inode_memo
    if memo:
        for ino in inodes:
            if memo.get(ino) == ():
                del memo[ino]
