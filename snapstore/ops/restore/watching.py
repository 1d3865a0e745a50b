"""A watching context keeps its tree state across a restore (the service's dirty set).

A Store opened with ``watch=True`` (the resident service) snapshots in O(changed) from the
watcher's events and a :class:`~snapstore.ops.context.TreeState` (``ctx.tree_state``).  A restore changes the
tree and the operation log; dropping the state would make the next snapshot (often the next
restore's safety checkpoint) walk the whole tree.  :func:`keep_state` keeps it instead, in one
of two ways:

* when the restore only rewrote files the state already knew and every event the watcher
  queued since the safety checkpoint is one the restore caused (the written files, our temp
  files, their directories), the state is patched exactly: each file's new stat, stat-cache
  value and entry; the events are consumed, so the next snapshot re-examines nothing;
* otherwise (files removed or created, directories, symlinks, another process's work during
  the restore) the events are given back to the watcher and only the new stat-cache values
  and the new operation-log key are recorded: the next snapshot patches the state from those
  events (``tree.rescan``: it lists again only the directories the restore touched) and the
  stat cache vouches for every file written, so none is read back.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from snapstore.ops.context import StageContext, TreeState
from snapstore.ops.restore.apply import TMP_PREFIX
from snapstore.ops.restore.plan import Step
from snapstore.records.manifest import EXEC, FILE
from snapstore.tree import scan, statcache, worktree

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
    if any(s.action not in ("write", "chmod") for s in steps) or len(written) != len(steps):
        return False  # removals, directories, symlinks, or a file the write rule cannot vouch for
    dirs = {p.rpartition(b"/")[0] for p in written}
    if not changes.dirs <= dirs:
        return False
    for p in changes.paths:
        parent, _, name = p.rpartition(b"/")
        if p not in written and p not in dirs and not (parent in dirs and name.startswith(TMP_PREFIX)):
            return False  # something the restore did not do
    root = ctx.root_bytes
    for p, (st, _) in written.items():
        known = state.found.get(p)
        if known is None or known.kind not in (FILE, EXEC):
            return False
        try:
            now = os.lstat(os.path.join(root, p))
        except OSError:
            return False
        if (now.st_ino, now.st_size, now.st_mtime_ns, now.st_ctime_ns, now.st_mode) != (
            st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode,
        ):  # fmt: skip
            return False  # changed since the restore looked (its events may be drained above)
    # A new entries dict: the old one is also the snapshot's manifest memo (the entries of the
    # last manifest written), which must keep describing that manifest.
    base, since = state.carried if state.carried is not None else (state.entries, set())
    entries = dict(state.entries)
    for p, (st, sid) in written.items():
        value = statcache.written(st, st, sid)
        if value is None:
            return False
        kind = EXEC if st.st_mode & 0o100 else FILE
        state.found[p] = scan.Found(p, kind, scan.compact(st), b"")
        entries[p] = worktree.file_entry(p, st, sid)
        state.cache[statcache.key(p)] = value
    state.entries, state.keys = entries, (state.keys[0], oplog_key)
    state.carried = (base, since | written.keys())
    return True
