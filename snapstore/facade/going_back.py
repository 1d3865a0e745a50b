"""Going back: restore, undo, rewind, revert, and finishing an interrupted restore.

Each method takes the writer lock, finishes an interrupted restore, runs the library's hooks and
calls one stage (:mod:`snapstore.ops.restore`, :mod:`snapstore.ops.revert`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from snapstore.errors import RefError, UsageError
from snapstore.facade.base import StoreBase
from snapstore.records.checkpoint import Checkpoint, load_one

if TYPE_CHECKING:
    from snapstore.ops.restore import RestoreReport
    from snapstore.ops.restore.recovery import RecoverReport
    from snapstore.ops.revert import RevertReport, UnknownChange


class Rewind(NamedTuple):
    """What :meth:`Store.rewind` did: the checkpoint, the restore report (None when files were
    not asked for) and the conversation to reinstate (None when not asked for)."""

    checkpoint: Checkpoint
    report: RestoreReport | None
    conversation: list[Any] | None


class GoingBackMixin(StoreBase):
    """Restore, undo, rewind, revert, recover: journaled, undoable, under the writer lock."""

    def restore(
        self, ref: str, paths: list[str] | None = None, *, dry_run: bool = False
    ) -> RestoreReport:
        """Make the tree (or just ``paths``) equal to checkpoint ``ref``.

        Records the current tree first (a safety checkpoint), so :meth:`undo` can put it back;
        only paths that differ are touched; ignored files, ``.git`` and the store never are.
        With ``dry_run`` nothing changes (tree or store) and the report says what would.
        """
        return self._restore(ref, paths, dry_run=dry_run)

    def undo(self, *, dry_run: bool = False) -> RestoreReport:
        """Put the tree back as it was before the last restore or undo (undo twice = redo)."""
        with self._lock.held():
            self._recover()
            ops = self.operations()
            if not ops:
                raise RefError("nothing to undo: no restore has been done in this store")
            last = ops[0]
            with self.backend.read() as view:
                before = load_one(view, bytes.fromhex(last.before))
            return self._run_restore(
                before, last.paths, dry_run, "undo", f"before undo of operation {last.seq}"
            )

    def rewind(
        self,
        ref: str,
        *,
        files: bool = True,
        conversation: bool = True,
        paths: list[str] | None = None,
        dry_run: bool = False,
        task: str | None = None,
    ) -> Rewind:
        """Go back to checkpoint ``ref``: its files (through the undoable restore), its
        conversation (returned for the agent to reinstate), or both.

        Asking for the conversation of a checkpoint that has none fails with RefError before
        anything is touched.
        """
        if not files and not conversation:
            raise UsageError("rewind needs files, conversation or both")
        target = self.resolve(ref, task=task)
        messages = None
        if conversation:
            messages = self._conversation_of(target)
            if messages is None:
                raise RefError(f"no conversation stored with checkpoint {target.short_id}")
        report = self.restore(target.id, paths, dry_run=dry_run) if files else None
        return Rewind(target, report, messages)

    def recover(self, *, mode: str = "forward", dry_run: bool = False) -> RecoverReport:
        """Finish (``"forward"``), roll back (``"back"``) or drop (``"abandon"``: the tree is
        recorded as it is first) a restore a crash interrupted; returns a restore.RecoverReport
        (``pending`` False when there was none).  Refuses (ConflictError) when a journaled path
        changed since the crash."""
        from snapstore.ops import restore

        with self._lock.held():
            return restore.recover(
                self.context, mode=mode, dry_run=dry_run,
                record_tree=self._record_tree,
            )

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
        include_unknown: bool = False,
        choices: dict[bytes, str] | None = None,
    ) -> RevertReport:
        """Take back what checkpoint ``ref`` changed (against its parent), what the range
        ``"A..B"`` changed (A's tree to B's), or every change of ``task`` (optionally only the
        checkpoints whose metadata ``actor`` matches), keeping the changes made since.

        Per path: untouched since -> goes back; changed since -> three-way line merge;
        overlapping changes, binary or type changes -> conflicts.  ``conflicts`` is
        ``"refuse"`` (ConflictError listing every conflict, nothing changed), ``"markers"``
        (diff3 markers written), ``"ours"`` or ``"theirs"``.  Undoable with :meth:`undo`.
        With ``actor``, the task's checkpoints labelled ``unknown`` (no event vouches for who made
        them) are left alone and listed in ``report.unknown``; ``include_unknown`` takes them too.
        A range with ``actor`` takes back each of that actor's checkpoints after A up to B (log
        order), like a task's.  ``choices`` settles some paths' conflicts on their own (path ->
        ``"ours"``, ``"theirs"`` or ``"markers"``), over ``conflicts``.
        The stage is :mod:`snapstore.ops.revert`.
        """
        from snapstore.ops import revert as revert_op

        request = revert_op.RevertRequest(ref, range, task, actor, paths, conflicts, include_unknown, choices)
        with self._lock.held():
            if not dry_run:
                self._recover()
            return revert_op.run(
                self.context, request, dry_run=dry_run, take_safety=self._take_safety,
                restore=lambda target, touched, message, safety: self._run_restore(
                    target, touched, False, "restore", message, safety
                ),
            )

    def unknown_changes(self, task: str, paths: list[str] | None = None) -> list[UnknownChange]:
        """The checkpoints of ``task`` labelled ``unknown`` and the (selected) paths each
        changed: what a revert of the task by actor would list and leave alone."""
        from snapstore.ops.restore import selector
        from snapstore.ops.revert.steps import task_unknown

        return task_unknown(self.context, task, selector(paths))
