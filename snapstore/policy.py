"""Checkpoint policy: should this operation get a checkpoint?

The default for agents is one checkpoint per tool call (call ``store.snapshot`` every time: an
unchanged tree costs a few hundred bytes).  Callers that want fewer use
``store.snapshot_if(context)``, which scores the operation with a :class:`Policy`:

=========================  ==========================================================
signal                     contribution to the score (defaults)
=========================  ==========================================================
destructive operation      ``destructive`` (1.0): always enough on its own
user-initiated             ``user_initiated`` (1.0): always enough on its own
files affected             ``per_file`` (0.25) each, at most ``files_cap`` (1.0)
time since last checkpoint ``per_minute`` (0.2) per minute, at most ``time_cap`` (1.0)
=========================  ==========================================================

A checkpoint is taken when the score reaches ``threshold`` (1.0).  So by default: any
destructive or user-initiated operation, an operation touching 4 files or more, or any operation
5 minutes or more after the last checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class OperationContext:
    """What the caller knows about the operation it just ran."""

    files_affected: int = 0
    destructive: bool = False  # deletes, moves, `rm -rf`, `git reset`, formatters over the tree
    user_initiated: bool = False
    tool: str | None = None
    seconds_since_last: float | None = None  # None: the store computes it from its latest


@dataclass
class Decision:
    """The policy's verdict, with the score and the reasons that made it."""

    checkpoint: bool
    score: float
    reasons: list[str] = field(default_factory=list)


@dataclass
class Policy:
    """Weights and threshold; every field can be tuned by the caller."""

    threshold: float = 1.0
    destructive: float = 1.0
    user_initiated: float = 1.0
    per_file: float = 0.25
    files_cap: float = 1.0
    per_minute: float = 0.2
    time_cap: float = 1.0

    def decide(self, ctx: OperationContext, seconds_since_last: float | None = None) -> Decision:
        """Score ``ctx``; ``seconds_since_last`` fills in when the context leaves it None
        (None twice means there is no checkpoint yet, which always warrants one)."""
        since = ctx.seconds_since_last if ctx.seconds_since_last is not None else seconds_since_last
        reasons: list[str] = []
        score = 0.0
        if since is None:
            return Decision(True, float("inf"), ["no checkpoint yet"])
        if ctx.destructive:
            score += self.destructive
            reasons.append("destructive operation")
        if ctx.user_initiated:
            score += self.user_initiated
            reasons.append("user-initiated")
        if ctx.files_affected:
            part = min(self.files_cap, self.per_file * ctx.files_affected)
            score += part
            reasons.append(f"{ctx.files_affected} file(s) affected")
        if since > 0:
            part = min(self.time_cap, self.per_minute * since / 60)
            score += part
            if part >= 0.05:
                reasons.append(f"{since:.0f} s since the last checkpoint")
        return Decision(score >= self.threshold, score, reasons)


def seconds_since(time_ns: int | None) -> float | None:
    return None if time_ns is None else max(0.0, (time.time_ns() - time_ns) / 1e9)


def metadata_for(decision: Decision, context: OperationContext, metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The checkpoint metadata of a checkpoint ``decision`` warranted: ``metadata`` with the
    policy's score and reasons, and the tool when the caller did not name one."""
    out = dict(metadata or {})
    out.setdefault("policy", {"score": round(decision.score, 3), "reasons": decision.reasons})
    if context.tool and "tool" not in out:
        out["tool"] = context.tool
    return out
