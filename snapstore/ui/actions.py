"""The pages that change things: restore (whole tree or files), undo, tags, and the rewind download.

Every action that changes files goes in two steps: a *preview* (the Store call with
``dry_run=True``: what would change, and which of those paths hold work that no checkpoint has
yet) and a *confirmation* (a POST carrying a digest of the previewed plan).  The confirmation
runs the same dry run again and refuses, showing the new preview, when the plan is no longer
the one the user saw; otherwise it makes the one Store call and shows the result with an Undo
button.  The routes that reach these functions accept only same-origin POSTs (see security).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from snapstore import render
from snapstore.errors import UsageError
from snapstore.records.checkpoint import Checkpoint
from snapstore.tree.paths import display
from snapstore.ui.diffview import STATUS_WORDS
from snapstore.ui.here import unsaved
from snapstore.ui.html import Html, fmt, join, path_token, tags_el
from snapstore.ui.preview import plan_page, plural, tree_to_target, undo_button

if TYPE_CHECKING:
    from snapstore.ops.restore import RestoreReport
    from snapstore.store import Store

Page = tuple[str, Html]



def plan_digest(report: RestoreReport) -> str:
    """What a confirmation must match: the target and every (status, path) the dry run planned."""
    h = hashlib.sha256(report.target.id.encode())
    for c in report.changes:
        h.update(b"\0" + c.status.encode() + b"\0" + c.path)
    return h.hexdigest()[:32]


# -- pieces other pages show ------------------------------------------------------------------


def tag_forms(cp: Checkpoint) -> Html:
    """The checkpoint's tags, each with a Remove button, and a form to add one."""
    existing = join(
        fmt(
            '<form class="inline" method="post" action="/c/{}/untag"><input type="hidden" name="name" value="{}">'
            '{} <button type="submit" class="small" aria-label="remove tag {}">remove</button></form> ',
            cp.id, t, tags_el([t]), t,
        )
        for t in cp.tags
    )
    add = fmt(
        '<form class="inline" method="post" action="/c/{}/tag"><label>New tag <input name="name" required size="14"></label> <button type="submit" class="small">Add tag</button></form>',
        cp.id,
    )
    return fmt("{}{}", existing, add)


def checkpoint_actions(cp: Checkpoint, *, read_only: bool = False) -> Html:
    """The checkpoint page's action bar (each button leads to a preview first; ``read_only``:
    only the link to compare it with its parent)."""
    from snapstore.ui import revert

    parent = fmt(' · <a href="/compare?a={}&amp;b={}">Compare with its parent</a>', cp.parent[:12], cp.short_id) if cp.parent else Html("")
    if read_only:
        return fmt('<div class="actions">{}</div>', Html(parent.removeprefix(" · ")))
    actor = cp.metadata.get("actor")
    back = Html("") if cp.is_safety else fmt('<div class="actions">{}</div>', revert.forms(cp.id, cp.task, actor if isinstance(actor, str) else None))
    return fmt(
        '<div class="actions"><form class="inline" method="post" action="/c/{}/restore/preview">'
        '<button type="submit" class="action" id="restore-all">Preview restoring the whole tree to this checkpoint…</button></form>'
        ' <a href="/compare?a={}">Compare with the working tree</a>{}</div>{}',
        cp.id, cp.short_id, parent, back,
    )


# -- restore ----------------------------------------------------------------------------------


def _hidden_paths(paths: list[bytes]) -> Html:
    return join(fmt('<input type="hidden" name="p" value="{}">', path_token(p)) for p in paths)


def _user_paths(paths: list[bytes]) -> list[str] | None:
    return [p.decode("utf-8", "surrogateescape") for p in paths] or None


def restore_preview(store: Store, ref: str, paths: list[bytes], notice: str = "", rewind: bool = False) -> Page:
    """What restoring ``ref`` (all of it, or ``paths``) would do, and the Confirm button;
    ``rewind``: the result also hands back the conversation (rewind files and conversation)."""
    report = store.restore(ref, _user_paths(paths), dry_run=True)
    target = report.target
    scope = join((fmt("<code>{}</code>", display(p)) for p in paths), ", ") if paths else Html("the whole tree")
    n = len(report.changes)
    confirm = fmt(
        '<form method="post" action="/c/{}/restore">{}{}<input type="hidden" name="plan" value="{}">'
        '<input type="hidden" name="confirm" value="yes"><button type="submit" class="action danger" id="confirm"{}>'
        "Restore {} now</button> <a href=\"/c/{}\">Cancel</a></form>",
        target.id, _hidden_paths(paths), Html('<input type="hidden" name="rewind" value="1">') if rewind else Html(""),
        plan_digest(report), Html(" disabled") if not n else Html(""), plural(n, "path"), target.id,
    )
    diffs = tree_to_target(store, target.id, paths) if report.changes else {}
    body = fmt(
        '<h1>Preview: restore {} to checkpoint <a href="/c/{}">{}</a></h1><p class="message">{}</p>{}{}',
        scope, target.id, target.short_id, target.message or "(no message)", conversation_note(store, target) if rewind else Html(""),
        plan_page(report, unsaved(store), diffs, verb="Restoring", confirm=confirm, notice=notice),
    )
    return "Preview restore", body


def conversation_note(store: Store, target: Checkpoint) -> Html:
    """What a rewind of files and conversation does to the conversation, in words: how many
    messages the one handed back holds, how many later ones it leaves out, and how to resume."""
    if target.conversation is None:
        return Html('<p class="notice" id="rewind-note"><strong>The conversation:</strong> this checkpoint stores none, so only the files go back.</p>')
    kept = len(store.conversation(target.id) or [])
    newest = next((c for c in store.log_page(limit=50, task=target.task)[0] if c.conversation is not None), None)
    later = max(0, len(store.conversation(newest.id) or []) - kept) if newest is not None else 0
    session = target.metadata.get("session_id")
    resume = Html("")
    if isinstance(session, str) and session and target.metadata.get("event"):
        resume = fmt(" For Claude Code, <code>snapstore rewind --claude-session {} --to {}</code> writes a session that resumes here.", session, target.short_id)
    return fmt(
        '<p class="notice" id="rewind-note"><strong>The conversation:</strong> the agent holds the live one, so it is not changed '
        "from here. After Confirm you get it as it was at this checkpoint (JSON, {}), without the {} sent after it; "
        "give it to the agent to go on from here.{}</p>",
        plural(kept, "message"), plural(later, "message"), resume,
    )


def restore_confirm(store: Store, ref: str, paths: list[bytes], plan: str, confirm: str, rewind: bool = False) -> Page:
    """Restore, if the user confirmed the plan that is still the plan; else the new preview."""
    if confirm != "yes":
        raise UsageError("a restore needs an explicit confirmation (the Restore now button)")
    check = store.restore(ref, _user_paths(paths), dry_run=True)
    if plan_digest(check) != plan:
        return restore_preview(store, ref, paths, "The tree or the store changed since the preview: check the new plan.", rewind)
    report = store.restore(check.target.id, _user_paths(paths))
    back = Html("")
    if rewind and report.target.conversation is not None:
        back = fmt(
            '<p class="notice" id="rewound"><a class="action" href="/c/{}/conversation.json" download>Download the conversation '
            "up to this checkpoint (JSON)</a>: the files are back; give it to the agent to rewind the conversation too.</p>",
            report.target.id,
        )
    return "Restored", fmt("{}{}", back, _result(report))


# -- undo -------------------------------------------------------------------------------------


def undo_preview(store: Store, notice: str = "") -> Page:
    """What undoing the last operation would do, and the Confirm button."""
    report = store.undo(dry_run=True)
    confirm = fmt(
        '<form method="post" action="/undo"><input type="hidden" name="plan" value="{}"><input type="hidden" name="confirm" value="yes">'
        '<button type="submit" class="action danger" id="confirm">Undo now ({})</button> <a href="/ops">Cancel</a></form>',
        plan_digest(report), plural(len(report.changes), "path"),
    )
    diffs = tree_to_target(store, report.target.id, []) if report.changes else {}
    body = fmt(
        '<h1>Preview: undo the last operation</h1><p>The tree would go back to checkpoint <a href="/c/{}">{}</a> '
        "(as it was before the last restore or undo).</p>{}",
        report.target.id, report.target.short_id,
        plan_page(report, unsaved(store), diffs, verb="Undoing", confirm=confirm, notice=notice),
    )
    return "Preview undo", body


def undo_confirm(store: Store, plan: str, confirm: str) -> Page:
    """Undo, if the user confirmed the plan that is still the plan; else the new preview."""
    if confirm != "yes":
        raise UsageError("an undo needs an explicit confirmation (the Undo now button)")
    if plan_digest(store.undo(dry_run=True)) != plan:
        return undo_preview(store, "The tree or the store changed since the preview: check the new plan.")
    return "Undone", _result(store.undo())


def _result(report: RestoreReport) -> Html:
    lines = join(fmt("<li>{}</li>", line) for line in render.restore_lines(report) if "snapstore undo" not in line)
    changed = join(
        fmt('<li><span class="st st-{}">{}</span> <code>{}</code></li>', c.status, STATUS_WORDS.get(c.status, c.status), c.display_path)
        for c in report.changes
    )
    warnings = join(fmt('<p class="warn">{}</p>', w) for w in report.warnings)
    verb = "Undone" if report.kind == "undo" else "Restored"
    return fmt(
        '<h1 id="result">{}: {}</h1><div class="confirmbar"><ul class="result">{}</ul>{}'
        '<p>Not what you wanted? {} puts the tree back as it was. <a href="/">Back to the timeline</a></p></div>'
        '<h2>Every path changed</h2><ul class="plan">{}</ul>',
        verb, plural(len(report.changes), "path"), lines, warnings, undo_button(), changed,
    )


# -- tags and the conversation ----------------------------------------------------------------


def tag(store: Store, ref: str, name: str) -> str:
    """Tag checkpoint ``ref``; returns the note to show."""
    cp = store.resolve(ref)
    before = store.tag(cp.id, name.strip())
    moved = f" (moved from {before[:12]})" if before and before != cp.id else ""
    return f"tagged {cp.short_id} '{name.strip()}'{moved}"


def untag(store: Store, name: str) -> str:
    """Remove tag ``name``; returns the note to show."""
    was = store.untag(name)
    return f"removed tag '{name}' from {was[:12]}"


def conversation_json(store: Store, ref: str) -> tuple[str, bytes]:
    """Rewind's conversation half: ``(file name, JSON)`` of the conversation up to ``ref``."""
    rewind = store.rewind(ref, files=False, conversation=True)
    data = json.dumps(rewind.conversation, ensure_ascii=False, indent=2).encode()
    return f"conversation-{rewind.checkpoint.short_id}.json", data
