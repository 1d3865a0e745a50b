"""Finishing a restore whose tree syncs were left for later, after a power failure.

A journal that carries a boot id other than this boot's was written by a restore that made no
``syncfs`` yet (:mod:`.settle`), and the kernel that held its writes is gone: a path of its plan
may hold an empty or torn file, the file it replaced, or nothing.  The user's bytes are safe
(the safety checkpoint was durable before the first file was touched; this checks it still
holds every file the plan replaced), so each path is looked at by content:

* as the target has it: done;
* absent, as the safety checkpoint had it, or a file the restore itself renamed into place
  (same inode and mtime as the journal's applied mark records) whatever it holds now: written
  again from the store;
* anything else is the user's (written after the restore, or after the reboot): left alone
  and named in a warning.

A journal not marked applied (the power failure came while the restore ran) has no such
record: a file written between the journal and the end of that boot, neither before nor
target, is the restore's torn temp file renamed into place; one written since the reboot is
the user's, and recovery refuses as it does after a process crash.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from snapstore.ops.context import StageContext
from snapstore.ops.restore import journal
from snapstore.ops.restore.apply import Applier, clean_temp_files, getter
from snapstore.ops.restore.batch import Run, execute
from snapstore.ops.restore.journal import Journal, tables
from snapstore.ops.restore.plan import Step, verify_sources
from snapstore.platform import sync
from snapstore.records.manifest import EXEC, FILE, Entry
from snapstore.tree.paths import display

#: More than a tick of the clock the kernel stamps files with (a file written right after a
#: ``time_ns`` reading may carry a time before it).
CLOCK_TICK_NS = 100_000_000
#: The steps that only make, remove or chmod directories: carried out again (idempotent).
_DIR_STEPS = ("mkdir", "rmdir", "prune", "dirmode")


def after_another_boot(j: Journal) -> bool:
    """Whether ``j`` was left by a restore with deferred syncs under a kernel that is gone."""
    return j.boot is not None and j.boot != sync.boot_id()


def written_in_that_boot(j: Journal) -> Callable[[bytes, os.stat_result], bool]:
    """For a journal not marked applied: a file modified after the journal was written and
    before this boot began is the interrupted restore's own (the user's edits since the
    reboot are newer)."""
    start = sync.boot_time_ns()
    # (file times come from the kernel's coarse clock: they may lag time_ns by a tick)
    since = int(j.op.get("time_ns", 0)) - CLOCK_TICK_NS

    def ours(path: bytes, st: os.stat_result) -> bool:
        return start is not None and since <= st.st_mtime_ns < start

    return ours


def plan_repair(
    root: bytes, j: Journal, before: dict[bytes, Entry], target: dict[bytes, Entry]
) -> tuple[list[Step], list[bytes]]:
    """The steps of applied journal ``j`` to carry out again, and the paths left as the user's."""
    ids = {j.steps[i].path: (ino, mtime) for i, ino, mtime in (j.applied or {}).get("ids", [])}
    before_dirs, target_dirs = journal.implied_dirs(before), journal.implied_dirs(target)
    redo: list[Step] = []
    users: list[bytes] = []
    for s in j.steps:
        if s.action in _DIR_STEPS:
            redo.append(s)
            continue
        try:
            st = os.lstat(os.path.join(root, s.path))
        except (FileNotFoundError, NotADirectoryError):
            if s.action != "delete":
                redo.append(s)
            continue
        if s.action != "delete" and journal.matches(root, s.path, st, target, target_dirs):
            continue
        if ids.get(s.path) == (st.st_ino, st.st_mtime_ns) or journal.matches(root, s.path, st, before, before_dirs):
            redo.append(s)
        else:
            users.append(s.path)
    return redo, users


def repair(ctx: StageContext, j: Journal, value: bytes, before: dict[bytes, Entry],
           target: dict[bytes, Entry], dry_run: bool) -> tuple[int, list[str]]:
    """Write again what a power failure left unwritten of applied journal ``j`` (its stored
    value ``value``), then clear it; (steps carried out again, warnings)."""
    replaced = [Step("write", p) for p in {s.path for s in j.steps} if _is_file(before.get(p))]
    with tables(ctx.backend).read() as view:
        # The user's bytes: every file the plan replaced is still whole in the safety checkpoint.
        verify_sources(view.get, before, replaced)
    redo, users = plan_repair(ctx.root_bytes, j, before, target)
    warnings = [
        f"kept {display(p)}: changed since the restore a power failure interrupted (it is not the restore's)"
        for p in users
    ]
    if dry_run:
        return len(redo), warnings
    with tables(ctx.backend).read() as view:
        contents = verify_sources(view.get, target, redo, tables(ctx.backend).read)
    applier = Applier(ctx.root_bytes, getter(ctx), target, f"{os.getpid()}p")
    applier.contents = contents
    try:
        clean_temp_files(applier.tree, [s.path for s in j.steps])
        execute(applier, redo, None, Run())  # (synced inline: this is the late sync too)
    finally:
        applier.close()
    # (what was found as it should be was read from the disk: this boot's kernel held none of it)
    journal.clear_if(ctx.backend, value)
    return len(redo), warnings + applier.warnings


def _is_file(e: Entry | None) -> bool:
    return e is not None and e.kind in (FILE, EXEC)
