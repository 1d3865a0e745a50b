"""Selective revert in the UI: take back one checkpoint's changes, a task's or a range's
(optionally only its agent's, its user's or the unknown ones), keeping everything changed since.

Like restore, two steps: the preview is ``Store.revert(..., dry_run=True)`` (what happens to
each path: reverted, merged with later edits, or a conflict; the diff from the tree now to the
result), the confirmation re-runs it and acts only if the plan is still the one shown.  The
preview lists conflicts first, then merged files, then the user's unsaved work, and flags that
work at the top.  Conflicts are never settled silently: each conflicted file has its own choice
in the page (keep mine, take theirs, write markers; keep mine is preselected and shown), and the
confirmation passes them to the library (``choices``).  A task's changes by one actor leave the
changes labelled ``unknown`` alone: the preview lists them, and a second preview takes them too
only when asked (``include_unknown``).  Undo takes a revert back like a restore.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, NamedTuple

from snapstore.errors import ConflictError, UsageError
from snapstore.tree.paths import display
from snapstore.ui import diffview, here
from snapstore.ui.budget import Budget
from snapstore.ui.html import Html, fmt, join, path_token
from snapstore.ui.preview import plural, undo_button

if TYPE_CHECKING:
    from snapstore.ops.revert.planner import PathOutcome
    from snapstore.ops.revert.record import RevertReport
    from snapstore.store import Store

Page = tuple[str, Html]

#: Bytes of one path's plain diff shown in a preview (once the page's budget for rendered ones is spent).
MAX_DIFF = 64 * 1024
ACTORS = ("agent", "user", "unknown")

_WORDS = {"reverted": "goes back", "merged": "merged with the changes made since", "conflict": "conflict", "untouched": "unchanged"}


class Scope(NamedTuple):
    """What a revert form takes back: a checkpoint (``ref``), a task or a range ``A..B`` (the
    library's), optionally only one actor's changes; ``words`` names a range for people."""

    ref: str = ""
    task: str = ""
    actor: str = ""
    range: str = ""
    include_unknown: bool = False
    words: str = ""

    def check(self) -> Scope:
        if self.actor and self.actor not in ACTORS:
            raise UsageError(f"the actor must be 'agent', 'user' or 'unknown', not {self.actor!r}")
        return self

    def action(self, store: Store) -> str:
        # (by id: a reference such as "#2" would not survive as a URL path)
        return "/revert" if self.task or self.range else f"/c/{store.resolve(self.ref).id}/revert"

    def run(self, store: Store, *, dry_run: bool, choices: dict[bytes, str] | None = None) -> RevertReport:
        """The Store's revert; a dry run plans conflicts with markers (so it lists them all)."""
        return store.revert(
            None if (self.task or self.range) else self.ref, range=self.range or None, task=self.task or None,
            actor=self.actor or None, dry_run=dry_run, include_unknown=self.include_unknown,
            conflicts="markers" if dry_run else "refuse", choices=choices,
        )


def digest(report: RevertReport) -> str:
    """What a confirmation must match: what is taken back and every (status, path) planned."""
    h = hashlib.sha256(report.what.encode())
    for o in report.outcomes:
        h.update(b"\0" + o.status.encode() + b"\0" + o.path)
    return h.hexdigest()[:32]


def _hidden(scope: Scope, include_unknown: bool | None = None) -> Html:
    include = scope.include_unknown if include_unknown is None else include_unknown
    pairs = (("task", scope.task), ("range", scope.range), ("words", scope.words), ("actor", scope.actor),
             ("include_unknown", "1" if include else ""))
    return join(fmt('<input type="hidden" name="{}" value="{}">', k, v) for k, v in pairs if v)


def _unknown(report: RevertReport, scope: Scope) -> Html:
    """The task's changes labelled unknown: listed, with a way to take them too (never silently)."""
    if not report.unknown:
        return Html("")
    items = join(
        fmt("<li><code>{}</code> {}: {}</li>", u.checkpoint.short_id, u.checkpoint.message, ", ".join(display(p) for p in u.paths))
        for u in report.unknown
    )
    if any(u.taken for u in report.unknown):
        return fmt('<p class="warn">Taken back too: {} labelled <em>unknown</em> (no event says who made them):</p><ul>{}</ul>',
                   plural(len(report.unknown), "checkpoint"), items)
    again = fmt(
        '<form class="inline" method="post" action="/revert/preview">{}<button type="submit" class="action" id="include-unknown">'
        "Preview with these unknown changes taken back too…</button></form>",
        _hidden(scope, True),
    )
    return fmt('<div class="notice"><p><strong>Left alone:</strong> {} labelled <em>unknown</em> (a background command of the '
               "agent may have made them, or you while it ran):</p><ul>{}</ul>{}</div>",
               plural(len(report.unknown), "checkpoint"), items, again)


def _udiff(data: bytes) -> Html:
    """A unified diff as lines marked by kind (escaped), cut at :data:`MAX_DIFF` bytes."""
    cut = len(data) > MAX_DIFF
    rows = []
    for line in data[:MAX_DIFF].decode("utf-8", "replace").splitlines():
        kind = "add" if line.startswith("+") and not line.startswith("+++") else "del" if line.startswith("-") and not line.startswith("---") else "hunk" if line.startswith("@@") else "ctx"
        rows.append(fmt('<span class="u-{}">{}</span>', kind, line))
    more = Html('\n<span class="note">… (cut: download the files to see the rest)</span>') if cut else Html("")
    return fmt('<pre class="udiff">{}{}</pre>', join(rows, "\n"), more)


def _order(o: PathOutcome, unsaved: set[bytes]) -> int:
    """Conflicts first, then merged files (the risky ones), unsaved work, the rest; unchanged last."""
    if o.status == "conflict":
        return 0
    if o.status == "merged":
        return 1
    if o.path in unsaved:
        return 2
    return 4 if o.status == "untouched" else 3


def _choice(o: PathOutcome, chosen: str) -> Html:
    """A conflict's per-file choice: keep mine, take theirs, or markers."""
    name = "c." + path_token(o.path)
    ways = (("ours", "keep mine (your lines stay where both changed)"),
            ("theirs", "take theirs (the lines as before the change)"),
            ("markers", "write conflict markers (decide in your editor)"))
    radios = join(
        fmt('<label><input type="radio" name="{}" value="{}"{} form="confirm-form"> {}</label>', name, v, Html(" checked") if v == chosen else Html(""), label)
        for v, label in ways
    )
    lines = ", ".join(c.describe() for c in o.conflicts if c.first_line) or "the whole file"
    why = "; ".join(x for x in (lines, o.note) if x)
    return fmt('<fieldset class="choice"><legend>Settle <code>{}</code> ({})</legend>{}</fieldset>', display(o.path), why, radios)


def _diff(report: RevertReport, path: bytes, budget: Budget) -> Html | None:
    """A path's diff, tree now -> after the revert: highlighted with line numbers and changed
    words while the page's budget lasts, then plain."""
    change = report.changes.get(path)
    if change is not None and not budget.exhausted():
        return diffview.change_body(change, "unified", budget)
    data = report.diffs.get(path)
    return _udiff(data) if data else None


def _rows(report: RevertReport, unsaved: set[bytes], choices: dict[bytes, str]) -> Html:
    budget = Budget()
    rows = []
    for o in sorted(report.outcomes, key=lambda o: _order(o, unsaved)):
        flag = Html(' <strong class="warn">your unsaved work: kept</strong>') if o.path in unsaved else Html("")
        word = "conflict: you choose" if o.status == "conflict" else _WORDS.get(o.status, o.status)
        head = fmt('<span class="st st-{}">{}</span> <code>{}</code>{}{}', o.status, word, display(o.path), flag, fmt(" <small>{}</small>", o.note) if o.note else Html(""))
        pick = _choice(o, choices.get(o.path, "ours")) if o.status == "conflict" and o.conflicts else Html("")
        diff = _diff(report, o.path, budget)
        if diff is not None:
            rows.append(fmt('<li class="st-{}"><details><summary>{} <small>(diff)</small></summary>{}</details>{}</li>', o.status,
                            head, diff, pick))
        else:
            rows.append(fmt('<li class="st-{}">{}{}</li>', o.status, head, pick))
    return join(rows)


def preview(store: Store, scope: Scope, notice: str = "", choices: dict[bytes, str] | None = None) -> Page:
    """What reverting would do, conflicts first with a choice per file, and the Confirm button."""
    scope.check()
    action = scope.action(store)
    note = fmt('<p class="notice" role="alert">{}</p>', notice) if notice else Html("")
    report = scope.run(store, dry_run=True)
    unsaved = here.unsaved(store)
    by = {s: sum(1 for o in report.outcomes if o.status == s) for s in ("reverted", "merged", "conflict")}
    changed = by["reverted"] + by["merged"] + by["conflict"]
    confirm = fmt(
        '<form method="post" action="{}/confirm" id="confirm-form">{}<input type="hidden" name="plan" value="{}">'
        '<input type="hidden" name="confirm" value="yes"><button type="submit" class="action danger" id="confirm"{}>'
        "Revert {} now</button> <a href=\"/\">Cancel</a></form>",
        action, _hidden(scope), digest(report), Html(" disabled") if not changed else Html(""), plural(changed, "path"),
    )
    mine = [o for o in report.outcomes if o.path in unsaved]
    flagged = Html("")
    if mine:
        flagged = fmt(
            '<p class="warn" role="alert"><strong>Your unsaved work in {}:</strong> {}. The revert merges around it and records '
            "the tree first, so Undo brings it back exactly.</p>",
            plural(len(mine), "file"), join((fmt("<code>{}</code>", display(o.path)) for o in mine), ", "),
        )
    clash = Html("")
    if by["conflict"]:
        clash = fmt(
            '<p class="warn"><strong>{} changed where the revert would:</strong> choose per file below '
            "(keep mine is chosen; nothing is written until you confirm).</p>",
            plural(by["conflict"], "file"),
        )
    warnings = join(fmt('<p class="warn">{}</p>', w) for w in report.warnings)
    body = fmt(
        '<h1>Preview: revert {}</h1>{}<div class="confirmbar" role="region" aria-label="Summary and confirmation">'
        "<p><strong>Dry run: nothing has changed yet.</strong> {} would go back, {} would be merged with the changes made "
        "since, {} in conflict. Later changes are kept; Undo takes the revert back.</p>{}{}{}{}{}</div>"
        '<h2>Every path <small>conflicts and merged files first; open one for its diff, tree → after the revert</small></h2>'
        '<ul class="plan">{}</ul>',
        scope.words or report.what, note, plural(by["reverted"], "path"), plural(by["merged"], "path"), plural(by["conflict"], "path"),
        flagged, clash, warnings, _unknown(report, scope), confirm, _rows(report, unsaved, choices or {}),
    )
    return "Preview revert", body


def confirm(store: Store, scope: Scope, plan: str, confirmed: str, choices: dict[bytes, str]) -> Page:
    """Revert, if the user confirmed the plan that is still the plan (each conflict settled as
    chosen in the page); else the new preview."""
    if confirmed != "yes":
        raise UsageError("a revert needs an explicit confirmation (the Revert now button)")
    scope.check()
    moved = "The tree or the store changed since the preview: check the new plan."
    check = scope.run(store, dry_run=True)
    if digest(check) != plan:
        return preview(store, scope, moved, choices)
    wanted = {o.path: choices.get(o.path, "ours") for o in check.conflicted}
    try:
        report = scope.run(store, dry_run=False, choices=wanted)
    except ConflictError:
        return preview(store, scope, moved, choices)
    done = [o for o in report.outcomes if o.status in ("reverted", "merged", "conflict")]
    rows = join(fmt('<li><span class="st">{}</span> <code>{}</code></li>', _WORDS.get(o.status, o.status), display(o.path)) for o in done)
    body = fmt(
        '<h1 id="result">Reverted: {}</h1><div class="confirmbar"><p>{}: {} changed; later changes kept.</p>'
        '<p>Not what you wanted? {} puts the tree back as it was. <a href="/">Back to the timeline</a></p></div>'
        '<ul class="plan">{}</ul>',
        plural(len(done), "path"), scope.words or report.what, plural(len(done), "path"), undo_button(), rows,
    )
    return "Reverted", body


def forms(cp_id: str, task: str | None, actor: str | None) -> Html:
    """The checkpoint page's revert buttons: this checkpoint, and (with a task) the task's
    changes, optionally only its agent's or its user's."""
    one = fmt(
        '<form class="inline" method="post" action="/c/{}/revert/preview"><button type="submit" class="action" id="revert">'
        "Preview taking back this checkpoint's changes…</button></form>",
        cp_id,
    )
    if not task:
        return one
    chosen = actor if actor in ACTORS else ""
    options = join(
        fmt('<option value="{}"{}>{}</option>', v, Html(" selected") if v == chosen else Html(""), label)
        for v, label in (("", "everyone's"), ("agent", "the agent's"), ("user", "the user's"), ("unknown", "the unknown"))
    )
    whole = fmt(
        '<form class="inline" method="post" action="/revert/preview"><input type="hidden" name="task" value="{}">'
        '<label>Take back <select name="actor">{}</select> changes of task <strong>{}</strong></label> '
        '<button type="submit" class="action" id="revert-task">Preview…</button></form>',
        task, options, task,
    )
    return fmt("{} {}", one, whole)


__all__ = ["Scope", "confirm", "digest", "forms", "preview"]
