"""Selective revert: take back what some checkpoints changed, keep every change made since.

The planning is :mod:`snapstore.ops.revert.planner` (three-way per path); applying goes through restore
(:mod:`snapstore.ops.restore`) so a revert is journaled, atomic per file, checks concurrent
edits, and ``undo`` puts the tree back exactly.  The order under the writer lock:

1. the steps (what to take back) are read from the checkpoints;
2. with ``conflicts="refuse"`` a first plan against the tree as it is (no write anywhere)
   refuses early, so a refused revert leaves the store as well as the tree unchanged;
3. the tree is recorded (the safety checkpoint) and the plan is made from exactly what it
   recorded (contents read back from the store);
4. the new contents and a target checkpoint (the safety checkpoint's manifest with the outcome
   paths replaced, kind user, metadata ``revert_of``) are stored;
5. restore makes the outcome paths equal to the target, with the safety checkpoint of step 3
   as its own: each path is checked against what step 3 saw before it is touched.

Conflicts are settled for the whole revert (``conflicts``) or file by file (``choices``: path ->
ours, theirs or markers, what the UI's per-file choice sends); a conflict left unsettled refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from snapstore.errors import ConflictError, UsageError
from snapstore.ops.context import StageContext
from snapstore.ops.revert.planner import CHOICES, Choice, PathOutcome, RevertStep, plan
from snapstore.ops.revert.record import RevertReport, record_target, target_entries
from snapstore.ops.revert.steps import (
    CONFLICT_MODES,
    UnknownChange,
    check_request,
    read_steps,
    split_range,
)
from snapstore.records.checkpoint import Checkpoint
from snapstore.records.manifest import Entry

if TYPE_CHECKING:
    from snapstore.ops.diff import Change
    from snapstore.ops.merge import Prefer
    from snapstore.ops.restore import RestoreReport, TakeSafety

__all__ = ["CONFLICT_MODES", "RevertRequest", "RevertReport", "Restore", "UnknownChange", "run", "split_range"]


class RevertRequest(NamedTuple):
    """What to take back (exactly one of ``ref``, ``range``, ``task``) and how."""

    ref: str | None
    range: str | None
    task: str | None
    actor: str | None
    paths: list[str] | None
    conflicts: str
    #: With an actor: take the task's ``unknown`` changes too (else they are listed, left alone).
    include_unknown: bool = False
    #: Per path, how its conflicts are settled ("ours", "theirs" or "markers"), over ``conflicts``.
    choices: dict[bytes, str] | None = None


#: Applies a target: runs the journaled restore of ``paths`` (with the Store's hooks) whose
#: safety checkpoint ``take_safety`` returns.
Restore = Callable[[Checkpoint, list[bytes], str, "TakeSafety"], "RestoreReport"]


def run(
    ctx: StageContext,
    request: RevertRequest,
    *,
    take_safety: TakeSafety,
    restore: Restore,
    dry_run: bool = False,
) -> RevertReport:
    """Take back what ``request`` names, keeping every change made since (the caller holds the
    writer lock and has finished any interrupted restore)."""
    from snapstore.ops.restore import selector
    from snapstore.ops.restore.recovery import pending as pending_restore

    check_request(request.conflicts, request.actor)
    prefer: Prefer = request.conflicts if request.conflicts in ("ours", "theirs") else None  # type: ignore[assignment]  # narrowed by the test
    markers = request.conflicts == "markers"
    choices = check_choices(request.choices)
    steps, what, revert_of, unknown = read_steps(
        ctx, request.ref, request.range, request.task, request.actor, selector(request.paths),
        request.include_unknown,
    )
    # A conflict in a path an unknown change (left alone) changed too keeps the tree's side:
    # refusing would block "undo only the agent" over, say, a log a backgrounded server grows.
    left = frozenset(p for u in unknown if not u.taken for p in u.paths)
    if dry_run or request.conflicts == "refuse":
        outcomes, current, read = _plan_on_disk(ctx, steps, prefer, markers, choices, left)
        _check(outcomes, what, markers, choices=choices)
        if dry_run:
            report = RevertReport(what, outcomes, True, unknown=unknown)
            with ctx.backend.read() as view:  # a dry run writes nothing, not even that
                pending = pending_restore(view)
            if pending:
                report.warnings.append(pending)
            report.diffs, report.changes = _diffs(outcomes, current, read)
            return report
    safety, recorded, found = take_safety(f"before revert of {what}")
    current = dict(recorded)  # (the revert's plan edits a copy of the tree's entries)
    outcomes = plan(steps, current, ctx.read_stored, prefer=prefer, markers=markers, choices=choices, unknown=left)
    # (With "refuse", the plan on disk above found no conflict: one now means the tree moved.)
    moved = "the tree changed while the revert was prepared; " if request.conflicts == "refuse" else ""
    _check(outcomes, what, markers, moved, choices)
    report = RevertReport(what, outcomes, False, safety, unknown=unknown)
    entries = target_entries(current, outcomes)
    touched = sorted(p for p in entries.keys() | current.keys() if entries.get(p) != current.get(p))
    if not touched:
        return report
    report.target = record_target(
        ctx,
        current,
        entries,
        outcomes,
        parent=safety,
        message=f"revert of {what}",
        # No task and no actor: the revert is not one of the session's changes, so a later
        # revert of the session's (or the user's) changes never takes it back.
        task=None,
        metadata={"revert_of": revert_of, "tool_name": "snapstore revert"},
    )
    # Restore checks each path against what the safety checkpoint above saw before it is touched.
    done = restore(
        report.target, touched, f"before revert of {what}", lambda _m: (safety, current, found)
    )
    report.op_seq = done.op_seq
    report.warnings.extend(done.warnings)
    return report


def _plan_on_disk(
    ctx: StageContext,
    steps: list[RevertStep],
    prefer: Prefer,
    markers: bool,
    choices: dict[bytes, Choice],
    unknown: frozenset[bytes],
) -> tuple[list[PathOutcome], dict[bytes, Entry], Callable[[Entry], bytes]]:
    """The plan against the tree as it is (nothing recorded): the current contents are read
    from disk, the checkpoints' from the store."""
    from snapstore.ops.snapshot import current_tree
    from snapstore.tree import worktree

    # A watching Store (the service) answers from its state; otherwise the tree is walked.
    known = current_tree.current_state(ctx)
    current, _ = known if known is not None else worktree.current_state(ctx)

    # By content id, not path: a followed rename reads the content found at the new name.
    on_disk = {e.ref: e for e in current.values() if e.is_file}

    def read(e: Entry) -> bytes:
        now = on_disk.get(e.ref)
        return ctx.read_disk(now) if now is not None else ctx.read_stored(e)

    outcomes = plan(steps, current, read, prefer=prefer, markers=markers, choices=choices, unknown=unknown)
    return outcomes, current, read


def _check(
    outcomes: list[PathOutcome], what: str, markers: bool, why: str = "", choices: dict[bytes, Choice] | None = None
) -> None:
    """Refuse when a conflict is left that neither markers nor a preferred side settles."""
    # With markers, a conflict that cannot hold markers (a binary file, a type change) leaves
    # the path as it is and the report lists it: the caller asked to go on (for the whole
    # revert, or for that path by its own choice).
    if markers or not any(o.status == "conflict" and o.path not in (choices or {}) for o in outcomes):
        return
    from snapstore.ops.revert.record import refuse

    err = refuse([o for o in outcomes if o.path not in (choices or {})], what)
    raise ConflictError(why + str(err)) if why else err


def _diffs(
    outcomes: list[PathOutcome], current: dict[bytes, Entry], read: Callable[[Entry], bytes]
) -> tuple[dict[bytes, bytes], dict[bytes, Change]]:
    """The unified diff of each path the revert changes (the tree now -> the result), and its
    change with lazy contents (for a viewer that renders diffs itself)."""
    from snapstore.ops.diff import compare, with_loaders
    from snapstore.ops.textdiff import unified

    out: dict[bytes, bytes] = {}
    changes: dict[bytes, Change] = {}
    for o in outcomes:
        old, new = current.get(o.path), o.final.entry
        if old == new or (
            old is not None and new is not None and old[1:4] + old[5:] == new[1:4] + new[5:]
        ):
            continue
        data = o.final.data

        def new_loader(e: Entry, data: bytes | None = data) -> bytes:
            return data if data is not None else read(e)

        for change in with_loaders(
            compare({o.path: old} if old else {}, {o.path: new} if new else {}), read, new_loader
        ):
            out[o.path] = unified(change)
            changes[o.path] = change
    return out, changes


def check_choices(choices: dict[bytes, str] | None) -> dict[bytes, Choice]:
    """The per-path conflict choices, checked (UsageError for a way revert does not know)."""
    out: dict[bytes, Choice] = {}
    for path, way in (choices or {}).items():
        if way not in CHOICES:
            raise UsageError(f"a conflict is settled by one of {', '.join(CHOICES)}, not {way!r}")
        out[path] = way
    return out
