"""The automatic maintenance pass: small loose packs gathered into full ones, a step at a time.

Like ``git gc --auto``: after every :data:`EVERY` checkpoints (config
``maintenance.checkpoints``) a snapshot checks whether at least :data:`LOOSE_PACKS` small loose
packs (config ``maintenance.loose-packs``; *small*: under half of
:data:`snapstore.storage.packs.PACK_TARGET`) have gathered, and if so moves them into
consolidated packs (:mod:`snapstore.ops.consolidate`), their chunks in path order.  The
resident service runs the same pass when idle.  With ``maintenance.detach`` (the default) both
start a process that runs the due passes instead (:mod:`snapstore.ops.background`).
``maintenance.auto`` false turns all of it off.

**Bounded.**  The plan (which packs, their chunks, the order) is read without the writer lock:
readers never block a checkpoint.  A pass moves its chunks in steps of at most
:data:`STEP_BYTES` plain bytes (a pass moves at most :data:`PASS_BYTES`); each step reads and
compresses without the lock and takes it only for its one write transaction, after checking
that no chunk of the step moved meanwhile (else the step is dropped: see :func:`_move`), so a
checkpoint in another process waits for one step's write at most.  After a snapshot, in-process, the pass also
keeps to a time budget (config ``maintenance.budget-ms``, :data:`BUDGET_MS`): it stops
before a step once the budget is spent (the first step always runs, so a slow machine still
makes progress), and what is left waits for the next pass.  The order comes from the newest checkpoints'
manifest chunks that lie in the packs being moved (their changed entries), not from a walk of
every manifest.

**The full pass** (the idle service, or the process a snapshot detaches:
:mod:`snapstore.ops.background`; small stores).  The loose-pack pass gathers each batch of
checkpoints on its own, so versions from different batches never share a frame: a 150-step
history stayed at 2.3x what ``gc`` makes of it.  When every pack together holds at most
:data:`FULL_MAX` plain bytes (the small trees agents work on) and the packs have grown by
:data:`FULL_GROWTH` since the last full pass (or gc), the idle service rewrites *every* pack the
way ``gc`` does: all chunks in gc's order (every checkpoint's), at gc's level, in
:data:`FULL_STEP` steps.  Amortised, each byte is rewritten a bounded number of times per
growth of the store by that factor.

**Safe without a mark.**  Between two steps a snapshot may reuse any chunk the store holds, so
the pass decides nothing about liveness: it moves *every* chunk of a pack (dead ones too, for
gc to remove later) and deletes a pack only in a transaction that finds no entry naming it.
A snapshot never points an existing chunk's entry at an old pack (entries of stored chunks are
written once), so a pack that no entry names stays unnamed.  A kill between steps leaves every
entry pointing at a pack that exists; the next pass picks up what is left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from snapstore.errors import CorruptError
from snapstore.ops import consolidate
from snapstore.storage import entries, objects, packs
from snapstore.storage.backend import Backend
from snapstore.storage.entries import PackEntry

#: Checkpoints between two checks (config ``maintenance.checkpoints``).
EVERY = 32
#: Small loose packs that make a pass worth it (config ``maintenance.loose-packs``).
LOOSE_PACKS = 16
#: A loose pack below this many stored bytes is small (a checkpoint's own pack).
SMALL = packs.PACK_TARGET // 2
#: Milliseconds the pass after a snapshot may take (config ``maintenance.budget-ms``),
#: counted from the start of its plan; past it, no new step starts.
BUDGET_MS = 250
_clock = time.monotonic  # (a test's fake clock replaces it)
#: Plain bytes moved per step (per transaction, under the writer lock).
STEP_BYTES = 4 << 20
#: Plain bytes moved per pass at most (the rest waits for the next pass).
PASS_BYTES = 32 << 20
#: A pass finds the chunks of the packs it moves by reading every chunk entry (packs do not
#: list their chunks), in time proportional to the store.  After a snapshot it runs only on
#: stores of at most this many chunks (a short pause); the idle service, on stores of at most :data:`SERVICE_CHUNKS`;
#: bigger stores are consolidated by ``gc``.
SNAPSHOT_CHUNKS = 100_000
SERVICE_CHUNKS = 1_000_000
#: The meta key holding the log's record count at the last pass.
SEQ_KEY = b"maintenance:at"
#: The full pass: stores of at most this many plain bytes in chunks (gc's small-store bound,
#: where it compresses at level 19)...
FULL_MAX = consolidate.SMALL_BYTES
#: ...whose packs have grown by this factor since the last full pass or full gc (each records
#: the packs' stored bytes under :data:`FULL_KEY`).
FULL_GROWTH = 1.25
#: Plain bytes per step of the full pass: one consolidated frame, so the pass writes the frames
#: gc writes (level 19: slow, so compressed without the writer lock; an idle
#: service that runs the pass itself, with ``maintenance.detach`` off, serves a request that
#: arrives once the step under way ends).
FULL_STEP = consolidate.FRAME
#: The meta key holding the packs' stored bytes at the end of the last full pass.
FULL_KEY = b"maintenance:full"


@dataclass
class MaintenanceReport:
    """What one pass did."""

    loose: int = 0  # small loose packs found
    packs_gathered: int = 0  # of them, moved and deleted
    packs_written: int = 0
    chunks_moved: int = 0
    steps: int = 0
    full: bool = False  # every pack rewritten in gc's order (:func:`plan_full`)
    stopped: bool = False  # asked to stop before the last step
    compacted: bool = False  # the store file rewritten without its free pages after a full pass
    conversations_gathered: int = 0  # conversation records rewritten in the compact form

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class MaintenancePlan:
    """Which packs one pass moves, and their chunks in the order they are written."""

    def __init__(
        self,
        pids: list[bytes],
        chunks: list[tuple[bytes, PackEntry]],
        loose: int,
        *,
        full: bool = False,
        breaks: set[bytes] | None = None,
        small: set[bytes] | None = None,
    ) -> None:
        self.pids = pids
        self.chunks = chunks
        self.loose = loose
        self.full = full  # every pack, in gc's order and frames (:func:`plan_full`)
        self.breaks = breaks or set()
        self.small = small or set()


def small_loose(
    backend: Backend, sizes: list[tuple[bytes, int, bytes]] | None = None
) -> list[tuple[bytes, int]]:
    """The small loose packs: ``(pack id, stored bytes)`` (``sizes`` as for :func:`full_due`)."""
    return [
        (pid, n)
        for pid, n, head in (backend.value_sizes("packs") if sizes is None else sizes)
        if n < SMALL and not consolidate.is_consolidated(head)
    ]


def plan(
    backend: Backend, *, min_packs: int, max_chunks: int, newest: int = 4 * EVERY
) -> MaintenancePlan | None:
    """Read (no lock needed) what a pass would move; None when fewer than ``min_packs``, or
    when the store holds more than ``max_chunks`` chunks (finding a pack's chunks reads them
    all)."""
    with backend.read() as view:
        if view.count("chunks") > max_chunks:
            return None
    found = small_loose(backend)
    if len(found) < max(min_packs, 2):
        return None
    chosen = {pid for pid, _ in found}
    with backend.read() as view:
        members = entries.pack_members(view.items("chunks"), chosen)
        # Whole packs up to the pass's budget, in key order (stable across passes).
        pids: list[bytes] = []
        total = 0
        for pid in sorted(members):
            size = sum(e.size for _, e in members[pid])
            if pids and total + size > PASS_BYTES:
                break
            pids.append(pid)
            total += size
        moving = [ce for pid in pids for ce in members[pid]]
        within = {cid for cid, _ in moving}
        keys = consolidate.order_keys(view, newest=newest, within=within)
    last: consolidate.Key = (9, b"", 0, 0)
    moving.sort(key=lambda ce: keys.get(ce[0], last))
    return MaintenancePlan(pids, moving, len(found))


def full_due(
    backend: Backend, max_chunks: int = SERVICE_CHUNKS, sizes: list[tuple[bytes, int, bytes]] | None = None
) -> bool:
    """Whether the full pass is due (cheap: the packs' sizes, one count, one meta key): at most
    :data:`FULL_MAX` stored bytes and ``max_chunks`` chunks, two packs at least, and packs grown
    by :data:`FULL_GROWTH` since the last full pass or full gc (due when neither ever ran).
    ``sizes``: ``backend.value_sizes("packs")`` when the caller has read it."""
    sizes = list(backend.value_sizes("packs")) if sizes is None else sizes
    stored = sum(n for _, n, _ in sizes)
    if len(sizes) < 2 or stored > FULL_MAX:
        return False
    with backend.read() as view:
        if view.count("chunks") > max_chunks:
            return False
        raw = view.get("meta", FULL_KEY)
    try:
        base = int(raw) if raw is not None else 0  # never: due (gc and the pass write it)
    except ValueError:
        base = 0  # (a damaged mark costs one pass, which writes it again)
    return stored >= FULL_GROWTH * base


def plan_full(backend: Backend, max_chunks: int = SERVICE_CHUNKS) -> MaintenancePlan | None:
    """Read (no lock needed) the full pass, or None when it is not due (:func:`full_due`) or
    its chunks hold more than :data:`FULL_MAX` plain bytes."""
    sizes = list(backend.value_sizes("packs"))
    if not full_due(backend, max_chunks, sizes):
        return None
    with backend.read() as view:
        members = entries.pack_members(view.items("chunks"))
        moving = [ce for ms in members.values() for ce in ms]
        if sum(e.size for _, e in moving) > FULL_MAX:
            return None
        keys = consolidate.order_keys(view)
    last: consolidate.Key = (9, b"", 0, 0)
    moving.sort(key=lambda ce: keys.get(ce[0], last))
    breaks, small = consolidate.breaks_of([cid for cid, _ in moving], keys)
    loose = sum(1 for _, _, head in sizes if not consolidate.is_consolidated(head))
    pids = sorted({pid for pid, _, _ in sizes})
    return MaintenancePlan(pids, moving, loose, full=True, breaks=breaks, small=small)


def stop_after(seconds: float) -> Callable[[], bool]:
    """A ``stop`` for :func:`run` that is true once ``seconds`` have passed since this call,
    but never at its first question: every pass moves one step at least."""
    deadline = _clock() + seconds
    asked = [False]

    def stop() -> bool:
        first = not asked[0]
        asked[0] = True
        return not first and _clock() > deadline

    return stop


def run(
    backend: Backend,
    the_plan: MaintenancePlan,
    *,
    level: int,
    locked: Callable[[], Any],
    stop: Callable[[], bool] | None = None,
) -> MaintenanceReport:
    """Carry out ``the_plan`` in steps, each under ``locked()`` (a context manager holding the
    writer lock), then delete the packs no entry names any more.  ``stop()``, asked before each
    step, ends the pass early (the resident service: a request is waiting); what was moved
    stays moved, the rest waits for the next pass."""
    report = MaintenanceReport(loose=the_plan.loose, full=the_plan.full)
    if the_plan.full:
        level = max(level, consolidate.SMALL_LEVEL)
    limit = FULL_STEP if the_plan.full else STEP_BYTES
    step: list[tuple[bytes, PackEntry]] = []
    size = moved = 0
    stopped = False
    for cid, e in the_plan.chunks:
        step.append((cid, e))
        size += e.size
        if size >= limit:
            if stop is not None and stop():
                step, stopped = [], True
                break
            report.packs_written += _move(backend, step, level, the_plan, locked)
            report.steps += 1
            moved += len(step)
            step, size = [], 0
    if step:
        if stop is not None and stop():
            stopped = True
        else:
            report.packs_written += _move(backend, step, level, the_plan, locked)
            report.steps += 1
            moved += len(step)
    report.chunks_moved = moved
    report.stopped = stopped
    with locked():
        report.packs_gathered = _drop(backend, the_plan)
        if the_plan.full and not stopped:
            stored = sum(n for _, n, _ in backend.value_sizes("packs"))
            with backend.write() as batch:
                batch.put("meta", FULL_KEY, str(stored).encode())
    return report


def _move(
    backend: Backend,
    chunks: list[tuple[bytes, PackEntry]],
    level: int,
    the_plan: MaintenancePlan,
    locked: Callable[[], Any],
) -> int:
    """One step: the chunks still where the plan found them, read and compressed without the
    lock (the seconds of a level-19 step), then written in one transaction under ``locked()``
    if none of them moved meanwhile (a gc or another pass between the two: the step is dropped,
    the next pass plans again).  A checkpoint waits for the write only."""
    plain: list[tuple[bytes, bytes]] = []
    expected: list[tuple[bytes, bytes]] = []
    with backend.read() as view:
        for cid, e in chunks:
            value = view.get("chunks", cid)
            if value != e.encode():
                continue  # moved or removed since the plan (a gc ran between steps)
            try:
                plain.append((cid, objects.load_chunk(view.get, cid, max_size=e.size)))
            except CorruptError:
                continue  # damage stays where it is, for verify to name
            expected.append((cid, value))
    if not plain:
        return 0
    if the_plan.full:
        frames = consolidate.frames_of(plain, level, consolidate.FRAME, the_plan.breaks, the_plan.small)
    else:
        frames = packs.solid_frames(plain, level)
    ops = packs.pack_ops(frames, head=consolidate.MARK)
    with locked(), backend.write() as batch:
        # Entries of stored chunks are written once by snapshots; only gc or another pass
        # rewrites them, and then this step's copies are stale (writing them would resurrect
        # a chunk gc removed).
        if any(batch.get("chunks", cid) != value for cid, value in expected):
            return 0  # (nothing put: the batch writes nothing)
        for table, key, value in ops:
            batch.put(table, key, value)
    return sum(1 for table, _, _ in ops if table == "packs")


def _drop(backend: Backend, the_plan: MaintenancePlan) -> int:
    """Delete the planned packs that no entry names (one transaction)."""
    held: dict[bytes, list[bytes]] = {}  # (grouped once: the full pass plans every pack)
    for cid, e in the_plan.chunks:
        held.setdefault(e.pack, []).append(cid)
    dropped = 0
    with backend.write() as batch:
        for pid in the_plan.pids:
            if any(_names(batch.get("chunks", cid), cid, pid) for cid in held.get(pid, ())):
                continue
            if batch.get("packs", pid) is not None:
                batch.delete("packs", pid)
                dropped += 1
    return dropped


def _names(value: bytes | None, cid: bytes, pid: bytes) -> bool:
    if value is None or not entries.is_entry(value):
        return False
    try:
        return entries.parse(cid, value).pack == pid
    except CorruptError:
        return True  # unknowable: keep the pack
