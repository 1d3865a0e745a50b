"""What a revert takes back: the request (one checkpoint, a range ``A..B``, or a task's
checkpoints) read from the store as *steps*, the changes the planner takes back.

A range is one step (A's tree to B's); a range with an actor, like a task, is one step per
checkpoint of that actor after A up to B in log order (whatever their task: "what the agent did
since here"), the other actors' checkpoints in between left as they are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from snapstore.errors import RefError, UsageError
from snapstore.ops.context import StageContext
from snapstore.ops.revert.planner import RevertStep, step_between
from snapstore.records.checkpoint import Checkpoint, key_seq, load_all, load_one
from snapstore.records.manifest import Entry

#: What ``conflicts=`` accepts: refuse (the default), write diff3 markers, or pick a side.
CONFLICT_MODES = ("refuse", "markers", "ours", "theirs")
ACTORS = ("agent", "user", "unknown")
#: The label of changes no event vouches for (a backgrounded command's, the user's meanwhile).
UNKNOWN = "unknown"


@dataclass(frozen=True)
class UnknownChange:
    """A checkpoint labelled ``unknown`` in a task reverted by actor: listed, and taken back
    only when asked (``taken``)."""

    checkpoint: Checkpoint
    paths: list[bytes]
    #: Why it is unknown (its metadata ``attributed``), or "".
    why: str
    taken: bool

    def to_json(self) -> dict[str, Any]:
        from snapstore.tree.paths import to_json

        cp = self.checkpoint
        return {
            "checkpoint": cp.id, "short_id": cp.short_id, "message": cp.message,
            "paths": [to_json(p) for p in self.paths], "why": self.why, "taken": self.taken,
        }


class Steps(NamedTuple):
    """What a request takes back: the steps (oldest first), in words, the ``revert_of``
    record, and the ``unknown`` changes of the task (an actor revert lists them)."""

    steps: list[RevertStep]
    what: str
    revert_of: dict[str, Any]
    unknown: list[UnknownChange]


def split_range(text: str) -> tuple[str, str] | None:
    """``("A", "B")`` for ``"A..B"``; None when ``text`` names one checkpoint (UsageError for a
    range with a side missing).  The one place a revert range is parsed."""
    if ".." not in text:
        return None
    a, _, b = text.partition("..")
    if not a or not b:
        raise UsageError(f"bad range {text!r}: write A..B (two checkpoint references)")
    return a, b


def check_request(conflicts: str, actor: str | None) -> None:
    """UsageError for a conflict mode or an actor revert does not know."""
    if conflicts not in CONFLICT_MODES:
        raise UsageError(f"conflicts must be one of {', '.join(CONFLICT_MODES)}, not {conflicts!r}")
    if actor is not None and actor not in ACTORS:
        raise UsageError(f"the actor must be 'agent', 'user' or 'unknown', not {actor!r}")


def read_steps(
    ctx: StageContext,
    ref: str | None,
    range_: str | None,
    task: str | None,
    actor: str | None,
    sel: Callable[[bytes], bool],
    include_unknown: bool = False,
) -> Steps:
    """The steps to take back (oldest first), a description, the ``revert_of`` record and the
    task's ``unknown`` changes (taken too only with ``include_unknown``)."""
    if sum(x is not None for x in (ref, range_, task)) != 1:
        raise UsageError("revert needs exactly one of: a checkpoint, a range A..B, or a task")
    if ref is not None and split_range(ref) is not None:
        ref, range_ = None, ref
    if actor is not None and task is None and range_ is None:
        raise UsageError("--actor needs --task or a range A..B (whose changes to take back)")
    if ref is not None:
        cp = _resolve(ctx, ref)
        return Steps([_step_of(ctx, cp, sel)], f"checkpoint {cp.short_id}", {"checkpoint": cp.id}, [])
    if range_ is not None and actor is not None:
        a, b, rows = _range_rows(ctx, range_)
        return _actor_steps(ctx, rows, actor, sel, include_unknown, f"{a.short_id}..{b.short_id}", {"range": [a.id, b.id]})
    if range_ is not None:
        return Steps(*_range_step(ctx, range_, sel), [])
    assert task is not None
    return _actor_steps(ctx, _task_rows(ctx, task), actor, sel, include_unknown, f"task {task}", {"task": task})


def _range_step(
    ctx: StageContext, range_: str, sel: Callable[[bytes], bool]
) -> tuple[list[RevertStep], str, dict[str, Any]]:
    sides = split_range(range_)
    if sides is None:
        raise UsageError(f"bad range {range_!r}: write A..B (two checkpoint references)")
    a, b = _resolve(ctx, sides[0]), _resolve(ctx, sides[1])
    order = _log_positions(ctx, {a.id, b.id})
    if order.get(a.id, 0) > order.get(b.id, 0):
        raise UsageError(f"bad range {range_!r}: {a.short_id} is newer than {b.short_id}")
    # One step from A's tree to B's, not one per checkpoint between: a line changed and
    # changed back inside the range is no change to take back (composing the single
    # checkpoints would report a conflict there if the user edited that line since).
    label = f"{a.short_id}..{b.short_id}"
    step = step_between(label, *_entries_pair(ctx, a.manifest, b.manifest), sel)
    return [step], label, {"range": [a.id, b.id]}


def _actor_steps(
    ctx: StageContext, rows: list[Checkpoint], actor: str | None, sel: Callable[[bytes], bool],
    include_unknown: bool, where: str, scope: dict[str, Any],
) -> Steps:
    """One step per checkpoint of ``rows`` (a task's, or a range's in log order) made by
    ``actor`` (everyone's with None), and the ``unknown`` ones listed (taken only if asked)."""
    wanted = [c for c in rows if actor is None or c.metadata.get("actor") == actor]
    # An actor's revert never takes an "unknown" change silently: listed, taken only if asked.
    unknown = [] if actor in (None, UNKNOWN) else unknown_changes(ctx, rows, sel, include_unknown)
    taken = {u.checkpoint.id for u in unknown if u.taken}
    chosen_ids = taken | {c.id for c in wanted}
    chosen = [c for c in rows if c.id in chosen_ids]
    who = f" by the {actor}" if actor else ""
    if not chosen:
        left = f" ({len(unknown)} unknown checkpoint(s) left alone: --include-unknown takes them)" if unknown else ""
        raise RefError(f"no checkpoint{who} in {where}{left}")
    # One step per checkpoint against its parent, oldest first (the planner takes them back
    # newest first): the other actor's checkpoints in between stay.
    steps = [_step_of(ctx, cp, sel) for cp in chosen]
    revert_of: dict[str, Any] = {**scope, "actor": actor, "checkpoints": [c.id for c in chosen]}
    what = f"{len(wanted)} checkpoint(s){who} in {where}"
    if taken:
        revert_of["unknown"] = sorted(taken)
        what += f" and {len(taken)} unknown"
    return Steps(steps, what, revert_of, unknown)


def _range_rows(ctx: StageContext, range_: str) -> tuple[Checkpoint, Checkpoint, list[Checkpoint]]:
    """The two ends of ``A..B`` and the checkpoints recording a change after A up to B (log
    order, oldest first; safety checkpoints and a history's first record left out)."""
    sides = split_range(range_)
    if sides is None:
        raise UsageError(f"bad range {range_!r}: write A..B (two checkpoint references)")
    a, b = _resolve(ctx, sides[0]), _resolve(ctx, sides[1])
    order = _log_positions(ctx, {a.id, b.id})
    low, high = order.get(a.id, 0), order.get(b.id, 0)
    if low > high:
        raise UsageError(f"bad range {range_!r}: {a.short_id} is newer than {b.short_id}")
    rows = []
    with ctx.backend.read() as view:
        # Newest first: a range near the end ("the last hour") reads only its own rows.
        for key, cid in view.items("log", reverse=True):
            seq = key_seq(key)
            if seq <= low:
                break
            if seq <= high:
                cp = load_one(view, cid)
                if not cp.is_safety and cp.parent is not None:
                    rows.append(cp)
    return a, b, rows[::-1]


def _task_rows(ctx: StageContext, task: str) -> list[Checkpoint]:
    """The task's checkpoints that record a change, oldest first."""
    with ctx.backend.read() as view:
        all_ = load_all(view)
    # A checkpoint without a parent records the tree the history starts from, not a change:
    # "what the user did" never includes the project's files as first recorded.
    return [c for c in all_ if not c.is_safety and c.task == task and c.parent is not None]


def unknown_changes(
    ctx: StageContext, rows: list[Checkpoint], sel: Callable[[bytes], bool], take: bool = False
) -> list[UnknownChange]:
    """The checkpoints of ``rows`` labelled ``unknown`` that change a selected path, with those
    paths (each marked ``taken`` as ``take`` says)."""
    out = []
    for cp in rows:
        if cp.metadata.get("actor") != UNKNOWN:
            continue
        step = _step_of(ctx, cp, sel)
        paths = sorted(step.a.keys() | step.b.keys())
        if paths:
            why = cp.metadata.get("attributed")
            out.append(UnknownChange(cp, paths, why if isinstance(why, str) else "", take))
    return out


def task_unknown(ctx: StageContext, task: str, sel: Callable[[bytes], bool]) -> list[UnknownChange]:
    """The ``unknown`` changes of ``task`` (what an actor revert would list), nothing taken."""
    return unknown_changes(ctx, _task_rows(ctx, task), sel)


def _resolve(ctx: StageContext, ref: str) -> Checkpoint:
    from snapstore.records.history import History

    with ctx.backend.read() as view:
        return History(view).resolve(ref, None)


def _step_of(ctx: StageContext, cp: Checkpoint, sel: Callable[[bytes], bool]) -> RevertStep:
    with ctx.backend.read() as view:
        parent = None
        if cp.parent and view.get("checkpoints", bytes.fromhex(cp.parent)) is not None:
            parent = load_one(view, bytes.fromhex(cp.parent))
        if parent is None:
            from snapstore.records import manifest

            return step_between(cp.short_id, {}, manifest.load(view.get, cp.manifest), sel)
    return step_between(cp.short_id, *_entries_pair(ctx, parent.manifest, cp.manifest), sel)


def _entries_pair(
    ctx: StageContext, old: bytes, new: bytes
) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
    from snapstore.ops.diff import manifest_difference

    with ctx.backend.read() as view:
        return manifest_difference(view.get, old, new)


def _log_positions(ctx: StageContext, ids: set[str]) -> dict[str, int]:
    """The log sequence number of each of ``ids`` (one pass over the log's keys and ids;
    references resolve without it, a range needs the order)."""
    wanted = {bytes.fromhex(i) for i in ids}
    out: dict[str, int] = {}
    with ctx.backend.read() as view:
        for key, cid in view.items("log"):
            if cid in wanted:
                out[cid.hex()] = key_seq(key)
    return out
