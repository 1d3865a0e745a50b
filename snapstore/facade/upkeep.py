"""Keeping a store: retention (prune, delete), gc, stats, configuration, relocation."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from snapstore.errors import UsageError
from snapstore.facade.base import StoreBase
from snapstore.records.checkpoint import Checkpoint

if TYPE_CHECKING:
    from snapstore.ops.gc import GcReport
    from snapstore.ops.maintenance import MaintenanceReport
    from snapstore.ops.repair import RepairReport
    from snapstore.ops.retention import PruneReport, RetentionRules
    from snapstore.ops.stats import StoreStats
    from snapstore.ops.upgrade import UpgradeReport


class UpkeepMixin(StoreBase):
    """prune, delete, gc, stats, config, relocate."""

    def prune(
        self,
        *,
        keep_last: int | None = None,
        keep_within: str | int | None = None,
        keep_tagged: bool = False,
        task: str | None = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Remove the checkpoints no keep rule keeps; returns a retention.PruneReport.

        ``keep_within`` is a duration (``"30m"``, ``"12h"``, ``"7d"``) or seconds.  Checkpoints
        that ``undo`` can reach (the newest retention.UNDO_DEPTH operations) and those of a
        pending restore are never removed.  Their data stays until :meth:`gc`.
        """
        from snapstore.ops import retention

        if keep_last is not None:
            keep_last = retention.parse_count(keep_last)
        if isinstance(keep_within, str):
            keep_within = retention.parse_duration(keep_within)
        elif keep_within is not None and keep_within <= 0:
            raise UsageError("--keep-within must be longer than zero")
        policy = retention.RetentionRules(keep_last, keep_within, bool(keep_tagged))
        if not policy.active:
            raise UsageError("prune needs a rule: --keep-last, --keep-within or --keep-tagged")
        with self._lock.held():
            self._recover()
            return self._prune(policy, task, dry_run)

    def _prune(self, policy: RetentionRules, task: str | None, dry_run: bool) -> PruneReport:
        from snapstore.ops import retention

        all_, _ = self._load()
        with self.backend.read() as view:
            guarded = retention.protected(view)
        report = retention.select(all_, policy, guarded, task=task)
        report.dry_run = dry_run
        if not dry_run:
            retention.remove(self.backend, report.removed)
        return report

    def maintain_in_background(self, values: dict[str, str] | None = None) -> bool:
        """Start the due maintenance passes in a process of their own, when allowed (config
        ``maintenance.detach``, :mod:`snapstore.ops.background`); whether one started.  The
        idle service calls this (its request loop never compresses); a snapshot's check too
        (:mod:`snapstore.ops.schedule`)."""
        from snapstore.ops import schedule

        values = values if values is not None else self.config()
        return schedule.start_detached(self.backend, values, self.store_dir, self.root)

    def maintain(
        self,
        *,
        min_packs: int = 2,
        lock_timeout: float | None = None,
        max_chunks: int | None = None,
        stop: Callable[[], bool] | None = None,
        full: bool = True,
    ) -> MaintenanceReport | None:
        """One maintenance pass now: gather the small loose packs into consolidated ones.

        The plan is read without the writer lock; each step of the moves holds it (waiting
        ``lock_timeout`` seconds at most, the store's timeout by default: LockedError).  None
        when fewer than ``min_packs`` small loose packs exist, or the store holds more than
        ``max_chunks`` chunks (default: ``maintenance.SERVICE_CHUNKS``).  ``stop()``, asked
        before each step, ends the pass early.  The resident service calls this when idle
        (``maintenance.auto``), stopping as soon as a request waits.

        With ``full`` (the default), a small store whose packs have grown by a quarter since
        the last full pass (or gc) gets the full pass instead: every pack rewritten in gc's
        order and level (:func:`snapstore.ops.maintenance.plan_full`).  A pass that finishes
        and leaves most of the file free pages compacts it (``report.compacted``).
        """
        from snapstore.ops import schedule

        return schedule.one_pass(
            self.backend, self.compression_level, lambda: self._lock.held(lock_timeout),
            min_packs=min_packs, max_chunks=max_chunks, stop=stop, full=full,
        )

    def maintain_all(self, *, max_passes: int = 64) -> list[MaintenanceReport]:
        """Run :meth:`maintain` until no pass is due (what an idle service does over time);
        the reports of the passes that ran.

        One at a time per store: ``<store>/maintenance.lock`` is taken first, and LockedError
        says another ``maintain`` (or a detached pass, :mod:`snapstore.ops.background`) runs.
        Each step holds the writer lock only for its write, so checkpoints go on meanwhile.
        """
        from snapstore.ops import schedule

        return schedule.every_pass(self.backend, self.store_dir, self.maintain, self._lock.held, max_passes)

    def follow_compaction(self) -> None:
        """Follow a compaction another process made (one read transaction): this process then
        lets go of the generation it replaced, which the compacting process deletes.  The idle
        service calls it every second."""
        with self.backend.read():
            pass

    def delete(self, ref: str) -> Checkpoint:
        """Remove checkpoint ``ref`` (its record, log entry and tags); its data stays until gc.

        Later checkpoints keep working.  Refuses (UsageError) a checkpoint that ``undo`` or a
        pending restore needs.
        """
        from snapstore.ops import retention

        with self._lock.held():
            self._recover()
            cp = self.resolve(ref)
            with self.backend.read() as view:
                guarded = retention.protected(view)
            if cp.id in guarded:
                raise UsageError(f"checkpoint {cp.short_id} cannot be deleted: {guarded[cp.id]}")
            retention.remove(self.backend, [cp])
            return cp

    def repair(self, progress: Callable[[int, int], None] | None = None) -> RepairReport:
        """Verify, then store again every damaged chunk the working tree still holds (a file,
        or part of one, unchanged since): new packs whose entries replace the damaged ones, so
        every checkpoint naming those chunks reads them again.  The report has verify's
        findings before and after; what the tree no longer holds stays damaged
        (:mod:`snapstore.ops.repair`).  Touches no file of the tree.

        The verify runs without the writer lock (a reader: snapshots go on meanwhile, and a
        store with nothing to repair never blocks an agent's hooks); the lock is taken only
        when there is damage, to re-check what still is and repair it."""
        from snapstore.ops import repair, verify

        found = verify.run(self.backend, progress, self.context.excluded)
        if not repair.damaged_chunks(found) and not repair.damaged_packs(found):
            return repair.RepairReport(found, None, 0, 0, 0)
        with self._lock.held():
            return repair.run(self.context, before=found)

    def gc(
        self, *, compact: bool = False, dry_run: bool = False, repack_level: int | None = None
    ) -> GcReport:
        """Remove the chunks, streams and manifests no checkpoint reaches; returns a gc.GcReport.

        Holds the writer lock throughout, so no snapshot can be writing meanwhile.  With
        ``compact`` the LMDB file is rewritten so the disk space really comes back.  With
        ``repack_level`` every pack is rewritten at that zstd level (e.g. 9: ~8% smaller than
        the default 3 for ~3x the CPU, once, when the machine is idle).  Config
        ``gc.consolidate`` (``full`` by default) says whether the packs are gathered in path
        order (:mod:`snapstore.ops.consolidate`).
        """
        from snapstore.ops import gc

        with self._lock.held():
            self._recover()
            values = self.config()
            return gc.run(
                self.backend,
                compact=compact and not dry_run,
                dry_run=dry_run,
                repack_below=float(values["gc.repack-below"]),
                level=self.compression_level if repack_level is None else repack_level,
                repack_every=repack_level is not None,
                consolidation=values["gc.consolidate"],
            )

    def upgrade(self, progress: Callable[[int, int], None] | None = None) -> UpgradeReport:
        """Convert a format-1 store to format 2 (packs); returns an upgrade.UpgradeReport.

        Holds the writer lock throughout.  Crash-safe and resumable: every step is one
        transaction, and each chunk is read back from its new pack before its old value goes.
        """
        from snapstore.ops import upgrade

        with self._lock.held():
            self._recover()
            report = upgrade.run(self.backend, self.compression_level, progress)
        return report

    @property
    def format_note(self) -> str | None:
        """What every command but ``upgrade`` says about a format-1 store (None otherwise)."""
        if self.format_version != 1:
            return None
        return (
            "this store is in storage format 1 (it works as before); 'snapstore upgrade' "
            "converts it to format 3, which is smaller"
        )

    @property
    def format_version(self) -> int:
        """The store's format (1: one value per chunk; 2: packs; 3: and compact conversations)."""
        with self.backend.read() as view:
            fmt = view.get("meta", b"format") or b"0"
        return int(fmt) if fmt.isdigit() else 0

    def stats(self) -> StoreStats:
        """Counts and sizes of the store (a stats.StoreStats)."""
        from snapstore.ops import stats

        all_, _ = self._load()
        return stats.collect(self.backend, all_)

    def config(self) -> dict[str, str]:
        """Every configuration key with its value (the default when unset)."""
        from snapstore.ops import retention

        with self.backend.read() as view:
            return retention.read_config(view)

    def service_autostart(self) -> float | None:
        """``service.idle-timeout`` when a command run in-process should start the service,
        else None (``service.autostart``, on by default, and the environment's opt-outs:
        :data:`snapstore.ops.schedule.AUTOSTART_ENV`, then ``CI``).

        Two raw reads: the click-free snapshot asks this after every checkpoint and must not
        import the configuration module (a damaged value counts as the default)."""
        from snapstore.ops.schedule import autostart_wanted
        from snapstore.storage.backend import CONFIG_PREFIX

        with self.backend.read() as view:
            configured = view.get("meta", CONFIG_PREFIX + b"service.autostart")
            raw = view.get("meta", CONFIG_PREFIX + b"service.idle-timeout")
        if not autostart_wanted(configured):
            return None
        try:
            return float(raw) if raw is not None else 1800.0
        except ValueError:
            return 1800.0

    def config_get(self, key: str) -> str:
        """The value of configuration ``key`` (UsageError for an unknown key)."""
        from snapstore.ops import retention

        retention.config_key(key)
        return self.config()[key]

    def config_set(self, key: str, value: str | int | None) -> str:
        """Set configuration ``key`` (``None`` or ``"off"`` resets it); returns the new value."""
        from snapstore.ops import retention

        mkey = retention.config_key(key)
        stored = None if value is None else retention.normalise(key, str(value))
        with self._lock.held():
            with self.backend.write() as batch:
                if stored is None:
                    batch.delete("meta", mkey)
                else:
                    batch.put("meta", mkey, stored.encode())
            self.backend.sync()
        if key == "storage.delta-depth":  # the open store's snapshots follow it at once
            self.context.delta_depth = int(self.config_get(key))
        if key == "storage.durability":  # and so do its commits (an explicit open argument too)
            setter = getattr(self.backend, "set_durability", None)
            if setter is not None:
                setter(self.config_get(key))
        return self.config_get(key)

    def relocate(self, new_root: str | os.PathLike[str]) -> str:
        """Re-point a store kept outside its tree at the tree's new place; returns the old root.

        Commands refuse a tree that is not the store's root (a copied store must never read or
        rewrite the original tree), so a moved or copied tree is adopted explicitly.  The stat
        cache is cleared: it describes the old tree's inodes.
        """
        from snapstore.storage import opening

        new = opening.relocatable(self.backend, self.store_dir, os.fspath(new_root))
        old = self.root
        with self._lock.held():
            opening.relocate(self.backend, new)
        self.root = new
        self.root_bytes = os.fsencode(new)
        self.context.root = new  # the stages' view of the tree follows
        return old
