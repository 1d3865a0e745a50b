"""What every part of the Store shares: its attributes, loading and resolving records, and
the two steps every writer may need (finishing an interrupted restore, a safety checkpoint)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snapstore.hooks import HookRegistry
from snapstore.ops.context import StageContext
from snapstore.records import manifest
from snapstore.records.checkpoint import Checkpoint, load_all, parse_record
from snapstore.records.manifest import Entry
from snapstore.storage.backend import JOURNAL_KEY, Backend

if TYPE_CHECKING:
    from snapstore.ops.restore import RestoreReport, TakeSafety
    from snapstore.ops.snapshot.result import SnapshotResult
    from snapstore.records.oplog import Operation
    from snapstore.tree.scan import Found


class StoreBase:
    """The Store's state (set by :class:`snapstore.store.Store`), record lookup and the steps
    the parts share.  The parts (reading, going back, upkeep) are siblings over this base."""

    backend: Backend
    #: Absolute path of the working tree, and the same as bytes.
    root: str
    root_bytes: bytes
    #: The store directory (None for an in-memory store).
    store_dir: str | None
    compression_level: int
    #: Tree-relative paths never snapshotted or restored (the store itself when inside).
    excluded: frozenset[bytes]
    #: What the stages are given instead of the Store.
    context: StageContext
    hooks: HookRegistry
    _lock: Any
    def checkpoints(self, *, task: str | None = None, include_safety: bool = False) -> list[Checkpoint]:
        """Checkpoints newest first, as ``list`` shows them (safety ones only if asked)."""
        all_, _ = self._load()
        rows = list(reversed(all_))
        if not include_safety:
            rows = [c for c in rows if not c.is_safety]
        if task is not None:
            rows = [c for c in rows if c.task == task]
        return rows

    def resolve(self, ref: str, *, task: str | None = None) -> Checkpoint:
        """The checkpoint ``ref`` names (see :mod:`snapstore.records.refs`).

        Reads only the records the reference reaches (``latest~N`` reads N+1 of them, a tag or
        an id one), so resolving costs the same at 10 and at 10,000 checkpoints.
        """
        from snapstore.records.history import History

        with self.backend.read() as view:
            history = History(view)
            cp = history.resolve(ref, task)
            tags = history.tags_of({cp.id})
        return cp._replace(tags=tags.get(cp.id, ()))

    def _load(self) -> tuple[list[Checkpoint], dict[str, str]]:
        with self.backend.read() as view:
            all_ = load_all(view)
            tags = {k.decode("utf-8", "replace"): v.hex() for k, v in view.items("tags")}
        by_id: dict[str, list[str]] = {}
        for name, cid in tags.items():
            by_id.setdefault(cid, []).append(name)
        all_ = [c._replace(tags=tuple(sorted(by_id.get(c.id, ())))) for c in all_]
        return all_, tags

    def _manifest_dict(self, mid: bytes) -> dict[bytes, Entry]:
        with self.backend.read() as view:
            return manifest.load(view.get, mid)

    def _conversation_of(self, cp: Checkpoint) -> list[Any] | None:
        if cp.conversation is None:
            return None
        from snapstore.records import conversation

        with self.backend.read() as view:
            return conversation.read(view.get, cp.conversation)

    def operations(self) -> list[Operation]:
        """The operation log (restores and undos), newest first."""
        from snapstore.records.oplog import Operation

        with self.backend.read() as view:
            return [Operation.parse(key, value) for key, value in view.items("oplog", reverse=True)]

    def pending_restore(self) -> str | None:
        """A warning when an interrupted restore is pending (read-only commands show it)."""
        with self.backend.read() as view:
            if view.get("journal", JOURNAL_KEY) is None:
                return None  # the common case, without importing the restore package
            from snapstore.ops.restore.recovery import pending

            return pending(view)

    def _recover(self) -> bool:
        """Finish an interrupted restore (the caller holds the writer lock); whether there was one."""
        with self.backend.read() as view:
            if view.get("journal", JOURNAL_KEY) is None:
                return False
        from snapstore.ops import restore

        restore.recover(self.context)
        return True

    def _take_safety(self, message: str) -> tuple[Checkpoint, Mapping[bytes, Entry], Mapping[bytes, Found]]:
        """Record the tree as a safety checkpoint (unless unchanged): it, its entries, what the
        walk found.  The same context as snapshots, so it uses the manifest memo."""
        from snapstore.ops.restore.after import by_path

        cp, result = self._record(message)
        return cp, *by_path(self.context, result)

    def _record_tree(self, message: str) -> Checkpoint:
        """Record the tree as :meth:`_take_safety` does, for a caller that needs only the
        checkpoint (not every entry and walk record by path: two dicts of the whole tree)."""
        return self._record(message)[0]

    def _record(self, message: str) -> tuple[Checkpoint, SnapshotResult]:
        from snapstore.ops import snapshot
        from snapstore.records.checkpoint import SAFETY

        cp_id, packed, result = snapshot.take(self.context, message=message, kind=SAFETY, skip_unchanged=True)
        return parse_record(cp_id, packed), result

    def _restore(self, ref: str, paths: list[str] | None, *, dry_run: bool) -> RestoreReport:
        """:meth:`snapstore.Store.restore`'s body (pull restores through it too)."""
        with self._lock.held():
            self._recover()
            target = self.resolve(ref)
            return self._run_restore(target, paths, dry_run, "restore", f"before restore of {target.short_id}")

    def _run_restore(
        self, target: Checkpoint, paths: list[str] | list[bytes] | None, dry_run: bool, kind: str, message: str,
        take_safety: TakeSafety | None = None,
    ) -> RestoreReport:
        self.hooks.before("before_restore", target=target, paths=paths, dry_run=dry_run, kind=kind)
        from snapstore.ops import restore

        report = restore.run(
            self.context, target, paths, dry_run=dry_run, kind=kind, message=message,
            take_safety=take_safety or self._take_safety,
        )
        if report.op_seq is not None:
            # The tree as the restore left it, recorded (hidden): the next checkpoint's parent
            # (in the service: the tree read before the answer, the record written after it).
            from snapstore.ops.restore.after import record_after

            label = f"after {kind} to {target.short_id}"
            why = record_after(self.context, lambda: self._record_tree(label), self._lock, label)
            if why is not None:
                report.warnings.append(f"the tree after the {kind} was not recorded: {why}")
        report.warnings.extend(self.hooks.after("after_restore", report=report))
        return report
