"""A remote's published history: ``remote log``, ``list --remote --ref``, ``remote forget`` and
``remote ref delete`` (docs/remote.md, "History and retention").

``remote log`` and ``list --ref`` read a browsing cache (:meth:`snapstore.Store.remote_view`),
which takes up every bundle of every ref's history once; forget and ref delete publish forget
records (remote/retention.py) and change nothing else on the remote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from snapstore.facade.base import StoreBase
from snapstore.records.checkpoint import Checkpoint

if TYPE_CHECKING:
    from snapstore.remote.retention import ForgetReport
    from snapstore.remote.state import RemoteConfig, Taken
    from snapstore.remote.transport import CountingTransport


class RemoteHistoryMixin(StoreBase):
    """What a remote's history holds and who pushed it; retention."""

    if TYPE_CHECKING:
        def _connect(self, name: str, *, writing: bool = False, empty_ok: bool = False) -> tuple[RemoteConfig, CountingTransport]: ...

    # -- on a browsing cache (the remote view) -------------------------------------------------

    def remote_pushes(self, name: str = "origin", ref: str | None = None) -> list[Taken]:
        """The pushes of remote ``name`` this store took up (oldest first within a ref):
        who pushed which checkpoints, when.  On a remote view that is every push of every
        ref's history (``ref``: that ref's only)."""
        from snapstore.remote import layout, state

        cfg = state.get_config(self.backend, name)
        return state.taken(self.backend, cfg.rid, layout.log_prefix(ref) if ref is not None else "")

    def numbered_in_ref(
        self, name: str, ref: str, *, task: str | None = None, include_safety: bool = False, limit: int | None = None,
    ) -> list[tuple[int | None, Checkpoint]]:
        """What ``list --remote NAME --ref REF`` shows: the checkpoints of ref ``ref``'s
        history, newest first, numbered as in the whole remote view."""
        ids = {c.hex() for t in self.remote_pushes(name, ref) for c in t.checkpoints}
        rows = [r for r in self.numbered_checkpoints(task=task, include_safety=include_safety) if r[1].id in ids]  # type: ignore[attr-defined]
        return rows[:limit] if limit is not None else rows

    # -- retention -----------------------------------------------------------------------------

    def remote_forget(
        self, remote: str = "origin", refs: Sequence[str] = (), *, keep_last: int | None = None,
        keep_within_s: float | None = None, task: str | None = None, dry_run: bool = False,
    ) -> ForgetReport:
        """Take out of each ref's history (``refs``, default every ref) the pushes none of whose
        checkpoints the rules keep: the ``keep_last`` newest, those less than ``keep_within_s``
        older than the newest, and any not of ``task`` when one is named.  Publishes one forget
        record per ref (nothing with ``dry_run``); ``remote gc`` then reclaims what only they held."""
        from snapstore.remote import refs as remote_refs
        from snapstore.remote import retention
        from snapstore.remote.retention import ForgetReport

        rules = retention.Rules(keep_last, None if keep_within_s is None else int(keep_within_s * 1e9), task)
        rules.check()
        cfg, t = self._connect(remote, writing=not dry_run, empty_ok=dry_run)
        report = ForgetReport(cfg.name, dry_run)
        try:
            for name in list(refs) or remote_refs.names(t):
                report.refs.append(retention.forget(t, name, rules, backend=self.backend, cfg=cfg, dry_run=dry_run))
        finally:
            report.requests = t.requests
        self._note_forgotten(cfg, report)
        return report

    def remote_ref_delete(self, ref: str, *, remote: str = "origin") -> ForgetReport:
        """Remove remote ref ``ref`` and take its whole history out (a forget record); ``remote
        gc`` then reclaims what only it held.  RefError when there is no such ref."""
        from snapstore.remote import retention
        from snapstore.remote.retention import ForgetReport, who

        cfg, t = self._connect(remote, writing=True)
        report = ForgetReport(cfg.name, False)
        try:
            report.refs.append(retention.delete_ref(t, ref, writer=cfg.writer, who=who(self.backend)))
        finally:
            report.requests = t.requests
        self._note_forgotten(cfg, report)
        return report

    def _note_forgotten(self, cfg: RemoteConfig, report: ForgetReport) -> None:
        """A push from this store names no forgotten bundle again (its inline data may be
        reclaimed)."""
        from snapstore.remote import state

        keys = [k for r in report.refs if r.record for k in r.bundles]
        if not keys:
            return
        with self._lock.held(), self.backend.write() as batch:
            for key in keys:
                state.put_lost(batch, cfg.rid, key)
