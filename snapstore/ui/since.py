"""Undo what the agent did since here: a range of the timeline, one actor's changes in it.

A range is picked on the timeline: "last hour" (or "last day"), "since here" on a row (a
prompt's row says "since this prompt"), or two ticked rows.  Its page (``/range``) names the
range in the timeline's numbers, lists the actor's checkpoints in it, and shows their changes
combined: each file from before the actor first changed it in the range to after the actor last
changed it (edits by others to the same file in between are marked: the revert keeps them).  One
button leads to the revert's preview (:mod:`snapstore.ui.revert`) of the library's range revert
by actor (``Store.revert(range="A..B", actor=...)``), which merges line by line and keeps
everything else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from snapstore.errors import RefError, UsageError
from snapstore.ops.diff import Change, compare
from snapstore.records.checkpoint import Checkpoint
from snapstore.records.manifest import Entry
from snapstore.tree.paths import display
from snapstore.ui.budget import Budget
from snapstore.ui.changes import changes_section
from snapstore.ui.html import Html, fmt, join, path_token, time_el, url, who

if TYPE_CHECKING:
    from snapstore.store import Store

Page = tuple[str, Html]

ACTORS = ("agent", "user", "unknown")
#: The chips: how far back each reaches, in seconds.
WINDOWS = {"1h": ("the last hour", 3600), "1d": ("the last day", 86400)}
#: Checkpoints a range page lists and combines at most (a longer range is cut, and says so).
MAX_ROWS = 2000


@dataclass(frozen=True)
class Range:
    """Checkpoints ``first`` to ``last`` of the log (both included, log numbers set), the
    visible ones between (newest first), and the actor whose changes count ("": everyone's)."""

    first: Checkpoint
    last: Checkpoint
    rows: list[Checkpoint]
    actor: str
    #: The record just before ``first`` (the library's ranges start after their first end).
    before: Checkpoint | None
    words: str

    @property
    def spec(self) -> str:
        """The library's ``A..B`` for this range (A excluded, B included)."""
        return f"{(self.before or self.first).id}..{self.last.id}"

    @property
    def chosen(self) -> list[Checkpoint]:
        """The actor's checkpoints that record a change (newest first)."""
        return [c for c in self.rows if c.parent is not None and (not self.actor or c.metadata.get("actor") == self.actor)]


def actor_word(actor: str) -> str:
    """``the agent's``, ``everyone's``."""
    return f"the {actor}'s" if actor else "everyone's"


def _newest(store: Store) -> Checkpoint:
    rows, _ = store.log_page(limit=1)
    if not rows:
        raise RefError("no checkpoint yet: nothing to take back")
    return rows[0]


def _since(store: Store, seconds: int) -> Checkpoint:
    """The oldest visible checkpoint of the last ``seconds``."""
    cutoff = time.time_ns() - seconds * 1_000_000_000
    found: Checkpoint | None = None
    cursor: int | None = None
    while True:
        rows, after = store.log_page(before=cursor, limit=100)
        for c in rows:
            if c.time_ns < cutoff:
                return _or_none(found)
            found = c
        if after is None:
            return _or_none(found)
        cursor = after


def _or_none(found: Checkpoint | None) -> Checkpoint:
    if found is None:
        raise RefError("no checkpoint in that time")
    return found


def pick(store: Store, start: str, end: str, since: str, picks: list[str], actor: str) -> Range:
    """The range a request names: two ticked rows (``picks``), a window (``since``: 1h, 1d),
    or ``start`` (to ``end``, else the newest)."""
    if actor and actor not in ACTORS:
        raise UsageError(f"the actor must be 'agent', 'user' or 'unknown', not {actor!r}")
    if picks:
        if len(picks) != 2:
            raise UsageError(f"tick two rows for a range (or one row's \"since here\"), not {len(picks)}")
        start, end = picks
    if since:
        if since not in WINDOWS:
            raise UsageError(f"the window must be one of {', '.join(WINDOWS)}, not {since!r}")
        words, seconds = WINDOWS[since]
        first, last = _since(store, seconds), _newest(store)
    elif start:
        first = store.log_neighbours(start, include_safety=True)[0]
        last = store.log_neighbours(end, include_safety=True)[0] if end else _newest(store)
        if first.seq > last.seq:
            first, last = last, first
        words = f"#{first.seq} to #{last.seq}"
    else:
        raise UsageError("name a range: a window (last hour), a row (since here) or two ticked rows")
    before = store.log_neighbours(first.id, include_safety=True)[2]
    rows = _rows(store, first, last)
    return Range(first, last, rows, actor, before, words)


def _rows(store: Store, first: Checkpoint, last: Checkpoint) -> list[Checkpoint]:
    """The visible checkpoints from ``first`` to ``last``, newest first."""
    out: list[Checkpoint] = []
    cursor: int | None = last.seq + 1
    while cursor is not None and len(out) < MAX_ROWS:
        rows, cursor = store.log_page(before=cursor, limit=200)
        for c in rows:
            if c.seq < first.seq:
                return out
            out.append(c)
    return out


def combined(store: Store, chosen: list[Checkpoint]) -> tuple[list[Change], set[bytes]]:
    """The chosen checkpoints' changes combined per file (oldest side of the first change to
    the newest side of the last), and the paths someone else changed in between."""
    olds: dict[bytes, Entry | None] = {}
    news: dict[bytes, Entry | None] = {}
    loaders: dict[bytes, list[Change]] = {}
    ids = {c.id for c in chosen}
    for cp in reversed(chosen):  # oldest first
        for ch in store.changes(cp.id):
            olds.setdefault(ch.path, ch.old)
            news[ch.path] = ch.new
            loaders.setdefault(ch.path, []).append(ch)
    old = {p: e for p, e in olds.items() if e is not None}
    new = {p: e for p, e in news.items() if e is not None}
    out = []
    for c in compare(old, new):
        seen = loaders[c.path]
        out.append(Change(c.status, c.path, c.old, c.new, seen[0]._old_loader, seen[-1]._new_loader))
    return out, _others(store, chosen, ids, set(olds))


def _others(store: Store, chosen: list[Checkpoint], ids: set[str], paths: set[bytes]) -> set[bytes]:
    """Of ``paths``, those a checkpoint not chosen changed between the chosen ones."""
    if not chosen:
        return set()
    rows = _rows(store, chosen[-1], chosen[0])
    hit: set[bytes] = set()
    for c in rows:
        if c.id not in ids and c.parent is not None:
            hit |= {ch.path for ch in store.changes(c.id) if ch.path in paths}
    return hit


def range_form(r: Range, label: str) -> Html:
    """The button leading to the revert preview of the range's actor's changes."""
    return fmt(
        '<form class="inline" method="post" action="/revert/preview"><input type="hidden" name="range" value="{}">'
        '<input type="hidden" name="actor" value="{}"><input type="hidden" name="words" value="{}">'
        '<button type="submit" class="action" id="revert-range">{}</button></form>',
        r.spec, r.actor, f"{actor_word(r.actor)} changes in {r.words}", label,
    )


def page(store: Store, r: Range, view: str, budget: Budget | None = None, *, read_only: bool = False) -> Page:
    """The range: its checkpoints by the actor, their combined diff, and the way to take them back."""
    chosen = r.chosen
    changes, others = combined(store, chosen)
    counts = store.line_counts(changes)
    whose = actor_word(r.actor)
    switch = join(
        [fmt('<a href="{}"{}>{}</a>', url("/range", start=r.first.id, end=r.last.id, actor=a), Html(' aria-current="true"') if a == r.actor else Html(""), actor_word(a))
         for a in ("agent", "user", "unknown", "")],
        " · ",
    )
    act = Html("")
    if chosen and not read_only:
        act = range_form(r, f"Preview taking back {whose} changes…")
    mixed = Html("")
    if others:
        mixed = fmt(
            '<p class="note">Also changed by someone else in between (their lines show in these diffs; the revert keeps them): {}</p>',
            join((fmt("<code>{}</code>", display(p)) for p in sorted(others)), ", "),
        )
    listing = join(
        fmt('<li><a href="/c/{}">#{}</a> {} <small>{} · {}</small></li>', c.id, c.seq, c.message or "(no message)", who(c) or "–", time_el(c.time_ns, relative=True))
        for c in chosen
    )
    section = changes_section(
        changes, counts, view, file_link=lambda c: fmt('<a href="{}">history</a>', url("/history", p=path_token(c.path))),
        view_link=lambda v: url("/range", start=r.first.id, end=r.last.id, actor=r.actor, view=v), budget=budget,
    )
    body = fmt(
        '<h1>{} changes in {}</h1><p class="range-head">From <a href="/c/{}">#{}</a> to <a href="/c/{}">#{}</a>: '
        "{} of {} checkpoints. Show: {}</p>"
        '<div class="confirmbar" role="region" aria-label="Take back">{}{}</div>'
        "<h2>Changed files <small>combined: before the first change to after the last</small></h2>{}"
        "<details><summary>The {} checkpoints</summary><ul>{}</ul></details>",
        whose.capitalize(), r.words, r.first.id, r.first.seq, r.last.id, r.last.seq, len(chosen), len(r.rows), switch,
        act, mixed, section, len(chosen), listing,
    )
    return "Range", body


__all__ = ["ACTORS", "WINDOWS", "Range", "actor_word", "combined", "page", "pick", "range_form"]
