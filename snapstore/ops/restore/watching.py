"""A watching context keeps its tree state across a restore (the service's dirty set).

A Store opened with ``watch=True`` (the resident service) snapshots in O(changed) from the
watcher's events and a :class:`~snapstore.ops.incremental.TreeState`.  A restore changes the
tree and the operation log, so that state would be dropped and the next snapshot (often the
next restore's safety checkpoint) would walk the whole tree.  When the restore only rewrote
files the state already knew, :func:`keep_state` patches the state instead: each file's new
stat, stat-cache value and entry, and the new operation-log key.

It does so only when it can account for every event the watcher queued since the safety
checkpoint drained it: events on the written files, on our temp files and on their
directories.  Any other event (another process's work during the restore), a file whose stat is
not the one the restore recorded after its rename, or a restore that did more than rewrite known
files drops the state instead (a full walk next time, as before).
"""

from __future__ import annotations

import os
from typing import Any

from snapstore.ops import incremental
from snapstore.ops.context import StageContext
from snapstore.ops.restore.apply import TMP_PREFIX
from snapstore.ops.restore.plan import Step
from snapstore.records.manifest import EXEC, FILE
from snapstore.tree import scan, statcache, worktree


def keep_state(
    ctx: StageContext, steps: list[Step], written: dict[bytes, tuple[os.stat_result, bytes]], oplog_key: bytes
) -> None:
    """Patch the watching context's tree state with what the restore wrote (or drop it)."""
    watcher = ctx.memo.get(incremental.WATCHER)
    if watcher is None:
        return
    if not _patch(ctx, watcher, steps, written, oplog_key):
        incremental.forget(ctx)


def _patch(
    ctx: StageContext,
    watcher: Any,
    steps: list[Step],
    written: dict[bytes, tuple[os.stat_result, bytes]],
    oplog_key: bytes,
) -> bool:
    state = ctx.memo.get(incremental.KEY)
    changes = watcher.take()  # our own events (and any other), drained
    if not isinstance(state, incremental.TreeState) or changes.full or changes.subtrees:
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
    entries = dict(state.entries)
    for p, (st, sid) in written.items():
        value = statcache.written(st, st, sid)
        if value is None:
            return False
        kind = EXEC if st.st_mode & 0o100 else FILE
        state.found[p] = scan.Found(p, kind, scan.compact(st), b"")
        entries[p] = worktree.file_entry(p, st, sid)
        state.cache[statcache.key(p)] = value
    ctx.memo[incremental.KEY] = state._replace(entries=entries, keys=(state.keys[0], oplog_key))
    return True
