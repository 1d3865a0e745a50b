"""When a store's upkeep runs on its own: retention and maintenance after a snapshot, idle
passes of the service, and the one-at-a-time guard of whole-store maintenance.

The checks that run after every snapshot read a few raw meta keys first and import nothing
else unless something is due: they are part of every checkpoint's cost.  The passes themselves
are :mod:`snapstore.ops.maintenance`'s; this module says when, and where (here, or in a process
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

#: Checkpoints between two maintenance checks when ``maintenance.checkpoints`` is unset.
EVERY = 32


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
    backend: Backend, config: Callable[[], dict[str, str]], level: int, store_dir: str | None, root: str
) -> list[str]:
    """Every ``maintenance.checkpoints`` checkpoints (writer lock held), gather the small loose
    packs when at least ``maintenance.loose-packs`` have piled up: in a process of its own when
    ``maintenance.detach`` allows, else here within ``maintenance.budget-ms``.  Three raw reads
    when nothing is due (the keys are spelled out here; a test checks they agree)."""
    with backend.read() as view:
        count = view.count("log")
        raw_at = view.get("meta", b"maintenance:at")
        if view.get("meta", CONFIG_PREFIX + b"maintenance.auto") == b"false":
            return []
        raw_every = view.get("meta", CONFIG_PREFIX + b"maintenance.checkpoints")
    try:
        at = int(raw_at) if raw_at is not None else 0
        every = int(raw_every) if raw_every is not None else EVERY
    except ValueError:
        at, every = 0, EVERY
    if at <= count < at + every:
        return []
    from snapstore.ops import maintenance

    try:
        values = config()
        if not start_detached(backend, values, store_dir, root):
            stop = maintenance.stop_after(int(values["maintenance.budget-ms"]) / 1000)
            found = maintenance.plan(
                backend, min_packs=int(values["maintenance.loose-packs"]), max_chunks=maintenance.SNAPSHOT_CHUNKS
            )
            if found is not None:
                maintenance.run(backend, found, level=level, locked=nullcontext, stop=stop)
        with backend.write() as batch:
            batch.put("meta", maintenance.SEQ_KEY, str(count).encode())
    except SnapstoreError as exc:
        return [f"automatic maintenance failed: {exc}"]
    return []


def start_detached(backend: Backend, values: dict[str, str], store_dir: str | None, root: str) -> bool:
    """Start the due maintenance passes in a process of their own when ``maintenance.detach``
    allows; whether one started.  Due: the full pass, or ``maintenance.loose-packs`` small
    loose packs."""
    from snapstore.ops import background, maintenance

    if store_dir is None or not background.enabled(values["maintenance.detach"]):
        return False
    sizes = list(backend.value_sizes("packs"))  # (read once for both questions)
    due = maintenance.full_due(backend, sizes=sizes) or len(
        maintenance.small_loose(backend, sizes)
    ) >= max(2, int(values["maintenance.loose-packs"]))
    return due and background.spawn(store_dir, root) is not None


def one_pass(
    backend: Backend,
    level: int,
    locked: Callable[[], AbstractContextManager[None]],
    *,
    min_packs: int,
    max_chunks: int | None,
    stop: Callable[[], bool] | None,
    full: bool,
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
    if not report.stopped and not (stop is not None and stop()) and mostly_free(backend):
        # A pass frees the pages of the packs it gathered, and LMDB never shrinks its file:
        # without this, an idle service's passes leave the file at its largest.
        with locked():
            report.compacted = backend.compact() is not None
    return report


def every_pass(
    store_dir: str | None, one: Callable[[], MaintenanceReport | None], max_passes: int
) -> list[MaintenanceReport]:
    """Run ``one`` until no pass is due, holding ``<store>/maintenance.lock`` (LockedError when
    another maintenance, or a detached pass, runs); the reports of the passes that ran."""
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
        return reports


def mostly_free(backend: Backend) -> bool:
    """Whether more than :data:`~snapstore.ops.maintenance.FREE_COMPACT` of the store file is
    free pages (the tables' pages against the file's size)."""
    from snapstore.ops import maintenance
    from snapstore.storage.backend import TABLES

    size = backend.disk_size()
    used = sum(backend.table_pages(t) for t in TABLES)
    return size > maintenance.COMPACT_ABOVE and used < (1 - maintenance.FREE_COMPACT) * size
