"""Retention: which checkpoints to keep, the store's retention policy, and removing checkpoints.

Keep rules (``prune`` options and the ``retention.*`` config keys); a checkpoint is kept when
any rule keeps it:

* ``keep_last N``: the N newest user checkpoints (of the task, with ``task``).  Safety
  checkpoints (recorded by restore/undo) are not counted and not kept by this rule.
* ``keep_within D``: every checkpoint (safety ones included) younger than D.
* ``keep_tagged``: every checkpoint a tag names.

Whatever the rules say, these are **protected** and never removed by ``prune`` or ``delete``:

* the ``before`` and ``target`` checkpoints of the newest :data:`UNDO_DEPTH` operations of the
  operation log (what ``undo``, repeated, can reach);
* the ``target`` and ``before`` checkpoints of a pending restore journal (crash recovery).

Removing a checkpoint deletes its record, its ``log`` entry and the tags naming it, in one
transaction per batch; the data it referenced stays until ``gc``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from snapstore.errors import CorruptError, UsageError
from snapstore.records.checkpoint import PATHS_INDEX_META, SAFETY, Checkpoint
from snapstore.storage import lmdb_durability as durability
from snapstore.storage.backend import CONFIG_PREFIX, ReadView, WriteBatch


class ConfigTables(Protocol):
    """What removing checkpoints needs of a backend (storage.backend.Backend, typed)."""

    def read(self) -> AbstractContextManager[ReadView]: ...

    def write(self) -> AbstractContextManager[WriteBatch]: ...

    def sync(self) -> None: ...

#: How many operations of the oplog keep their checkpoints (``undo`` repeated this many times).
UNDO_DEPTH = 10

#: Checkpoints removed per transaction.
REMOVE_BATCH = 1000

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"(\d+)([smhdwy])")


def parse_duration(text: str) -> int:
    """Seconds in a duration like ``30m``, ``12h``, ``7d``, ``2w``, ``1d12h``."""
    s = str(text).strip().lower()
    if not s or _DURATION.sub("", s):
        raise UsageError(
            f"bad duration {text!r}: use a number and a unit s, m, h, d, w or y (e.g. 30m, 12h, 7d)"
        )
    total = sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(s))
    if total <= 0:
        raise UsageError(f"bad duration {text!r}: it must be longer than zero")
    return total


def parse_count(text: str | int, what: str = "--keep-last") -> int:
    try:
        n = int(text)
    except (TypeError, ValueError):
        raise UsageError(f"{what} takes a whole number, not {text!r}") from None
    if n < 1:
        raise UsageError(f"{what} must be at least 1")
    return n


# -- the store's configuration (meta table) --------------------------------------------------



def _bool(text: str) -> str:
    t = str(text).strip().lower()
    if t in ("true", "yes", "on", "1"):
        return "true"
    if t in ("false", "no", "off", "0"):
        return "false"
    raise UsageError(f"expected true or false, not {text!r}")


def _bounded(text: str, what: str, low: int, high: int) -> str:
    try:
        n = int(str(text).strip())
    except ValueError:
        n = low - 1
    if not low <= n <= high:
        raise UsageError(f"{what} must be a whole number from {low} to {high}, not {text!r}")
    return str(n)


def _fraction(text: str, what: str) -> str:
    try:
        f = float(str(text).strip())
    except ValueError:
        f = -1.0
    if not 0.0 <= f <= 1.0:
        raise UsageError(f"{what} must be a fraction from 0 to 1, not {text!r}")
    return str(f)


def _choice(text: str, what: str, choices: tuple[str, ...]) -> str:
    t = str(text).strip().lower()
    if t not in choices:
        raise UsageError(f"{what} must be one of {', '.join(choices)}, not {text!r}")
    return t


def _identity(text: str) -> str:
    """``remote.identity``: ``system``, ``anonymous``, or a name (``NAME`` or ``NAME@HOST``)."""
    t = str(text).strip()
    if t.lower() in ("system", "anonymous"):
        return t.lower()
    user, _, host = t.partition("@")
    if not user or len(user) > 256 or len(host) > 256 or any(not c.isprintable() for c in t):
        raise UsageError(
            f"remote.identity must be system, anonymous, or NAME[@HOST] (printable, at most 256 "
            f"characters each), not {text!r}"
        )
    return t


def _seconds(text: str, what: str) -> str:
    """Seconds from 0 to 600 (remote.retry-budget: a signed request must not outlive its
    signature; the same rule as snapstore.remote.retry.parse_budget)."""
    try:
        f = float(str(text).strip().lower().removesuffix("s"))
    except ValueError:
        f = -1.0
    if not 0.0 <= f <= 600.0:
        raise UsageError(f"{what} must be a number of seconds from 0 to 600, not {text!r}")
    return f"{f:g}"


#: key -> (default shown when unset, normaliser of a value to store).
CONFIG_KEYS: dict[str, tuple[str, Callable[[str], str]]] = {
    "retention.keep-last": ("off", lambda v: str(parse_count(v, "retention.keep-last"))),
    "retention.keep-within": ("off", lambda v: (parse_duration(v), str(v).strip().lower())[1]),
    "retention.keep-tagged": ("true", _bool),
    "retention.gc": ("false", _bool),
    "service.idle-timeout": ("1800", lambda v: str(parse_count(v, "service.idle-timeout"))),
    "service.autostart": ("true", _bool),
    "hooks.background-window": ("600", lambda v: _bounded(v, "hooks.background-window", 1, 1 << 31)),
    "storage.delta-depth": ("10", lambda v: _bounded(v, "storage.delta-depth", 0, 64)),
    "storage.durability": (durability.DEFAULT, lambda v: _choice(v, "storage.durability", durability.MODES)),
    "gc.repack-below": ("0.5", lambda v: _fraction(v, "gc.repack-below")),
    "gc.consolidate": ("full", lambda v: _choice(v, "gc.consolidate", ("full", "loose", "off"))),
    "maintenance.auto": ("true", _bool),
    "maintenance.checkpoints": ("32", lambda v: _bounded(v, "maintenance.checkpoints", 1, 1 << 30)),
    "maintenance.loose-packs": ("16", lambda v: _bounded(v, "maintenance.loose-packs", 2, 1 << 30)),
    "maintenance.budget-ms": ("250", lambda v: _bounded(v, "maintenance.budget-ms", 1, 3_600_000)),
    "maintenance.detach": ("true", _bool),
    "remote.retry-budget": ("60", lambda v: _seconds(v, "remote.retry-budget")),
    "remote.identity": ("system", _identity),
    "watch.check-interval": ("300", lambda v: _bounded(v, "watch.check-interval", 1, 1 << 31)),
}
UNSET = ("off", "none", "")


def config_key(key: str) -> bytes:
    if key not in CONFIG_KEYS:
        known = ", ".join(CONFIG_KEYS)
        raise UsageError(f"unknown config key {key!r} (known: {known})")
    return CONFIG_PREFIX + key.encode()


def normalise(key: str, value: str) -> str | None:
    """The value to store for ``key`` (None: unset it, back to the default)."""
    config_key(key)
    if str(value).strip().lower() in UNSET and key in ("retention.keep-last", "retention.keep-within"):
        return None
    return CONFIG_KEYS[key][1](value)


def read_config(view: ReadView) -> dict[str, str]:
    """Every configuration key with its value (the default when unset), each stored value
    checked by the rule that wrote it: a value no ``config set`` could have stored (not UTF-8,
    not a count or a duration) is CorruptError ("damaged"), not a crash later."""
    out: dict[str, str] = {}
    for key, (default, _) in CONFIG_KEYS.items():
        raw = view.get("meta", config_key(key))
        if raw is None:
            out[key] = default
            continue
        try:
            text = raw.decode("utf-8")
            if normalise(key, text) != text:
                raise ValueError("not in its stored form")
        except (UnicodeDecodeError, ValueError, UsageError) as exc:
            raise CorruptError(
                f"the store's configuration {key} is damaged ({exc}); "
                f"reset it with 'snapstore config --unset {key}'"
            ) from exc
        out[key] = text
    return out


@dataclass(frozen=True)
class RetentionRules:
    keep_last: int | None = None
    keep_within: int | None = None  # seconds
    keep_tagged: bool = False

    @property
    def active(self) -> bool:
        return self.keep_last is not None or self.keep_within is not None or self.keep_tagged


def policy_from_config(values: dict[str, str]) -> RetentionRules | None:
    """The automatic policy, or None when neither keep-last nor keep-within is set."""
    last = values.get("retention.keep-last", "off")
    within = values.get("retention.keep-within", "off")
    if last == "off" and within == "off":
        return None
    return RetentionRules(
        keep_last=None if last == "off" else int(last),
        keep_within=None if within == "off" else parse_duration(within),
        keep_tagged=values.get("retention.keep-tagged", "true") == "true",
    )


# -- selection --------------------------------------------------------------------------------


def protected(view: ReadView) -> dict[str, str]:
    """Checkpoint id -> why it must stay (undo reach, pending journal)."""
    from snapstore.records.oplog import Operation

    out: dict[str, str] = {}
    for i, (key, value) in enumerate(view.items("oplog", reverse=True)):
        if i >= UNDO_DEPTH:
            break
        op = Operation.parse(key, value)
        out.setdefault(op.before, f"undo can reach it (operation {op.seq})")
        out.setdefault(op.target, f"undo can reach it (operation {op.seq})")
    from snapstore.ops.restore.journal import pending_ids  # the one parser of the journal

    for cid in pending_ids(view):
        out[cid.hex()] = "a pending restore needs it"
    return out


@dataclass
class PruneReport:
    """What prune removed (or, with ``dry_run``, would remove)."""

    removed: list[Checkpoint] = field(default_factory=list)
    kept: int = 0
    protected: int = 0  # kept only because undo or a pending restore needs them
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "removed": [c.to_json() for c in self.removed],
            "kept": self.kept,
            "protected": self.protected,
        }


def select(
    checkpoints: list[Checkpoint],
    policy: RetentionRules,
    guarded: dict[str, str],
    *,
    task: str | None = None,
    now_ns: int | None = None,
) -> PruneReport:
    """Apply ``policy`` to ``checkpoints`` (oldest first, tags filled in)."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    scope = [c for c in checkpoints if task is None or c.task == task]
    keep: set[str] = set()
    if policy.keep_last is not None:
        users = [c for c in reversed(scope) if c.kind != SAFETY]
        keep.update(c.id for c in users[: policy.keep_last])
    if policy.keep_within is not None:
        cutoff = now_ns - policy.keep_within * 1_000_000_000
        keep.update(c.id for c in scope if c.time_ns >= cutoff)
    if policy.keep_tagged:
        keep.update(c.id for c in scope if c.tags)
    report = PruneReport()
    for c in scope:
        if c.id in keep:
            report.kept += 1
        elif c.id in guarded:
            report.kept += 1
            report.protected += 1
        else:
            report.removed.append(c)
    return report


def remove(backend: ConfigTables, checkpoints: list[Checkpoint]) -> None:
    """Delete the records, log entries and tags of ``checkpoints`` (the caller holds the lock).

    A checkpoint's record, log entry and tags go in the same transaction (batches of
    REMOVE_BATCH checkpoints), so a crash never leaves a log entry or a tag naming a missing
    record.
    """
    if not checkpoints:
        return
    from snapstore.ops import pathlog

    doomed: dict[bytes, list[tuple[str, bytes]]] = {bytes.fromhex(c.id): [] for c in checkpoints}
    with backend.read() as view:
        for table in ("log", "tags", "tasks"):
            for k, v in view.items(table):
                if v in doomed:
                    doomed[v].append((table, k))
        indexed = pathlog.complete(view)
        affected = pathlog.after_removal(view, set(doomed)) if indexed else set()
    ids = list(doomed)
    for start in range(0, len(ids), REMOVE_BATCH):
        with backend.write() as batch:
            if start == 0 and indexed:
                # Until the repair below commits, the index is not to be trusted (a crash in
                # between: log reads history the old way; the next snapshot rebuilds it).
                batch.delete("meta", PATHS_INDEX_META)
            for cid in ids[start : start + REMOVE_BATCH]:
                for table, k in doomed[cid]:
                    batch.delete(table, k)
                batch.delete("checkpoints", cid)
    if indexed:
        with backend.read() as view, backend.write() as batch:
            pathlog.repair(view, batch, affected)
    backend.sync()
