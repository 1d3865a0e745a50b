"""Selective revert in the UI: take back one checkpoint's changes, or a task's (optionally only
its agent's or its user's), keeping everything changed since.

Like restore, two steps: the preview is ``Store.revert(..., dry_run=True)`` (what happens to
each path: reverted, merged with later edits, or a conflict; the diff from the tree now to the
result), the confirmation re-runs it and acts only if the plan is still the one shown.  Conflicts
are never settled silently: a preview with any says so and offers no Confirm (the CLI's
``--conflicts markers|ours|theirs`` decides them).  A task's changes by one actor leave the
changes labelled ``unknown`` alone: the preview lists them, and a second preview takes them too
only when asked (``include_unknown``).  Undo takes a revert back like a restore.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from snapstore.errors import ConflictError, UsageError
from snapstore.tree.paths import display
from snapstore.ui.html import Html, fmt, join
from snapstore.ui.preview import plural, undo_button

if TYPE_CHECKING:
    from snapstore.ops.revert.record import RevertReport
    from snapstore.store import Store

Page = tuple[str, Html]

#: Bytes of one path's diff shown in a preview, and of all of them.
MAX_DIFF = 64 * 1024
MAX_DIFFS = 1 << 20
ACTORS = ("agent", "user", "unknown")

_WORDS = {"reverted": "goes back", "merged": "merged with the changes made since", "conflict": "conflict", "untouched": "unchanged"}


def digest(report: RevertReport) -> str:
    """What a confirmation must match: what is taken back and every (status, path) planned."""
    h = hashlib.sha256(report.what.encode())
    for o in report.outcomes:
        h.update(b"\0" + o.status.encode() + b"\0" + o.path)
    return h.hexdigest()[:32]


def _scope(ref: str, task: str, actor: str) -> dict[str, str | None]:
    if actor and actor not in ACTORS:
        raise UsageError(f"the actor must be 'agent', 'user' or 'unknown', not {actor!r}")
    if task:
        return {"ref": None, "task": task, "actor": actor or None}
    return {"ref": ref, "task": None, "actor": actor or None}


def _hidden(task: str, actor: str, include_unknown: bool = False) -> Html:
    pairs = (("task", task), ("actor", actor), ("include_unknown", "1" if include_unknown else ""))
    return join(fmt('<input type="hidden" name="{}" value="{}">', k, v) for k, v in pairs if v)


def _unknown(report: RevertReport, task: str, actor: str) -> Html:
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
        _hidden(task, actor, True),
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


def preview(store: Store, ref: str, task: str = "", actor: str = "", notice: str = "", include_unknown: bool = False) -> Page:
    """What reverting would do, and the Confirm button (none when a path would conflict)."""
    scope = _scope(ref, task, actor)
    # (by id: a reference such as "#2" would not survive as a URL path)
    action = "/revert" if task else f"/c/{store.resolve(ref).id}/revert"
    note = fmt('<p class="notice" role="alert">{}</p>', notice) if notice else Html("")
    try:
        report = store.revert(scope["ref"], task=scope["task"], actor=scope["actor"], dry_run=True, include_unknown=include_unknown)
    except ConflictError as exc:
        body = fmt(
            '<h1>Preview: revert</h1>{}<div class="confirmbar"><p class="warn" role="alert"><strong>This revert would conflict with '
            "changes made since:</strong> {}</p><p>Nothing was changed. The command line can write conflict markers or keep "
            "one side: <code>snapstore revert --conflicts markers|ours|theirs</code>.</p></div>",
            note, exc.message,
        )
        return "Preview revert", body
    changed = [o for o in report.outcomes if o.status in ("reverted", "merged")]
    by = {s: sum(1 for o in report.outcomes if o.status == s) for s in ("reverted", "merged")}
    confirm = fmt(
        '<form method="post" action="{}/confirm">{}<input type="hidden" name="plan" value="{}">'
        '<input type="hidden" name="confirm" value="yes"><button type="submit" class="action danger" id="confirm"{}>'
        "Revert {} now</button> <a href=\"/\">Cancel</a></form>",
        action, _hidden(task, actor, include_unknown), digest(report), Html(" disabled") if not changed else Html(""), plural(len(changed), "path"),
    )
    warnings = join(fmt('<p class="warn">{}</p>', w) for w in report.warnings)
    budget = MAX_DIFFS
    rows = []
    for o in report.outcomes:
        head = fmt('<span class="st">{}</span> <code>{}</code>{}', _WORDS.get(o.status, o.status), display(o.path), fmt(" <small>{}</small>", o.note) if o.note else Html(""))
        data = report.diffs.get(o.path)
        if data and budget > 0:
            budget -= min(len(data), MAX_DIFF)
            rows.append(fmt("<li><details><summary>{} <small>(diff)</small></summary>{}</details></li>", head, _udiff(data)))
        else:
            rows.append(fmt("<li>{}</li>", head))
    body = fmt(
        '<h1>Preview: revert {}</h1>{}<div class="confirmbar" role="region" aria-label="Summary and confirmation">'
        "<p><strong>Dry run: nothing has changed yet.</strong> {} would go back, {} would be merged with the changes made "
        "since. Later changes are kept; Undo takes the revert back.</p>{}{}{}</div>"
        '<h2>Every path <small>open one for its diff, tree → after the revert</small></h2><ul class="plan">{}</ul>',
        report.what, note, plural(by["reverted"], "path"), plural(by["merged"], "path"), warnings, _unknown(report, task, actor),
        confirm, join(rows),
    )
    return "Preview revert", body


def confirm(
    store: Store, ref: str, task: str, actor: str, plan: str, confirmed: str, include_unknown: bool = False
) -> Page:
    """Revert, if the user confirmed the plan that is still the plan; else the new preview."""
    if confirmed != "yes":
        raise UsageError("a revert needs an explicit confirmation (the Revert now button)")
    scope = _scope(ref, task, actor)
    moved = "The tree or the store changed since the preview: check the new plan."
    try:
        check = store.revert(scope["ref"], task=scope["task"], actor=scope["actor"], dry_run=True, include_unknown=include_unknown)
    except ConflictError:
        return preview(store, ref, task, actor, moved, include_unknown)
    if digest(check) != plan:
        return preview(store, ref, task, actor, moved, include_unknown)
    report = store.revert(scope["ref"], task=scope["task"], actor=scope["actor"], include_unknown=include_unknown)
    done = [o for o in report.outcomes if o.status in ("reverted", "merged")]
    rows = join(fmt('<li><span class="st">{}</span> <code>{}</code></li>', _WORDS.get(o.status, o.status), display(o.path)) for o in done)
    body = fmt(
        '<h1 id="result">Reverted: {}</h1><div class="confirmbar"><p>{}: {} changed; later changes kept.</p>'
        '<p>Not what you wanted? {} puts the tree back as it was. <a href="/">Back to the timeline</a></p></div>'
        '<ul class="plan">{}</ul>',
        plural(len(done), "path"), report.what, plural(len(done), "path"), undo_button(), rows,
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


__all__ = ["confirm", "digest", "forms", "preview"]
