"""Keeping a store: retention (prune, delete), gc, stats, configuration, relocation."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from snapstore.errors import TreeIOError, UsageError
from snapstore.facade.base import StoreBase
from snapstore.records.checkpoint import Checkpoint

if TYPE_CHECKING:
    from snapstore.ops.gc import GcReport
    from snapstore.ops.maintenance import MaintenanceReport
    from snapstore.ops.repair import RepairReport
    from snapstore.ops.retention import PruneReport, RetentionRules
    from snapstore.ops.stats import StoreStats
    from snapstore.ops.upgrade import UpgradeReport



#: ``maintenance_due.GROWTH * maintenance_due.GROWTH_FLOOR``, written out so that a snapshot's check of
#: a small store imports nothing (tests/test_maintenance_size.py checks they agree).
FILE_GROWN_FLOOR = 80 << 10

def old_generations(store_dir: str) -> bool:
    """Whether the store directory still holds a generation its ``CURRENT`` does not name (see
    :mod:`snapstore.storage.lmdb_generations`)."""
    try:
        with open(os.path.join(store_dir, "CURRENT")) as f:
            current = f.read().strip()
        names = os.listdir(store_dir)
    except OSError:
        return False
    return any(n != current and (n.startswith("gen-") or n == "data.mdb") for n in names)

#: The environment variable that overrides ``service.autostart``: ``0``/``false``/``no``/``off``
#: never start the service from a command, ``1``/``true``/``yes``/``on`` always may.
AUTOSTART_ENV = "SNAPSTORE_AUTOSTART"


def autostart_wanted(configured: bytes | None) -> bool:
    """Whether a command run in-process starts the store's service, given the stored
    ``service.autostart`` (None: unset, the default: on).  :data:`AUTOSTART_ENV` wins when set;
    else a CI run (``CI`` set to anything but ``0``/``false``, as CI systems do) does not start
    one, since nobody runs the next command there; else the configuration decides."""
    off = ("0", "false", "no", "off")
    forced = os.environ.get(AUTOSTART_ENV, "").strip().lower()
    if forced:
        return forced not in off
    if os.environ.get("CI", "").strip().lower() not in ("", *off):
        return False
    return configured != b"false"

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

    def _auto_retention(self) -> list[str]:
        """Apply the store's retention policy after a snapshot (lock held); returns warnings."""
        from snapstore.errors import SnapstoreError

        with self.backend.read() as view:
            # No retention key stored (retention.CONFIG_PREFIX + "retention.") means every
            # default, and the defaults keep everything: then not even the retention module is
            # imported (its import would be part of every snapshot's cost).
            if next(iter(view.items("meta", prefix=b"config:retention.")), None) is None:
                return []
        from snapstore.ops import retention

        try:
            values = self.config()
            policy = retention.policy_from_config(values)
            if policy is None:
                return []
            report = self._prune(policy, None, False)
            if report.removed and values.get("retention.gc") == "true":
                # imported only here: otherwise its import is part of every snapshot's cost
                from snapstore.ops import gc

                gc.run(
                    self.backend,
                    repack_below=float(values["gc.repack-below"]),
                    level=self.compression_level,
                    consolidation=values["gc.consolidate"],
                )
        except SnapstoreError as exc:
            return [f"automatic retention failed: {exc}"]
        return []

    def _auto_maintenance(self, in_checkpoint: bool = True) -> list[str]:
        """After a snapshot (lock held): every ``maintenance.checkpoints`` checkpoints, gather
        the small loose packs when at least ``maintenance.loose-packs`` have piled up (or,
        detached, run every pass due and compact the file: :meth:`maintain_all`); whenever the
        store file has grown by ``maintenance_due.GROWTH`` since the last maintenance, start the
        detached pass if one is due (nothing in-process: only compaction gives the bytes back).
        Not ``in_checkpoint`` (the resident service, which maintains the store when idle and
        never reads a pass's plan in a checkpoint): only a grown file starts the detached pass,
        so a service that is never idle still keeps the store near its compacted size.

        Four raw reads and a ``stat`` on the fast path: the maintenance module is imported only when a check
        is due (its keys are written out here; a test checks they agree)."""
        from snapstore.storage.backend import CONFIG_PREFIX

        with self.backend.read() as view:
            count = view.count("log")
            raw_at = view.get("meta", b"maintenance:at")
            if view.get("meta", CONFIG_PREFIX + b"maintenance.auto") == b"false":
                return []
            raw_every = view.get("meta", CONFIG_PREFIX + b"maintenance.checkpoints")
            raw_size = view.get("meta", b"maintenance:size")
        try:
            at = int(raw_at) if raw_at is not None else 0
            every = int(raw_every) if raw_every is not None else 32
        except ValueError:
            at, every = 0, 32
        seq: int | None = count
        if not in_checkpoint or at <= count < at + every:
            if not self._file_grown(raw_size):
                return []
            seq = None  # (due by size: the checkpoints' schedule stays as it was)
        from contextlib import nullcontext

        from snapstore.errors import SnapstoreError
        from snapstore.ops import maintenance

        try:
            values = self.config()
            if self.maintain_in_background(values):
                self._maintained(seq)
                return []
            if not in_checkpoint or seq is None:
                # Due by size alone, and not detached (or nothing due): the loose-pack pass a
                # checkpoint may run compacts nothing, so it is not run for growth; the next
                # check is at the next growth (the service's idle pass does the rest).
                self._maintained(None)
                return []
            stop = maintenance.stop_after(int(values["maintenance.budget-ms"]) / 1000)
            found = maintenance.plan(
                self.backend,
                min_packs=int(values["maintenance.loose-packs"]),
                max_chunks=maintenance.SNAPSHOT_CHUNKS,
            )
            if found is not None:
                maintenance.run(
                    self.backend, found, level=self.compression_level, locked=nullcontext, stop=stop
                )
            self._maintained(seq)
        except SnapstoreError as exc:
            return [f"automatic maintenance failed: {exc}"]
        return []

    def _file_grown(self, raw_size: bytes | None) -> bool:
        """Whether the store file outgrew its size at the last maintenance (one ``stat``; the
        rule is :func:`snapstore.ops.maintenance_due.grown`, imported only when it may hold)."""
        size = self.backend.disk_size()
        if size <= FILE_GROWN_FLOOR:  # (not even the module's import: the snapshot's fast path)
            return False
        if raw_size is None:
            # The first check past the floor (a first checkpoint, or a store from before the
            # size was kept) sets the base: the growth is what comes after.
            self._maintained(None)
            return False
        from snapstore.ops import maintenance_due

        return maintenance_due.grown(size, raw_size)

    def _maintained(self, count: int | None = None) -> None:
        """Record that maintenance ran: the log's record count (``count``, after a snapshot's
        check) and the store file's size (the base of :meth:`_file_grown`)."""
        from snapstore.ops import maintenance_due

        with self.backend.write() as batch:
            if count is not None:
                batch.put("meta", b"maintenance:at", str(count).encode())  # (maintenance.SEQ_KEY)
            batch.put("meta", maintenance_due.SIZE_KEY, str(self.backend.disk_size()).encode())

    def maintain_in_background(self, values: dict[str, str] | None = None) -> bool:
        """Start the due maintenance passes in a process of their own, when allowed (config
        ``maintenance.detach``, :mod:`snapstore.ops.background`); whether one started.  Due: the
        full pass, or ``maintenance.loose-packs`` small loose packs.  A snapshot's check calls
        this (the pass it would run within its budget runs there without one, and the file is
        compacted after), and so does the idle service (its request loop never compresses)."""
        from snapstore.ops import background, maintenance

        values = values if values is not None else self.config()
        if self.store_dir is None or not background.enabled(values["maintenance.detach"]):
            return False
        sizes = list(self.backend.value_sizes("packs"))  # (read once for both questions)
        due = (
            maintenance.full_due(self.backend, sizes=sizes)
            or len(maintenance.small_loose(self.backend, sizes)) >= max(2, int(values["maintenance.loose-packs"]))
            or self._mostly_free()
        )
        return due and background.spawn(self.store_dir, self.root) is not None

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
        from snapstore.ops import maintenance

        limit = maintenance.SERVICE_CHUNKS if max_chunks is None else max_chunks
        found = maintenance.plan_full(self.backend, limit) if full else None
        if found is None:
            found = maintenance.plan(self.backend, min_packs=min_packs, max_chunks=limit)
        if found is None:
            return None
        report = maintenance.run(
            self.backend,
            found,
            level=self.compression_level,
            locked=lambda: self._lock.held(lock_timeout),
            stop=stop,
        )
        if not report.stopped and not (stop is not None and stop()) and self._mostly_free():
            # A pass frees the pages of the packs it gathered, and LMDB never shrinks its file:
            # without this, an idle service's passes left a single-checkpoint stdlib store at
            # 61 MiB where its checkpoint wrote 50.
            with self._lock.held(lock_timeout):
                report.compacted = self.backend.compact() is not None
        return report

    def maintain_all(self, *, max_passes: int = 64) -> list[MaintenanceReport]:
        """Run :meth:`maintain` until no pass is due (what an idle service does over time);
        the reports of the passes that ran.

        One at a time per store: ``<store>/maintenance.lock`` is taken first, and LockedError
        says another ``maintain`` (or a detached pass, :mod:`snapstore.ops.background`) runs.
        Each step holds the writer lock only for its write, so checkpoints go on meanwhile.
        """
        from contextlib import ExitStack

        from snapstore.errors import LockedError
        from snapstore.ops import background
        from snapstore.storage.lock import WriterLock

        with ExitStack() as stack:
            if self.store_dir is not None:
                guard = WriterLock(os.path.join(self.store_dir, background.LOCK_NAME))
                try:
                    stack.enter_context(guard.held(0))
                except LockedError:
                    raise LockedError("another maintenance pass is running on this store") from None
            reports: list[MaintenanceReport] = []
            while len(reports) < max_passes:
                report = self.maintain()
                if report is None:
                    break
                reports.append(report)
                if report.chunks_moved == 0:
                    break  # (what is left cannot move now: damage, or a gc in between)
            compacted = any(r.compacted for r in reports)
            if not compacted and self._mostly_free():
                # Free pages with no pass due: each checkpoint's transactions leave some, and
                # a small store's file grows to twice its contents without this.
                with self._lock.held():
                    compacted = self.backend.compact() is not None
                if reports:
                    reports[-1].compacted = compacted
            if compacted and self.store_dir is not None:
                self._drop_old_generations(self.store_dir)
            self._maintained()
            return reports

    def _drop_old_generations(self, store_dir: str, seconds: float = 5.0) -> None:
        """After a compaction: delete the generation it replaced once no process has it open
        (a service follows at its next transaction or idle second), waiting ``seconds`` at
        most; until then the store takes the old file's bytes too.  What is left is deleted by
        the next writer (:meth:`snapstore.storage.backend.Backend.refresh`)."""
        import time

        deadline = time.monotonic() + seconds
        while old_generations(store_dir):
            with self._lock.held():
                self.backend.refresh()
            if time.monotonic() > deadline or not old_generations(store_dir):
                return
            time.sleep(0.2)

    def follow_compaction(self) -> None:
        """Follow a compaction another process made (one read transaction): this process
        then lets go of the generation it replaced, which the compacting process deletes.  The
        idle service calls it every second."""
        with self.backend.read():
            pass

    def _mostly_free(self) -> bool:
        """Whether more than :data:`~snapstore.ops.maintenance.FREE_COMPACT` of the store file
        is free pages (the tables' pages against the file's size)."""
        from snapstore.ops import maintenance_due
        from snapstore.storage.backend import TABLES

        used = sum(self.backend.table_pages(t) for t in TABLES)
        return maintenance_due.compaction_due(self.backend.disk_size(), used)

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
            "converts it to format 2, which is smaller"
        )

    @property
    def format_version(self) -> int:
        """The store's format (1: one value per chunk; 2: packs)."""
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
        else None (``service.autostart``,
        on by default, and the environment's opt-outs: :data:`AUTOSTART_ENV`, then ``CI``).

        Two raw reads: the click-free snapshot asks this after every checkpoint and must not
        import the configuration module (a damaged value counts as the default)."""
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
        return self.config_get(key)

    def relocate(self, new_root: str | os.PathLike[str]) -> str:
        """Re-point a store kept outside its tree at the tree's new place; returns the old root.

        Commands refuse a tree that is not the store's root (a copied store must never read or
        rewrite the original tree), so a moved or copied tree is adopted explicitly.  The stat
        cache is cleared: it describes the old tree's inodes.
        """
        new = os.path.abspath(os.fspath(new_root))
        if not os.path.isdir(new):
            raise TreeIOError(f"{new} is not a directory")
        if self.store_dir is None:
            raise UsageError("an in-memory store has no tree to re-point")
        with self.backend.read() as view:
            layout = view.get("meta", b"layout")
        if layout == b"inside":
            raise UsageError(f"the store {self.store_dir} lives inside its tree and moves with it")
        old = self.root
        with self._lock.held():
            with self.backend.read() as view:
                stale = [k for k, _ in view.items("statcache")]
            with self.backend.write() as batch:
                batch.put("meta", b"root", os.fsencode(new))
                for key in stale:
                    batch.delete("statcache", key)
            self.backend.sync()
        self.root = new
        self.root_bytes = os.fsencode(new)
        self.context.root = new  # the stages' view of the tree follows
        return old
