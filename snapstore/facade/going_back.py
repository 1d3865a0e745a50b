"""Going back: restore, undo, rewind, and finishing an interrupted restore."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from snapstore.errors import (
    RefError,
    UsageError,
)
from snapstore.ops.context import StageContext
from snapstore.records.checkpoint import Checkpoint, load_one, parse_record
from snapstore.storage.backend import JOURNAL_KEY

if TYPE_CHECKING:
    from snapstore.ops.restore import RestoreReport
    from snapstore.ops.restore.recovery import RecoverReport
    from snapstore.records.manifest import Entry
    from snapstore.tree.scan import Found

from snapstore.facade.reading import ReadingMixin


class Rewind(NamedTuple):
    """What :meth:`Store.rewind` did: the checkpoint, the restore report (None when files were
    not asked for) and the conversation to reinstate (None when not asked for)."""

    checkpoint: Checkpoint
    report: RestoreReport | None
    conversation: list[Any] | None


class GoingBackMixin(ReadingMixin):
    """Restore, undo, rewind, recover: journaled, undoable, under the writer lock."""

    def restore(
        self, ref: str, paths: list[str] | None = None, *, dry_run: bool = False
    ) -> RestoreReport:
        """Make the tree (or just ``paths``) equal to checkpoint ``ref``.

        Records the current tree first (a safety checkpoint), so :meth:`undo` can put it back;
        only paths that differ are touched; ignored files, ``.git`` and the store never are.
        With ``dry_run`` nothing changes (tree or store) and the report says what would.
        """
        with self._lock.held():
            self._recover()
            target = self.resolve(ref)
            return self._run_restore(target, paths, dry_run, "restore", f"before restore of {target.short_id}")

    def _run_restore(
        self, target: Checkpoint, paths: list[str] | None, dry_run: bool, kind: str, message: str
    ) -> RestoreReport:
        self.hooks.before("before_restore", target=target, paths=paths, dry_run=dry_run, kind=kind)
        from snapstore.ops import restore

        report = restore.run(
            self._restore_context(), target, paths, dry_run=dry_run, kind=kind, message=message,
            take_safety=self._take_safety,
        )
        report.warnings.extend(self.hooks.after("after_restore", report=report))
        return report

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
            messages = self.conversation(target.id)
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
                self._restore_context(), mode=mode, dry_run=dry_run,
                record_tree=lambda message: self._take_safety(message)[0],
            )

    def _recover(self) -> bool:
        if not self._journal_pending():
            return False
        from snapstore.ops import restore

        restore.recover(self._restore_context())
        return True

    def _restore_context(self) -> StageContext:
        # The same context as snapshots: the safety checkpoint then uses the manifest memo.
        return self.context

    def _take_safety(self, message: str) -> tuple[Checkpoint, dict[bytes, Entry], dict[bytes, Found]]:
        from snapstore.ops import snapshot
        from snapstore.records.checkpoint import SAFETY

        cp_id, packed, result = snapshot.take(self.context, message=message, kind=SAFETY, skip_unchanged=True)
        cp = parse_record(cp_id, packed)
        return cp, {e.path: e for e in result.entries}, {f.path: f for f in result.found}

    def _journal_pending(self) -> bool:
        with self.backend.read() as view:
            return view.get("journal", JOURNAL_KEY) is not None
