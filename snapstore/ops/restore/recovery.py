"""Finishing, rolling back or abandoning a restore a crash interrupted.

Only writers (snapshot, restore, undo, gc, prune, delete) and an explicit ``snapstore recover``
act on a pending journal; read-only commands report it (:func:`pending`) and leave the tree
alone.  Before any step is replayed, every journaled path is checked: it must be absent, as the
safety checkpoint recorded it, or as the target has it, so whatever recovery overwrites is
already recorded.  A path in any other state is work done after the crash: recovery refuses
(ConflictError, nothing touched) and ``recover --abandon`` records the tree as it is and drops
the journal.  Whatever goes wrong while replaying (any exception class) becomes one error that
names ``snapstore recover``; the store never becomes unusable.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from snapstore.errors import CorruptError, SnapstoreError, TreeIOError, UsageError
from snapstore.ops.context import StageContext
from snapstore.ops.restore import journal, powerfail, settle
from snapstore.ops.restore.apply import Applier, DirTree, clean_temp_files, getter
from snapstore.ops.restore.batch import Run, execute
from snapstore.ops.restore.journal import tables
from snapstore.ops.restore.plan import REMOVALS, plan
from snapstore.ops.restore.safety import check_manifest, under
from snapstore.records import manifest
from snapstore.records.checkpoint import Checkpoint, load_one
from snapstore.records.manifest import Entry
from snapstore.storage.backend import ReadView
from snapstore.tree import worktree
from snapstore.tree.paths import display, to_json

MODES = ("forward", "back", "abandon")

#: Records the tree as it is (a safety checkpoint) before a journal is abandoned.
RecordTree = Callable[[str], Checkpoint]


@dataclass
class RecoverReport:
    """What :func:`recover` did (or, with ``dry_run``, would do) with a pending journal."""

    pending: bool
    mode: str
    dry_run: bool
    kind: str | None = None
    target: str | None = None
    before: str | None = None
    steps: int = 0
    #: Paths changed since the crash (neither as before nor as after): recovery refuses.
    conflicts: list[bytes] = field(default_factory=list)
    #: The checkpoint recorded before abandoning (``mode="abandon"``).
    safety: str | None = None
    op_seq: int | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "pending": self.pending,
            "mode": self.mode,
            "dry_run": self.dry_run,
            "kind": self.kind,
            "target": self.target,
            "before": self.before,
            "steps": self.steps,
            "conflicts": [to_json(p) for p in self.conflicts],
            "safety_checkpoint": self.safety,
            "op": self.op_seq,
            "warnings": self.warnings,
        }


def pending(view: ReadView) -> str | None:
    """A warning for read-only commands when a restore is pending (None when there is none)."""
    try:
        j = journal.read(view)
    except CorruptError:
        return (
            "an interrupted restore left a journal that cannot be read; the tree may be half "
            f"restored ({journal.RECOVER_HINT})"
        )
    if j is None:
        return None
    if j.applied is not None:
        if not powerfail.after_another_boot(j):
            return None  # done; its tree's sync is on its way
        return (
            f"a power failure came soon after a {j.kind} to {j.target.hex()[:12]}: some of its files may "
            "not have reached the disk; the next writing command checks them and writes them again "
            "(or run 'snapstore recover')"
        )
    return (
        f"a {j.kind} to {j.target.hex()[:12]} was interrupted and is not finished; run "
        "'snapstore recover' to finish it (or --back to roll it back)"
    )


def recover(
    ctx: StageContext,
    *,
    mode: str = "forward",
    dry_run: bool = False,
    record_tree: RecordTree | None = None,
) -> RecoverReport:
    """Finish (``forward``), roll back (``back``) or drop (``abandon``) a pending restore.

    The caller holds the writer lock.  ``record_tree`` records the tree before ``abandon``.
    """
    if mode not in MODES:
        raise UsageError(f"unknown recovery mode {mode!r} (one of {', '.join(MODES)})")
    with tables(ctx.backend).read() as view:
        value = view.get("journal", journal.JOURNAL_KEY)
    if value is None:
        return RecoverReport(False, mode, dry_run)
    if mode == "abandon":
        return _abandon(ctx, value, dry_run, record_tree)
    j = journal.parse(value)
    report = RecoverReport(True, mode, dry_run, j.kind, j.target.hex(), j.before.hex() if j.before else None)
    try:
        if j.applied is not None:
            return _applied(ctx, j, value, report, leave_own=record_tree is None)
        return _replay(ctx, j, report)
    except SnapstoreError:
        raise
    except OSError as exc:
        raise TreeIOError(
            f"cannot {_doing(mode)} the interrupted restore: {exc.strerror or exc}"
            + (f" ({display(os.fsencode(exc.filename))})" if exc.filename else "")
            + f"; it is still journaled ({journal.RECOVER_HINT})"
        ) from exc
    except Exception as exc:  # whatever a damaged journal or record makes the replay raise
        raise CorruptError(
            f"cannot {_doing(mode)} the interrupted restore ({type(exc).__name__}: {exc}); "
            f"it is still journaled ({journal.RECOVER_HINT})"
        ) from exc


def _doing(mode: str) -> str:
    return "finish" if mode == "forward" else "roll back"


def _load(ctx: StageContext, cid: bytes | None) -> dict[bytes, Entry]:
    if cid is None:
        return {}
    with tables(ctx.backend).read() as view:
        cp = load_one(view, cid)
        return manifest.load(view.get, cp.manifest)


def _applied(
    ctx: StageContext, j: journal.Journal, value: bytes, report: RecoverReport, leave_own: bool
) -> RecoverReport:
    """A restore carried out whole whose tree syncs were left for later (:mod:`.settle`):
    under this boot, sync and clear (a writer leaves one this process's tree flusher is about
    to settle); after a power failure, check and repair (:mod:`.powerfail`)."""
    if report.mode == "back":
        report.warnings.append(f"the {j.kind} had finished; 'snapstore undo' takes it back")
    if not powerfail.after_another_boot(j):
        if leave_own and settle.own(ctx, value):
            return RecoverReport(False, report.mode, report.dry_run)
        if not report.dry_run:
            settle.clear_when_synced(ctx, j, value)
        return report
    target = _load(ctx, j.target)
    check_manifest(target, ctx.excluded)
    before = _load(ctx, j.before)
    check_manifest(before, ctx.excluded)
    report.steps, warnings = powerfail.repair(ctx, j, value, before, target, report.dry_run)
    report.warnings.extend(warnings)
    return report


def _replay(ctx: StageContext, j: journal.Journal, report: RecoverReport) -> RecoverReport:
    target = _load(ctx, j.target)
    check_manifest(target, ctx.excluded)
    if j.before is None and report.mode == "back":
        raise CorruptError(f"the journal names no safety checkpoint to roll back to ({journal.RECOVER_HINT})")
    before = _load(ctx, j.before)
    check_manifest(before, ctx.excluded)
    paths = {s.path for s in j.steps}
    for s in j.steps:
        if s.action not in REMOVALS and s.path not in target:
            raise CorruptError(
                f"the restore journal names {display(s.path)}, absent from its target ({journal.RECOVER_HINT})"
            )
    # After a power failure the interrupted restore's own files may be torn (its syncs waited).
    ours = powerfail.written_in_that_boot(j) if powerfail.after_another_boot(j) else None
    report.conflicts = journal.conflicts(ctx.root_bytes, paths, before, target, ours)
    if report.mode == "forward":
        entries, steps = target, j.steps
    else:
        current, _ = worktree.current_state(ctx)
        entries, steps = before, plan(current, before, under(paths)).steps
    report.steps = len(steps)
    if report.dry_run:
        return report
    if report.conflicts:
        raise journal.conflict_error(report.conflicts, _doing(report.mode))
    applier = Applier(ctx.root_bytes, getter(ctx), entries, f"{os.getpid()}c")
    try:
        # Leftover temp files first: the replay's own are renamed or removed by execute.
        clean_temp_files(applier.tree, [s.path for s in j.steps])
        execute(applier, steps, None, Run())
    finally:
        applier.close()
    report.warnings.extend(applier.warnings)
    if report.mode == "forward":
        report.op_seq = journal.finish(ctx.backend, j.op, len(j.steps), applier.cache)
        ctx.backend.sync()  # (no record of the tree follows here to carry the finish's sync)
    else:
        journal.clear(ctx.backend)
    return report


def _abandon(ctx: StageContext, value: bytes, dry_run: bool, record_tree: RecordTree | None) -> RecoverReport:
    """Keep the tree as it is: record it, remove our temp files, drop the journal."""
    report = RecoverReport(True, "abandon", dry_run)
    try:
        j: journal.Journal | None = journal.parse(value)
    except CorruptError as exc:
        j = None
        report.warnings.append(str(exc))
    if j is not None:
        report.kind, report.target, report.steps = j.kind, j.target.hex(), len(j.steps)
        report.before = j.before.hex() if j.before else None
    if dry_run:
        return report
    if j is not None:
        tree = DirTree(ctx.root_bytes)
        try:
            clean_temp_files(tree, [s.path for s in j.steps])
        finally:
            tree.sync_and_close()
        if j.applied is not None and not powerfail.after_another_boot(j):
            settle.sync_dirs_of(ctx.root_bytes, j)  # (its writes reach the disk before it goes)
    if record_tree is not None:
        report.safety = record_tree("before abandoning an interrupted restore").id
    journal.clear(ctx.backend)
    return report
