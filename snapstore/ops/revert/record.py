"""Selective revert, the store side: the report, the conflict error, and the target checkpoint.

The planner (:mod:`snapstore.ops.revert.planner`) says what each path becomes.  To apply that with the
guarantees of restore (journaled, atomic per file, concurrent-edit check, undoable), the new
contents are stored as streams and a *target* checkpoint is recorded: the safety checkpoint's
manifest with the outcome paths replaced.  Restore then makes the tree equal to it; only the
outcome paths differ, so only they are touched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from snapstore.errors import ConflictError
from snapstore.ops.context import StageContext
from snapstore.ops.revert.planner import PathOutcome
from snapstore.ops.revert.steps import UnknownChange
from snapstore.records import manifest, requests
from snapstore.records.checkpoint import (
    PATHS_INDEX_META,
    USER,
    Checkpoint,
    build_record,
    next_seq,
    parse_record,
    put_path_rows,
    write_rows,
)
from snapstore.records.manifest import Entry
from snapstore.storage import chunker, objects, packs
from snapstore.tree.paths import display, to_json

if TYPE_CHECKING:
    from snapstore.ops.diff import Change


@dataclass
class RevertReport:
    """What a revert did, or would do with ``dry_run``."""

    #: What was taken back (the checkpoint, the range or the task and actor), in words.
    what: str
    outcomes: list[PathOutcome]
    dry_run: bool
    #: The tree before the revert (None for a dry run): ``undo`` goes back to it.
    safety: Checkpoint | None = None
    #: The checkpoint the tree was made equal to (None for a dry run or when nothing changed).
    target: Checkpoint | None = None
    op_seq: int | None = None
    #: Unified diffs per path (filled for a dry run), current tree -> result.
    diffs: dict[bytes, bytes] = field(default_factory=dict)
    #: The same as changes with lazy contents (a dry run), for viewers that render diffs.
    changes: dict[bytes, Change] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: The task's changes labelled ``unknown`` (a revert by actor): left alone unless ``taken``.
    unknown: list[UnknownChange] = field(default_factory=list)

    def paths(self, status: str) -> list[bytes]:
        """The paths whose outcome has ``status`` (reverted, merged, conflict, untouched)."""
        return [o.path for o in self.outcomes if o.status == status]

    @property
    def conflicted(self) -> list[PathOutcome]:
        """The outcomes with conflicts (written as markers, or refused)."""
        return [o for o in self.outcomes if o.status == "conflict"]

    @property
    def changed(self) -> int:
        """How many paths the revert changes (or, dry, would change)."""
        return sum(1 for o in self.outcomes if o.status in ("reverted", "merged") or (o.status == "conflict" and o.final.data is not None))

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (paths as ``tree.paths.to_json`` gives them)."""
        return {
            "what": self.what,
            "dry_run": self.dry_run,
            "reverted": [to_json(p) for p in self.paths("reverted")],
            "merged": [to_json(p) for p in self.paths("merged")],
            "conflicted": [
                {
                    "path": to_json(o.path),
                    "lines": [[c.first_line, c.last_line] for c in o.conflicts],
                    "note": o.note,
                }
                for o in self.conflicted
            ],
            "untouched": [to_json(p) for p in self.paths("untouched")],
            "safety_checkpoint": self.safety.id if self.safety else None,
            "target": self.target.id if self.target else None,
            "op": self.op_seq,
            "undo": "snapstore undo" if self.op_seq is not None else None,
            "diffs": {to_json(p): d.decode("utf-8", "replace") for p, d in self.diffs.items()},
            "warnings": self.warnings,
            "unknown": [u.to_json() for u in self.unknown],
        }


def describe_conflicts(outcomes: list[PathOutcome]) -> list[str]:
    """One item per conflicted path: its name, the line ranges (or "whole file") and why."""
    rows = []
    for o in outcomes:
        if o.status != "conflict":
            continue
        where = ", ".join(c.describe() for c in o.conflicts)
        rows.append(f"{display(o.path)}: {where or 'whole file'}" + (f" ({o.note})" if o.note else ""))
    return rows


def refuse(outcomes: list[PathOutcome], what: str) -> ConflictError:
    """The error a revert with conflicts (and no way chosen to settle them) raises: one line
    (the CLI's error format) naming every conflict."""
    rows = describe_conflicts(outcomes)
    return ConflictError(
        f"cannot revert {what}: {len(rows)} conflict(s), nothing was changed: {'; '.join(rows)} "
        "(use --conflicts=markers, --ours or --theirs to go on)"
    )


def target_entries(current: dict[bytes, Entry], outcomes: list[PathOutcome]) -> dict[bytes, Entry]:
    """``current`` with every outcome path set to its final entry (or removed)."""
    out = dict(current)
    for o in outcomes:
        if o.final.entry is None:
            out.pop(o.path, None)
        else:
            out[o.path] = Entry(o.path, *o.final.entry[1:])
    # Directories: manifests hold only empty ones, and restore removes a directory only once
    # it is empty and creates the parents of what it writes, so nothing more is needed here.
    return out


def record_target(
    ctx: StageContext,
    current: dict[bytes, Entry],
    entries: dict[bytes, Entry],
    outcomes: list[PathOutcome],
    *,
    parent: Checkpoint,
    message: str,
    task: str | None,
    metadata: dict[str, Any],
) -> Checkpoint:
    """Store the new contents and record ``entries`` (``current`` with the outcomes applied) as
    a user checkpoint, in one transaction.

    The caller holds the writer lock.  ``parent`` is the safety checkpoint (the newest record).
    """
    from snapstore.ops.restore.safety import check_difference

    # The record must be one the store accepts: checked as restore and verify will check it,
    # before anything is written (a revert never commits a checkpoint it cannot restore).
    check_difference(entries, {p: e for p, e in entries.items() if current.get(p) != e}, current, ctx.excluded)
    level = ctx.level
    plain: dict[bytes, bytes] = {}
    streams: list[tuple[bytes, bytes]] = []

    def put(cid: bytes, data: bytes) -> None:
        plain[cid] = data

    for o in outcomes:
        data = o.final.data
        if data is None or o.final.entry is None:
            continue
        chunks = ((bytes(view), objects.chunk_id(view)) for view in chunker.cut_buffer(data))
        sid, _, record = objects.write_stream_known(chunks, put, level, encode=False)
        if sid != o.final.entry.ref:  # the planner named the content by its hash: same rule
            raise AssertionError(f"stream id mismatch for {display(o.path)}")
        if record is not None:
            streams.append((sid, record))
    ordered = [entries[p] for p in sorted(entries)]
    mid, _, mrecord = manifest.write_manifest(ordered, put, level, encode=False)
    if mrecord is not None:
        streams.append((mid, mrecord))
    ids = list(plain)
    missing = [cid for cid, present in zip(ids, ctx.backend.has_many("chunks", ids)) if not present]
    stats = _stats(ordered, outcomes, current)
    with ctx.backend.read() as view:  # the writer lock is held: nobody appends meanwhile
        last = next(iter(view.items("log", reverse=True)), None)
        in_packs = packs.writes_packs(view.get)
        changed: list[bytes] | None = None
        if last is not None and view.get("meta", PATHS_INDEX_META) is not None:
            from snapstore.ops import diff, pathlog

            before = pathlog.manifest_of(view, last[1])
            changed = pathlog.changed(diff.unstored(view.get, mid, mrecord, plain), before, mid)
    with ctx.backend.write() as batch:
        for table, key, value in packs.chunk_ops(
            [(cid, plain[cid]) for cid in missing], level, packed=in_packs
        ):
            batch.put_new(table, key, value)
        for sid, record in streams:
            batch.put_new("streams", sid, record)
        cp_id, packed = build_record(
            parent=parent.id, time_ns=time.time_ns(), message=message, task=task, tags=[],
            kind=USER, manifest=mid, conversation=None, metadata=metadata, stats=stats,
        )
        seq = next_seq(last[0] if last else None)
        write_rows(batch, cp_id, packed, seq, task, [])
        if changed is not None:  # (an incomplete index stays so: the next snapshot rebuilds it)
            put_path_rows(batch, seq, cp_id, changed)
        requests.record(batch, ctx.request, reverted=cp_id.hex())
    ctx.backend.sync()
    return parse_record(cp_id, packed)


def _stats(ordered: list[Entry], outcomes: list[PathOutcome], current: dict[bytes, Entry]) -> dict[str, Any]:
    """The target record's counts, against the tree it replaces (the safety checkpoint)."""
    return {
        "files": sum(1 for e in ordered if e.is_file),
        "bytes": sum(e.size for e in ordered if e.is_file),
        "added": sum(1 for o in outcomes if o.final.entry is not None and o.path not in current),
        "modified": sum(1 for o in outcomes if o.final.entry is not None and o.path in current and current[o.path] != o.final.entry),
        "deleted": sum(1 for o in outcomes if o.final.entry is None and o.path in current),
    }
