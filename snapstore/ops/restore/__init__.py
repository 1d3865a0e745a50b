"""Restore: make the tree equal to a checkpoint, atomically, safely, undoably.

The protocol (docs/packages/ops-restore.md):

1. Under the writer lock, record the tree as it is now (a *safety* checkpoint; the latest
   checkpoint is reused when the tree has not changed since), so nothing the user had is lost.
2. Plan (:mod:`.plan`): compare the tree's manifest with the target's (restricted to the
   selected paths), decoding only the target's manifest chunks the safety checkpoint does not
   share.  Every field of every entry so decoded is validated first (:mod:`.safety`; the shared
   ones were just recorded from the tree) and every chunk the plan needs is read and re-hashed:
   a damaged store fails here, before the tree is touched.  Paths the safety checkpoint could not record (unreadable) are left in place and
   reported (:attr:`RestoreReport.unrecorded`).
3. Journal the plan in the store (:mod:`.journal`; one transaction, flushed to disk).
4. Apply (:mod:`.batch`, :mod:`.apply`): the new files are written to temp files in parallel;
   deletions deepest first; one ``syncfs`` (the temp files' data is durable); the renames,
   shallowest first; directory modes; one ``syncfs`` again (the new names are durable).  Under
   durability ``normal`` a watching Store leaves both ``syncfs`` for later (:mod:`.settle`): step 5 then marks
   the journal applied instead of clearing it, and one ``syncfs`` later precedes its clearing.  Before
   each path is touched its lstat is compared with what the plan saw; a difference means
   someone else changed it: the restore rolls back what it did and raises ConflictError naming
   the file.
5. Clear the journal, append to the operation log and refresh the stat cache for the files
   written, in one transaction (so the next snapshot reads none of them back).  A watching
   Store keeps its tree state (:mod:`.watching`), so its next snapshot does not walk.

A process killed in 4-5 leaves the journal.  Read-only commands leave it alone (they report it:
:func:`pending`); the next writer, or ``snapstore recover``, checks every journaled path against
the journal and finishes (or rolls back) the restore (:func:`recover`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, cast

from snapstore.errors import ConflictError, CorruptError, TreeIOError
from snapstore.ops.context import StageContext
from snapstore.ops.diff import Change
from snapstore.ops.restore import batch as batch_mod
from snapstore.ops.restore import journal, settle, watching
from snapstore.ops.restore.apply import Applier, getter
from snapstore.ops.restore.journal import tables
from snapstore.ops.restore.plan import (
    Plan,
    Step,
    TargetView,
    difference,
    plan,
    skip_ignored,
    verify_sources,
)
from snapstore.ops.restore.recovery import RecoverReport, pending, recover
from snapstore.ops.restore.safety import (
    check_difference,
    check_manifest,
    same_as_seen,
    selector,
    under,
)
from snapstore.ops.snapshot import current_tree
from snapstore.platform import sync
from snapstore.records import manifest, requests
from snapstore.records.checkpoint import Checkpoint, seq_key
from snapstore.records.manifest import Entry
from snapstore.tree import scan, worktree
from snapstore.tree.paths import display, to_json

__all__ = [
    "RecoverReport",
    "RestoreReport",
    "Step",
    "pending",
    "plan",
    "recover",
    "run",
    "selector",
    "step_hook",
]

#: Test seam: called with the op index before each step of phase 4 (crash tests kill there).
step_hook: Callable[[int], None] | None = None

#: Records the tree as a safety checkpoint: ``take_safety(message)`` -> (checkpoint, entries,
#: what the scan found).  The Store provides it (the snapshot stage and its memo are its own).
TakeSafety = Callable[[str], tuple[Checkpoint, Mapping[bytes, Entry], Mapping[bytes, scan.Found]]]


@dataclass
class RestoreReport:
    """What a restore (or undo) did, or would do with ``dry_run``."""

    kind: str  # "restore" or "undo"
    target: Checkpoint
    safety: Checkpoint | None
    changes: list[Change]
    dry_run: bool
    warnings: list[str] = field(default_factory=list)
    op_seq: int | None = None
    #: Paths that could not be read, so could not be recorded: left in place, untouched.  A
    #: restore that leaves any is partial (the CLI exits 1).
    unrecorded: list[bytes] = field(default_factory=list)

    @property
    def partial(self) -> bool:
        """True when some paths were left as they are because they could not be recorded."""
        return bool(self.unrecorded)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "kind": self.kind,
            "target": self.target.id,
            "safety_checkpoint": self.safety.id if self.safety else None,
            "dry_run": self.dry_run,
            "op": self.op_seq,
            "changes": [c.to_json() for c in self.changes],
            "warnings": self.warnings,
            "unrecorded": [to_json(p) for p in self.unrecorded],
            "partial": self.partial,
        }


def _unrecorded_warning(p: Plan) -> list[str]:
    if not p.unrecorded:
        return []
    shown = ", ".join(display(x) for x in p.unrecorded[:5]) + (" ..." if len(p.unrecorded) > 5 else "")
    return [f"left {len(p.unrecorded)} unreadable path(s) as they are (they could not be recorded): {shown}"]


def run(
    ctx: StageContext,
    target: Checkpoint,
    paths: Sequence[str | bytes] | None,
    *,
    dry_run: bool,
    kind: str,
    message: str,
    take_safety: TakeSafety,
) -> RestoreReport:
    """Carry out the protocol above; the caller holds the writer lock."""
    backend = ctx.backend
    safety: Checkpoint | None = None
    among: set[bytes] | None = None
    current: Mapping[bytes, Entry]
    found: Mapping[bytes, scan.Found]
    target_entries: Mapping[bytes, Entry]
    if dry_run:
        target_entries = _load_checked(ctx, target)
        current, found = current_tree.current_state(ctx) or worktree.current_state(ctx)
    else:
        settle.now(ctx)  # (an earlier restore's tree synced and its journal cleared first)
        with _deferred(backend):  # (the journal's barrier below makes it durable)
            safety, current, found = take_safety(message)
        target_entries, among = _target_from_difference(ctx, safety, target, current)
    p = plan(current, target_entries, selector(paths), among)
    warnings = p.warnings + _unrecorded_warning(p)
    steps = skip_ignored(ctx.root_bytes, p.steps, found, warnings.append)
    kept_paths = {s.path for s in steps}
    changes = [c for c in p.changes if c.path in kept_paths]
    if dry_run or safety is None:
        return RestoreReport(kind, target, None, changes, True, warnings, unrecorded=p.unrecorded)

    with tables(backend).read() as view:
        contents = verify_sources(view.get, target_entries, steps, tables(backend).read)
    how = settle.mode(ctx)
    op = _journal(ctx, target, safety, kind, paths, steps, sync.boot_id() if how == "later" else None)
    defer: list[tuple[bytes, int]] | None = None if how == "now" else []
    applier = _apply(ctx, safety, target_entries, contents, steps, found, defer)
    warnings.extend(applier.warnings)
    # The tree's new names are durable (execute synced them), or the journal stays marked
    # applied until they are (settle): the stat cache learns the files just written, so the
    # next snapshot reads none of them.
    keep = None
    if how == "later" and defer:
        keep = settle.applied_value(op, steps, [rel for rel, _ in defer], applier.identity)
    deleted = [s.path for s in steps if s.action == "delete"]
    try:
        seq = journal.finish(backend, op, len(changes), applier.cache, ctx.request, deleted, keep)
    except BaseException:
        _close([fd for _, fd in defer or ()])
        raise
    if keep is not None:
        settle.later(ctx, [fd for _, fd in defer or ()], keep)
    else:
        _close([fd for _, fd in defer or ()])
    watching.keep_state(ctx, steps, applier.written, seq_key(seq))
    if ctx.watcher is None:  # (a watching context keeps its own state: keep_state above)
        from snapstore.ops.restore.after import found_after

        after = found_after(ctx.root_bytes, found, steps)
        # (the safety checkpoint's manifest: the record after takes the entries of every path
        # the restore left alone from the manifest memo it left, when that is still this one)
        ctx.found_hint = (seq_key(seq), after.records, after.touched, safety.manifest) if after is not None else None
    return RestoreReport(kind, target, safety, changes, False, warnings, seq, p.unrecorded)


def _deferred(backend: Any) -> AbstractContextManager[None]:
    """The backend's ``deferred()`` (its syncs wait for a later barrier), where it has one."""
    deferred = getattr(backend, "deferred", None)
    return nullcontext() if deferred is None else cast(AbstractContextManager[None], deferred())


def _journal(
    ctx: StageContext, target: Checkpoint, safety: Checkpoint, kind: str, paths: Sequence[str | bytes] | None,
    steps: list[Step], boot: str | None,
) -> dict[str, Any]:
    """Journal the operation and its steps, durably, before the tree is touched; its record.
    ``boot`` (this boot's id) marks a restore whose tree syncs are left for later (settle)."""
    op: dict[str, Any] = {
        "kind": kind,
        "target": bytes.fromhex(target.id),
        "before": bytes.fromhex(safety.id),
        "paths": [os.fsencode(x) for x in paths] if paths else None,
        "time_ns": time.time_ns(),
        "pid": os.getpid(),
    }
    if boot is not None:
        op["boot"] = boot
    with tables(ctx.backend).write() as batch:
        batch.put("journal", journal.JOURNAL_KEY, journal.record(op, steps))
        # A service request that dies from here on is "begun": the next writer finishes it.
        requests.record(batch, ctx.request, stage="begun", kind=kind, target=target.id)
    # The safety checkpoint and the journal are durable before the tree (or a temp file in it)
    # is touched, whatever the store's durability setting: the user's bytes are in them.
    tables(ctx.backend).barrier()
    return op


def _apply(
    ctx: StageContext, safety: Checkpoint, target_entries: Mapping[bytes, Entry], contents: dict[bytes, list[bytes]],
    steps: list[Step], found: Mapping[bytes, scan.Found], defer: list[tuple[bytes, int]] | None,
) -> Applier:
    """Carry out ``steps``, each path checked against what the safety checkpoint saw just
    before it is touched; a conflict or an I/O error rolls back what was done (the roll-back
    syncs, so nothing of a deferred run waits).  ``defer``: see :func:`batch.execute`."""
    applier = Applier(ctx.root_bytes, getter(ctx), target_entries, f"{os.getpid()}")
    applier.contents = contents
    done = batch_mod.Run()

    def before(i: int, s: Step) -> os.stat_result | None:
        if step_hook is not None:
            step_hook(i)
        if i == len(steps) // 2:
            requests.seam(ctx.request, "mid-restore")
        # Implicit directories (parents of entries) are not in the scan: their contents are
        # checked one by one instead.  A directory to create may already exist implicitly
        # (it held files that earlier steps removed): creating it is idempotent.
        implicit = s.action in ("prune", "rmdir", "mkdir", "dirmode") and s.path not in found
        if implicit or s.path in done.paths:
            return None
        st = applier.tree.lstat(s.path)
        if not same_as_seen(st, found.get(s.path)):
            raise ConflictError(
                f"{display(s.path)} changed while the restore ran; the restore was rolled back "
                "(nothing was lost)"
            )
        return st

    try:
        batch_mod.execute(applier, steps, before, done, defer)
    except BaseException as exc:
        applier.close()
        _close([fd for _, fd in defer or ()])
        if isinstance(exc, ConflictError | OSError):
            _roll_back_or_keep_journal(ctx, safety, done.done, exc)
            journal.clear(ctx.backend)
            if isinstance(exc, OSError):
                raise TreeIOError(
                    f"restore failed and was rolled back: {exc.strerror or exc}"
                    + (f" ({display(os.fsencode(exc.filename))})" if exc.filename else "")
                ) from exc
        raise
    applier.close()
    return applier


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _load_checked(ctx: StageContext, target: Checkpoint) -> dict[bytes, Entry]:
    with tables(ctx.backend).read() as view:
        entries = manifest.load(view.get, target.manifest)
    check_manifest(entries, ctx.excluded)
    return entries


def _target_from_difference(
    ctx: StageContext, safety: Checkpoint, target: Checkpoint, current: Mapping[bytes, Entry]
) -> tuple[Mapping[bytes, Entry], set[bytes] | None]:
    """The target's entries, and the paths where they may differ from the tree's.

    Only the target's entries that differ from the safety checkpoint's are decoded and
    validated: a manifest chunk both share, or a record equal in both, holds
    entries this process just recorded from the tree (``current`` is the safety manifest's
    content: the snapshot that recorded it made, or found, that manifest from these entries).
    When an entry that differs is not the tree's on the safety side, the whole target is
    loaded and checked.
    """
    try:
        with tables(ctx.backend).read() as view:
            old, new = difference(view.get, safety.manifest, target.manifest, ctx.manifest_memo.codec)
    except CorruptError:
        # A damaged chunk of the safety checkpoint's manifest (a reused, older checkpoint) must
        # not stop a restore of a sound target: load the target alone (its damage still fails).
        return _load_checked(ctx, target), None
    if any(current.get(p) != e for p, e in old.items()):
        return _load_checked(ctx, target), None
    entries = TargetView(current, old, new)
    check_difference(entries, new, current, ctx.excluded)
    return entries, set(old) | set(new)


def _roll_back_or_keep_journal(ctx: StageContext, safety: Checkpoint, done: list[Step], exc: BaseException) -> None:
    try:
        roll_back(ctx, safety, done)
    except OSError as again:
        # The journal stays: like after a crash, the next writer (or 'snapstore recover')
        # finishes the restore once the cause (a full disk, say) is gone.
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise TreeIOError(
            f"restore failed ({why}) and could not be rolled back ({again.strerror or again}); "
            "run 'snapstore recover' once that is fixed (nothing was lost)"
        ) from exc


def roll_back(ctx: StageContext, safety: Checkpoint, done: list[Step]) -> None:
    """Put the paths already touched back as the safety checkpoint has them."""
    if not done:
        return
    with tables(ctx.backend).read() as view:
        before = manifest.load(view.get, safety.manifest)
    touched = {s.path for s in done}
    current, _ = worktree.current_state(ctx)
    steps = plan(current, before, under(touched)).steps
    applier = Applier(ctx.root_bytes, getter(ctx), before, f"{os.getpid()}r")
    try:
        batch_mod.execute(applier, steps, None, batch_mod.Run())
    finally:
        applier.close()

