"""When a store's upkeep runs on its own: retention and maintenance after a snapshot, idle
passes of the service, compaction when the file is mostly free pages, the one-at-a-time guard
of whole-store maintenance, and whether a command starts the store's service.

The checks that run after every snapshot read a few raw meta keys (and one ``stat``) first and
import nothing else unless something is due: they are part of every checkpoint's cost.  The
passes themselves are :mod:`snapstore.ops.maintenance`'s, the size rules
:mod:`snapstore.ops.maintenance_due`'s; this module says when, and where (here, or in a process
of its own: :mod:`snapstore.ops.background`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from snapstore.errors import SnapstoreError
from snapstore.storage.backend import CONFIG_PREFIX, Backend

if TYPE_CHECKING:
    from snapstore.ops.maintenance import MaintenanceReport
    from snapstore.ops.retention import PruneReport, RetentionRules

Locked = Callable[[], AbstractContextManager[None]]

#: Checkpoints between two maintenance checks when ``maintenance.checkpoints`` is unset.
EVERY = 32
#: ``maintenance_due.GROWTH * maintenance_due.GROWTH_FLOOR``, written out so that a snapshot's
#: check of a small store imports nothing (tests/test_maintenance_size.py checks they agree).
FILE_GROWN_FLOOR = 80 << 10
#: The environment variable that overrides ``service.autostart``: ``0``/``false``/``no``/``off``
#: never start the service from a command, ``1``/``true``/``yes``/``on`` always may.
AUTOSTART_ENV = "SNAPSTORE_AUTOSTART"
_OFF = ("0", "false", "no", "off")


def autostart_wanted(configured: bytes | None) -> bool:
    """Whether a command run in-process starts the store's service, given the stored
    ``service.autostart`` (None: unset, the default: on).  :data:`AUTOSTART_ENV` wins when set;
    else a CI run (``CI`` set to anything but ``0``/``false``, as CI systems do) does not start
    one, since nobody runs the next command there; else the configuration decides."""
    forced = os.environ.get(AUTOSTART_ENV, "").strip().lower()
    if forced:
        return forced not in _OFF
    if os.environ.get("CI", "").strip().lower() not in ("", *_OFF):
        return False
    return configured != b"false"


def retention_after_snapshot(
    backend: Backend, config: Callable[[], dict[str, str]], prune: Callable[[RetentionRules], PruneReport], level: int
) -> list[str]:
    """Apply the store's retention policy (and gc, with ``retention.gc``) after a snapshot,
    writer lock held; the warnings to show.  No retention key stored means every default, which
    keeps everything: then not even the retention module is imported."""
    with backend.read() as view:
        if next(iter(view.items("meta", prefix=CONFIG_PREFIX + b"retention.")), None) is None:
            return []
    from snapstore.ops import retention

    try:
        values = config()
        policy = retention.policy_from_config(values)
        if policy is None:
            return []
        report = prune(policy)
        if report.removed and values.get("retention.gc") == "true":
            from snapstore.ops import gc

            gc.run(
                backend,
                repack_below=float(values["gc.repack-below"]),
                level=level,
                consolidation=values["gc.consolidate"],
            )
    except SnapstoreError as exc:
        return [f"automatic retention failed: {exc}"]
    return []


def maintenance_after_snapshot(
    backend: Backend, config: Callable[[], dict[str, str]], level: int, store_dir: str | None, root: str,
    in_checkpoint: bool = True,
) -> list[str]:
    """After a snapshot (writer lock held): every ``maintenance.checkpoints`` checkpoints, gather
    the small loose packs when at least ``maintenance.loose-packs`` have piled up (or, detached,
    run every pass due and compact the file); whenever the store file has grown by
    ``maintenance_due.GROWTH`` since the last maintenance, start the detached pass if one is
    due (nothing in-process: only compaction gives the bytes back).  Not ``in_checkpoint`` (the
    resident service, which maintains the store when idle): only a grown file starts the
    detached pass, so a service that is never idle still keeps the store near its compacted
    size.  Four raw reads and a ``stat`` when nothing is due (a test checks the keys agree)."""
    with backend.read() as view:
        count = view.count("log")
        raw_at = view.get("meta", b"maintenance:at")
        if view.get("meta", CONFIG_PREFIX + b"maintenance.auto") == b"false":
            return []
        raw_every = view.get("meta", CONFIG_PREFIX + b"maintenance.checkpoints")
        raw_size = view.get("meta", b"maintenance:size")
    try:
        at = int(raw_at) if raw_at is not None else 0
        every = int(raw_every) if raw_every is not None else EVERY
    except ValueError:
        at, every = 0, EVERY
    seq: int | None = count
    if not in_checkpoint or at <= count < at + every:
        if not _file_grown(backend, raw_size):
            return []
        seq = None  # (due by size: the checkpoints' schedule stays as it was)
    try:
        _due_pass(backend, config(), level, store_dir, root, seq if in_checkpoint else None)
    except SnapstoreError as exc:
        return [f"automatic maintenance failed: {exc}"]
    return []


def _due_pass(backend: Backend, values: dict[str, str], level: int, store_dir: str | None, root: str, seq: int | None) -> None:
    """The pass a snapshot's check found due: detached when allowed; else, when due by the
    checkpoints' count (``seq``), the loose-pack pass within ``maintenance.budget-ms``.  Due by
    size alone and not detached: nothing (that pass compacts nothing); the next check is at the
    next growth (the service's idle pass does the rest)."""
    from snapstore.ops import maintenance

    if start_detached(backend, values, store_dir, root) or seq is None:
        maintained(backend, seq)
        return
    stop = maintenance.stop_after(int(values["maintenance.budget-ms"]) / 1000)
    found = maintenance.plan(backend, min_packs=int(values["maintenance.loose-packs"]), max_chunks=maintenance.SNAPSHOT_CHUNKS)
    if found is not None:
        maintenance.run(backend, found, level=level, locked=nullcontext, stop=stop)
    maintained(backend, seq)


def _file_grown(backend: Backend, raw_size: bytes | None) -> bool:
    """Whether the store file outgrew its size at the last maintenance (one ``stat``; the rule
    is :func:`snapstore.ops.maintenance_due.grown`, imported only when it may hold)."""
    size = backend.disk_size()
    if size <= FILE_GROWN_FLOOR:  # (not even the module's import: the snapshot's fast path)
        return False
    if raw_size is None:
        # The first check past the floor (a first checkpoint, or a store from before the size
        # was kept) sets the base: the growth is what comes after.
        maintained(backend, None)
        return False
    from snapstore.ops import maintenance_due

    return maintenance_due.grown(size, raw_size)


def maintained(backend: Backend, count: int | None = None, *, compacting: bool = False) -> None:
    """Record that maintenance ran: the log's record count (``count``, after a snapshot's
    check) and the base of the growth rule: the file's size, or after a pass that could
    compact it (``compacting``) :func:`snapstore.ops.maintenance_due.growth_base` (a snapshot's
    check that compacts nothing must not find the file grown again at the next checkpoint)."""
    from snapstore.ops import maintenance_due

    base = backend.disk_size()
    if compacting:
        from snapstore.storage.backend import TABLES

        base = maintenance_due.growth_base(base, sum(backend.table_pages(t) for t in TABLES))
    with backend.write() as batch:
        if count is not None:
            batch.put("meta", b"maintenance:at", str(count).encode())  # (maintenance.SEQ_KEY)
        batch.put("meta", maintenance_due.SIZE_KEY, str(base).encode())


def start_detached(backend: Backend, values: dict[str, str], store_dir: str | None, root: str) -> bool:
    """Start the due maintenance passes in a process of their own when ``maintenance.detach``
    allows; whether one started.  Due: the full pass, ``maintenance.loose-packs`` small loose
    packs, or a file mostly free pages."""
    from snapstore.ops import background, maintenance

    if store_dir is None or not background.enabled(values["maintenance.detach"]):
        return False
    sizes = list(backend.value_sizes("packs"))  # (read once for both questions)
    due = (
        maintenance.full_due(backend, sizes=sizes)
        or len(maintenance.small_loose(backend, sizes)) >= max(2, int(values["maintenance.loose-packs"]))
        or mostly_free(backend)
    )
    return due and background.spawn(store_dir, root) is not None


def one_pass(
    backend: Backend, level: int, locked: Locked, *, min_packs: int, max_chunks: int | None,
    stop: Callable[[], bool] | None, full: bool,
) -> MaintenanceReport | None:
    """One maintenance pass (the full one when due and ``full``), each step under ``locked()``;
    the file compacted after a finished pass that left most of it free.  None: nothing due."""
    from snapstore.ops import maintenance

    limit = maintenance.SERVICE_CHUNKS if max_chunks is None else max_chunks
    found = maintenance.plan_full(backend, limit) if full else None
    if found is None:
        found = maintenance.plan(backend, min_packs=min_packs, max_chunks=limit)
    if found is None:
        return None
    report = maintenance.run(backend, found, level=level, locked=locked, stop=stop)
    if not report.stopped:
        from snapstore.ops import maintenance_conversations

        report.conversations_gathered = maintenance_conversations.run(backend, level, locked, stop=stop)
    if not report.stopped and not (stop is not None and stop()) and mostly_free(backend):
        # A pass frees the pages of the packs it gathered, and LMDB never shrinks its file:
        # without this, an idle service's passes leave the file at its largest.
        with locked():
            report.compacted = backend.compact() is not None
    return report


def every_pass(
    backend: Backend, store_dir: str | None, one: Callable[[], MaintenanceReport | None], locked: Locked,
    max_passes: int,
) -> list[MaintenanceReport]:
    """Run ``one`` until no pass is due, then compact a file left mostly free pages, holding
    ``<store>/maintenance.lock`` (LockedError when another maintenance, or a detached pass,
    runs); the reports of the passes that ran."""
    from contextlib import ExitStack

    from snapstore.errors import LockedError
    from snapstore.ops import background
    from snapstore.storage.lock import WriterLock

    with ExitStack() as stack:
        if store_dir is not None:
            guard = WriterLock(os.path.join(store_dir, background.LOCK_NAME))
            try:
                stack.enter_context(guard.held(0))
            except LockedError:
                raise LockedError("another maintenance pass is running on this store") from None
        reports: list[MaintenanceReport] = []
        while len(reports) < max_passes:
            report = one()
            if report is None:
                break
            reports.append(report)
            if report.chunks_moved == 0:
                break  # (what is left cannot move now: damage, or a gc in between)
        gather_conversations(backend, locked, reports)
        compacted = any(r.compacted for r in reports)
        if not compacted and mostly_free(backend):
            # Free pages with no pass due: each checkpoint's transactions leave some, and a
            # small store's file grows to twice its contents without this.
            with locked():
                compacted = backend.compact() is not None
            if reports:
                reports[-1].compacted = compacted
        if compacted and store_dir is not None:
            drop_old_generations(backend, store_dir, locked)
        maintained(backend, compacting=True)
        return reports


def gather_conversations(backend: Backend, locked: Locked, reports: list[MaintenanceReport]) -> None:
    """Rewrite older conversation records in the compact form (whether a pass was due or not:
    one read of the table's first bytes when none is left), counted in the last report."""
    from snapstore.ops import maintenance, maintenance_conversations
    from snapstore.records import conversation_delta

    n = maintenance_conversations.run(backend, conversation_delta.LEVEL, locked)
    if n and not reports:
        reports.append(maintenance.MaintenanceReport())
    if n:
        reports[-1].conversations_gathered += n


def drop_old_generations(backend: Backend, store_dir: str, locked: Locked, seconds: float = 5.0) -> None:
    """After a compaction: delete the generation it replaced once no process has it open (a
    service follows at its next transaction or idle second), waiting ``seconds`` at most; until
    then the store takes the old file's bytes too.  What is left is deleted by the next writer
    (:meth:`snapstore.storage.backend.Backend.refresh`)."""
    import time

    deadline = time.monotonic() + seconds
    while old_generations(store_dir):
        with locked():
            backend.refresh()
        if time.monotonic() > deadline or not old_generations(store_dir):
            return
        time.sleep(0.2)


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


def mostly_free(backend: Backend) -> bool:
    """Whether automatic maintenance compacts the store file (its free pages against its size:
    :func:`snapstore.ops.maintenance_due.compaction_due`)."""
    from snapstore.ops import maintenance_due
    from snapstore.storage.backend import TABLES

    used = sum(backend.table_pages(t) for t in TABLES)
    return maintenance_due.compaction_due(backend.disk_size(), used)
