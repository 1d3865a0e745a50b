"""Selective revert: take back what some checkpoints changed, keep every change made since.

The planning is :mod:`snapstore.ops.revert` (three-way per path); applying goes through restore
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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from snapstore.errors import ConflictError, RefError, UsageError
from snapstore.facade.upkeep import UpkeepMixin
from snapstore.records.checkpoint import Checkpoint, load_one
from snapstore.records.manifest import Entry

# The planner, merge and diff are imported where they are used: every command imports the
# Store, and a snapshot from the command line needs none of them.
if TYPE_CHECKING:
    from snapstore.ops.merge import Prefer
    from snapstore.ops.revert import PathOutcome, Step
    from snapstore.ops.revert_record import RevertReport

#: What ``conflicts=`` accepts: refuse (the default), write diff3 markers, or pick a side.
CONFLICT_MODES = ("refuse", "markers", "ours", "theirs")
ACTORS = ("agent", "user")


class RevertMixin(UpkeepMixin):
    """:meth:`revert`: undo chosen checkpoints' changes, merged into the tree as it is now."""

    def revert(
        self,
        ref: str | None = None,
        *,
        range: str | None = None,  # noqa: A002 - the name the CLI and the issue use ("A..B")
        task: str | None = None,
        actor: str | None = None,
        paths: list[str] | None = None,
        conflicts: str = "refuse",
        dry_run: bool = False,
    ) -> RevertReport:
        """Take back what checkpoint ``ref`` changed (against its parent), what the range
        ``"A..B"`` changed (A's tree to B's), or every change of ``task`` (optionally only the
        checkpoints whose metadata ``actor`` matches), keeping the changes made since.

        Per path: untouched since -> goes back; changed since -> three-way line merge;
        overlapping changes, binary or type changes -> conflicts.  ``conflicts`` is
        ``"refuse"`` (ConflictError listing every conflict, nothing changed), ``"markers"``
        (diff3 markers written), ``"ours"`` or ``"theirs"``.  Undoable with :meth:`undo`.
        """
        from snapstore.ops.revert import plan
        from snapstore.ops.revert_record import RevertReport, record_target, target_entries

        if conflicts not in CONFLICT_MODES:
            raise UsageError(f"conflicts must be one of {', '.join(CONFLICT_MODES)}, not {conflicts!r}")
        if actor is not None and actor not in ACTORS:
            raise UsageError(f"the actor must be 'agent' or 'user', not {actor!r}")
        prefer: Prefer = conflicts if conflicts in ("ours", "theirs") else None  # type: ignore[assignment]  # narrowed by the test
        markers = conflicts == "markers"
        from snapstore.ops.restore import selector

        sel = selector(paths)
        with self._lock.held():
            if not dry_run:
                self._recover()
            steps, what, revert_of = self._revert_steps(ref, range, task, actor, sel)
            if dry_run or conflicts == "refuse":
                outcomes, current, read = self._plan_on_disk(steps, prefer, markers)
                _check(outcomes, what, markers)
                if dry_run:
                    report = RevertReport(what, outcomes, True)
                    pending = self.pending_restore()  # a dry run writes nothing, not even that
                    if pending:
                        report.warnings.append(pending)
                    report.diffs = _diffs(outcomes, current, read)
                    return report
            safety, current, found = self._take_safety(f"before revert of {what}")
            outcomes = plan(steps, current, self._store_loader, prefer=prefer, markers=markers)
            _check(outcomes, what, markers, "the tree changed while the revert was prepared; ")
            report = RevertReport(what, outcomes, False, safety)
            entries = target_entries(current, outcomes)
            touched = sorted(p for p in entries.keys() | current.keys() if entries.get(p) != current.get(p))
            if not touched:
                return report
            target = record_target(
                self.context, current, entries, outcomes, parent=safety, message=f"revert of {what}",
                # No task and no actor: the revert is not one of the session's changes, so a
                # later revert of the session's (or the user's) changes never takes it back.
                task=None, metadata={"revert_of": revert_of, "tool_name": "snapstore revert"},
            )
            report.target = target
            from snapstore.ops import restore

            self.hooks.before("before_restore", target=target, paths=touched, dry_run=False, kind="restore")
            done = restore.run(
                self.context, target, touched, dry_run=False, kind="restore",
                message=f"before revert of {what}", take_safety=lambda _message: (safety, current, found),
            )
            done.warnings.extend(self.hooks.after("after_restore", report=done))
            report.op_seq = done.op_seq
            report.warnings.extend(done.warnings)
            return report

    def _plan_on_disk(
        self, steps: list[Step], prefer: Prefer, markers: bool
    ) -> tuple[list[PathOutcome], dict[bytes, Entry], Callable[[Entry], bytes]]:
        """The plan against the tree as it is (nothing recorded): the current contents are read
        from disk, the checkpoints' from the store."""
        from snapstore.ops.revert import plan
        from snapstore.ops.snapshot import incremental
        from snapstore.tree import worktree

        # A watching Store (the service) answers from its state; otherwise the tree is walked.
        known = incremental.current_state(self.context)
        current, _ = known if known is not None else worktree.current_state(self.context)

        # By content id, not path: a followed rename reads the content found at the new name.
        on_disk = {e.ref: e for e in current.values() if e.is_file}

        def read(e: Entry) -> bytes:
            now = on_disk.get(e.ref)
            return self._disk_loader(now) if now is not None else self._store_loader(e)

        return plan(steps, current, read, prefer=prefer, markers=markers), current, read

    def _revert_steps(
        self, ref: str | None, range_: str | None, task: str | None, actor: str | None, sel: Callable[[bytes], bool]
    ) -> tuple[list[Step], str, dict[str, Any]]:
        """The steps to take back (oldest first), a description, and the ``revert_of`` record."""
        given = sum(x is not None for x in (ref, range_, task))
        if given != 1:
            raise UsageError("revert needs exactly one of: a checkpoint, a range A..B, or a task")
        if actor is not None and task is None:
            raise UsageError("--actor needs --task (the session whose changes to take back)")
        if ref is not None and ".." in ref:
            ref, range_ = None, ref
        if ref is not None:
            cp = self.resolve(ref)
            return [self._step_of(cp, sel)], f"checkpoint {cp.short_id}", {"checkpoint": cp.id}
        if range_ is not None:
            a_ref, sep, b_ref = range_.partition("..")
            if not sep or not a_ref or not b_ref:
                raise UsageError(f"bad range {range_!r}: write A..B (two checkpoint references)")
            from snapstore.ops.revert import step_between

            a, b = self.resolve(a_ref), self.resolve(b_ref)
            order = self._log_positions({a.id, b.id})
            if order.get(a.id, 0) > order.get(b.id, 0):
                raise UsageError(f"bad range {range_!r}: {a.short_id} is newer than {b.short_id}")
            # One step from A's tree to B's, not one per checkpoint between: a line changed and
            # changed back inside the range is no change to take back (composing the single
            # checkpoints would report a conflict there if the user edited that line since).
            step = step_between(f"{a.short_id}..{b.short_id}", *self._entries_pair(a.manifest, b.manifest), sel)
            return [step], f"{a.short_id}..{b.short_id}", {"range": [a.id, b.id]}
        # A checkpoint without a parent records the tree the history starts from, not a change:
        # "what the user did" never includes the project's files as first recorded.
        rows = [
            c for c in reversed(self.checkpoints(task=task))
            if c.parent is not None and (actor is None or c.metadata.get("actor") == actor)
        ]
        if not rows:
            who = f" by the {actor}" if actor else ""
            raise RefError(f"no checkpoint{who} in task {task!r}")
        # One step per checkpoint against its parent, oldest first (the planner takes them
        # back newest first): the other actor's checkpoints in between stay.
        steps = [self._step_of(cp, sel) for cp in rows]
        who = f" by the {actor}" if actor else ""
        return steps, f"{len(rows)} checkpoint(s){who} in task {task}", {"task": task, "actor": actor, "checkpoints": [c.id for c in rows]}

    def _step_of(self, cp: Checkpoint, sel: Callable[[bytes], bool]) -> Step:
        from snapstore.ops.revert import step_between

        with self.backend.read() as view:
            parent = None
            if cp.parent and view.get("checkpoints", bytes.fromhex(cp.parent)) is not None:
                parent = load_one(view, bytes.fromhex(cp.parent))
        if parent is None:
            return step_between(cp.short_id, {}, self._manifest_dict(cp.manifest), sel)
        return step_between(cp.short_id, *self._entries_pair(parent.manifest, cp.manifest), sel)

    def _entries_pair(self, old: bytes, new: bytes) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
        from snapstore.ops.diff import manifest_difference

        with self.backend.read() as view:
            return manifest_difference(view.get, old, new)


    def _log_positions(self, ids: set[str]) -> dict[str, int]:
        """The log sequence number of each of ``ids`` (one pass over the log's keys and ids;
        references resolve without it, a range needs the order)."""
        from snapstore.records.checkpoint import key_seq

        wanted = {bytes.fromhex(i) for i in ids}
        out: dict[str, int] = {}
        with self.backend.read() as view:
            for key, cid in view.items("log"):
                if cid in wanted:
                    out[cid.hex()] = key_seq(key)
        return out


def _check(outcomes: list[PathOutcome], what: str, markers: bool, why: str = "") -> None:
    """Refuse when a conflict is left that neither markers nor a preferred side settles."""
    # With markers, a conflict that cannot hold markers (a binary file, a type change) leaves
    # the path as it is and the report lists it: the caller asked to go on.
    if markers or not any(o.status == "conflict" for o in outcomes):
        return
    from snapstore.ops.revert_record import refuse

    err = refuse(outcomes, what)
    raise ConflictError(why + str(err)) if why else err


def _diffs(outcomes: list[PathOutcome], current: dict[bytes, Entry], read: Callable[[Entry], bytes]) -> dict[bytes, bytes]:
    """The unified diff of each path the revert changes: the tree now -> the result."""
    from snapstore.ops.diff import compare, with_loaders
    from snapstore.ops.textdiff import unified

    out: dict[bytes, bytes] = {}
    for o in outcomes:
        old, new = current.get(o.path), o.final.entry
        if old == new or (old is not None and new is not None and old[1:4] + old[5:] == new[1:4] + new[5:]):
            continue
        data = o.final.data

        def new_loader(e: Entry, data: bytes | None = data) -> bytes:
            return data if data is not None else read(e)

        for change in with_loaders(compare({o.path: old} if old else {}, {o.path: new} if new else {}), read, new_loader):
            out[o.path] = unified(change)
    return out
