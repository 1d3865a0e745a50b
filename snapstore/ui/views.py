"""The pages that only read: the timeline, a checkpoint, a file, a file's history, a comparison.

Each function takes the open :class:`Store` and plain arguments (no web framework here) and
returns ``(title, body)``; :mod:`snapstore.ui.app` wraps the body in the page frame.  Errors are
the Store's own (RefError for an unknown checkpoint or path, ...), shown by the app.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from snapstore.errors import RefError, SnapstoreError, UsageError
from snapstore.ops.diff import Change
from snapstore.ops.renames import Renamed
from snapstore.records.checkpoint import Checkpoint
from snapstore.tree.paths import display
from snapstore.ui import conversation, diffview, filediff, preview
from snapstore.ui.budget import Budget
from snapstore.ui.changes import changes_section, links, more_links, old_path
from snapstore.ui.html import (
    Html,
    counts_el,
    fmt,
    join,
    path_token,
    size_el,
    tags_el,
    time_el,
    url,
    who,
)

if TYPE_CHECKING:
    from snapstore.ops.history import Version
    from snapstore.store import Store


Page = tuple[str, Html]
#: Versions listed on a file's history page (the newest).
MAX_HISTORY = 500


# -- a checkpoint -----------------------------------------------------------------------------


def checkpoint(
    store: Store, ref: str, view: str, only: bytes | None = None, budget: Budget | None = None, *, read_only: bool = False,
    context: int = filediff.CONTEXTS[0], notice: Html | None = None,
) -> Page:
    """A checkpoint's record, actions, changed files with diffs, and conversation
    (``read_only``: no form that changes anything, nothing about a working tree; ``notice``:
    what a tag change just did, or why it was refused)."""
    from snapstore.ui import actions

    cp, newer, older = store.log_neighbours(ref)
    changes = filediff.changes_of(store, cp.id)
    if only is not None:
        changes = [c for c in changes if c.path == only]
        counts = filediff.line_counts(store, changes)
    else:
        counts = filediff.checkpoint_counts(store, cp.id, changes)
    messages = store.conversation(cp.id) if cp.conversation is not None else None
    st = cp.stats
    meta = join(fmt('<tr class="meta"><th><code>{}</code></th><td><code>{}</code></td></tr>', k, v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)) for k, v in sorted(cp.metadata.items()))
    parent = fmt('<a href="/c/{}">{}</a>', cp.parent, cp.parent[:12]) if cp.parent else Html("none (the first checkpoint)")
    record = fmt(
        '<table class="record"><tr><th>Id</th><td><code>{}</code></td></tr>'
        "<tr><th>Time</th><td>{}</td></tr><tr><th>Task</th><td>{}</td></tr><tr><th>Who</th><td>{}</td></tr>"
        "<tr><th>Kind</th><td>{}</td></tr><tr><th>Parent</th><td>{}</td></tr>"
        "<tr><th>Files</th><td>{} files, {}, {} new; changes {}</td></tr>"
        "<tr><th>Tags</th><td>{}</td></tr>{}</table>",
        cp.id, time_el(cp.time_ns), cp.task or "–", who(cp) or "–", cp.kind, parent,
        st.get("files", 0), size_el(st.get("bytes", 0)), size_el(st.get("new_bytes", 0)), counts_el(st),
        (tags_el(cp.tags) or "–") if read_only else actions.tag_forms(cp), meta,
    )
    file_link = _checkpoint_file_link(cp)
    section = changes_section(
        changes, counts, view, file_link=file_link, restore_ref=None if read_only else cp.id,
        more_link=lambda c: url(f"/c/{cp.id}", p=path_token(c.path)),
        view_link=lambda v: url(f"/c/{cp.id}", p=path_token(only) if only else None, view=v),
        budget=budget,
        extra=lambda c: more_links(
            c, budget, lambda: url(f"/c/{cp.id}", p=path_token(c.path), view=view, full=1),
            new=cp.id, old=cp.parent,
        ),
        render=_renderer(cp, view, budget, context, lazy=only is None),
    )
    convo, jump, prompt = _conversation_parts(store, cp, messages, read_only=read_only)
    label = f"{cp.seq}{' (safety)' if cp.is_safety else ''}" if cp.seq else ("safety" if cp.is_safety else "")
    here_note = Html("") if read_only else fmt(
        '<p class="here-note" data-cid="{}" hidden><span class="here-badge">you are here</span> '
        "the working tree equals this checkpoint</p>", cp.id,
    )
    body = fmt(
        '<h1>Checkpoint {} <code>{}</code></h1>{}{}{}<p class="message">{}</p>{}{}{}'
        '<h2>Changed files <small>against its parent{}</small></h2>{}<h2 id="conversation">Conversation</h2>{}',
        label, cp.short_id, notice or Html(""), neighbours_nav(older, newer), here_note, cp.message or "(no message)", prompt, record,
        actions.checkpoint_actions(cp, read_only=read_only), jump, section, convo,
    )
    return f"{label} {cp.message or cp.short_id}", body


def _conversation_parts(store: Store, cp: Checkpoint, messages: list[Any] | None, *, read_only: bool) -> tuple[Html, Html, Html]:
    """A checkpoint page's conversation section, its jump link and its prompt line."""
    if messages is None:
        convo = Html('<p class="empty">No conversation is stored with this checkpoint.</p>')
        jump = Html("")
        prompt = Html("")
    else:
        earlier = 0
        if cp.parent:
            try:
                earlier = len(store.conversation(cp.parent) or [])
            except SnapstoreError:
                earlier = 0  # the parent is gone: every message counts as new
        download = fmt(
            '<a class="action" href="/c/{}/conversation.json" download>the conversation only '
            "(download it up to here: JSON, {} messages)</a>", cp.id, len(messages),
        )
        if read_only:
            rewind = fmt('<div class="actions"><span>Download:</span> {}</div>', download)
        else:
            rewind = fmt(
                '<div class="actions"><span>Rewind:</span> {}'
                '<form class="inline" method="post" action="/c/{}/restore/preview"><input type="hidden" name="rewind" value="1">'
                '<button type="submit" class="action" id="rewind-both">files and conversation…</button></form>'
                "<span>(files only: the restore above)</span></div>",
                download, cp.id,
            )
        convo = fmt("{}{}", rewind, conversation.section(messages, earlier))
        jump = fmt(' · <a href="#conversation">Conversation</a> <small>({} new)</small>', max(0, len(messages) - earlier))
        said = conversation.last_prompt(messages)
        prompt = fmt('<p class="prompt"><span class="prompt-mark">prompt</span> {}</p>', said) if said else Html("")
    return convo, jump, prompt


def _renderer(cp: Checkpoint, view: str, budget: Budget | None, context: int, *, lazy: bool) -> filediff.Renderer:
    return filediff.Renderer(
        view, budget or Budget(), lambda c: url(f"/c/{cp.id}", p=path_token(c.path)),
        old_id=cp.parent, new_id=cp.id, context=context, lazy=lazy,
    )


def checkpoint_diff(store: Store, ref: str, view: str, path: bytes, budget: Budget, context: int) -> Html:
    """One file's diff in checkpoint ``ref``, alone (what a page's placeholder loads)."""
    cp = store.resolve(ref)
    found = [c for c in filediff.changes_of(store, cp.id) if c.path == path]
    if not found:
        raise RefError(f"{display(path)} did not change in checkpoint {cp.short_id}")
    c = found[0]
    more = more_links(c, budget, lambda: url(f"/c/{cp.id}", p=path_token(c.path), view=view, full=1), new=cp.id, old=cp.parent)
    return _renderer(cp, view, budget, context, lazy=False).body(c, more)


def neighbours_nav(older: Checkpoint | None, newer: Checkpoint | None) -> Html:
    """Links to the checkpoints just older and newer in the log (keys ``[`` and ``]``)."""
    def link(c: Checkpoint | None, rel: str, text: str) -> Html:
        if c is None:
            return fmt('<span class="none">{}</span>', f"no {text.lower()} checkpoint")
        return fmt(
            '<a href="/c/{}" id="{}" rel="{}" aria-keyshortcuts="{}">{} <small>{} {}</small></a>',
            c.id, text.lower(), rel, "[" if rel == "prev" else "]", text, c.seq, c.message[:60] or c.short_id,
        )

    return fmt(
        '<nav class="neighbours" aria-label="Older and newer checkpoints">{} {}</nav>',
        link(older, "prev", "Older"), link(newer, "next", "Newer"),
    )


def _checkpoint_file_link(cp: Checkpoint) -> Any:
    def link(c: Change) -> Html:
        hist = url("/history", p=path_token(c.path))
        if c.new is not None and c.new.is_file:
            return fmt('<a href="{}">file</a> · <a href="{}">history</a>', url(f"/c/{cp.id}/file", p=path_token(c.path)), hist)
        if c.old is not None and c.old.is_file and cp.parent:
            before = url(f"/c/{cp.parent}/file", p=path_token(old_path(c)))
            return fmt('<a href="{}">file before</a> · <a href="{}">history</a>', before, hist)
        return fmt('<a href="{}">history</a>', hist)

    return link


def file_at(store: Store, ref: str, path: bytes, budget: Budget | None = None, *, read_only: bool = False) -> Page:
    """The file ``path`` as checkpoint ``ref`` holds it: its first lines, within ``budget``
    (only that much of the file is read: a 50 MB file costs what a short one does;
    ``read_only``: without the restore button)."""
    budget = budget or Budget()
    cp = store.resolve(ref)
    size = int(store.file_info(cp.id, path)["size"])  # a RefError for a path it does not hold
    data, _ = diffview.read_head(store.iter_bytes(cp.id, path), budget.limits.file_bytes)
    token = path_token(path)
    raw = url(f"/c/{cp.id}/raw", p=token)
    anyway = None if budget.full or size <= len(data) else url(f"/c/{cp.id}/file", p=token, full=1)
    more = links(anyway, [("download it", raw)])
    restore = Html("") if read_only else fmt(
        '<form method="post" action="/c/{}/restore/preview"><input type="hidden" name="p" value="{}">'
        '<button type="submit" class="action">Preview restoring this file…</button></form>', cp.id, token,
    )
    body = fmt(
        '<h1><code>{}</code> <small>at checkpoint <a href="/c/{}">{}</a></small></h1><p>{} · '
        '<a href="{}" download>download</a> · <a href="{}">history</a></p>{}{}',
        display(path), cp.id, cp.short_id, size_el(size), raw,
        url("/history", p=token), restore, diffview.file_table(path, data, size, budget, more),
    )
    return display(path), body


def history(store: Store, path: bytes | None) -> Page:
    """The checkpoints in which ``path`` changed, newest first, through its renames."""
    shown = display(path) if path else ""
    form = fmt('<form method="get" action="/history"><label>Path <input name="path" value="{}" required></label> <button type="submit">Show history</button></form>', shown)
    if not path:
        return "History", fmt("<h1>A file's history</h1>{}", form)
    versions = followed(store, path)
    rows = []
    for shown_path, v, renamed_from in versions[:MAX_HISTORY]:
        cp = v.checkpoint
        token = path_token(shown_path)
        lines = "binary" if v.binary else f"+{v.added} -{v.removed}"
        see = url(f"/c/{cp.id}/file", p=token) if v.entry is not None and v.entry.is_file else url(f"/c/{cp.id}", p=token)
        status = fmt("renamed from <code>{}</code>", display(renamed_from)) if renamed_from else diffview.STATUS_WORDS.get(v.status, v.status)
        rows.append(
            fmt(
                '<tr class="cp" data-href="{}"><td>{}</td><td class="st st-{}">{}</td><td>{}</td><td class="lines">{}</td>'
                '<td><a href="{}">{}</a> <small class="who">{}</small></td><td><a href="{}">diff</a> · <a href="{}">file</a></td></tr>',
                see, time_el(cp.time_ns), "R" if renamed_from else v.status, status,
                size_el(v.entry.size) if v.entry else "–", lines, f"/c/{cp.id}", cp.message or cp.short_id, who(cp),
                url(f"/c/{cp.id}", p=token), see,
            )
        )
    table = join(rows) if rows else Html('<tr><td colspan="6" class="empty">This path changed in no checkpoint.</td></tr>')
    if len(versions) > MAX_HISTORY:
        table = fmt(
            '{}<tr><td colspan="6" class="note">The newest {} of {} versions (the command line lists them all: '
            "<code>snapstore log PATH</code>).</td></tr>",
            table, f"{MAX_HISTORY:,}", f"{len(versions):,}",
        )
    body = fmt(
        '<h1>History of <code>{}</code></h1>{}<table class="files history"><thead><tr><th>Time</th><th>Change</th><th>Size</th>'
        "<th>Lines</th><th>Checkpoint</th><th>Open</th></tr></thead><tbody>{}</tbody></table>",
        shown, form, table,
    )
    return f"History of {shown}", body


#: Renames a file's history follows back.
MAX_RENAMES = 20


def followed(store: Store, path: bytes) -> list[tuple[bytes, Version, bytes | None]]:
    """``path``'s versions newest first, following it back through renames: ``(the path it had,
    the version, the path it was renamed from at that version or None)``."""
    out: list[tuple[bytes, Version, bytes | None]] = []
    current, until = path, None
    for _ in range(MAX_RENAMES):
        versions = list(reversed(store.history(current)))
        if until is not None:  # the old path's versions before the rename
            versions = [v for v in versions if v.checkpoint.id != until.id and v.checkpoint.time_ns <= until.time_ns]
        if not versions:
            break
        out += [(current, v, None) for v in versions]
        first = versions[-1]
        if first.status != "A" or len(out) >= MAX_HISTORY:
            break
        moved = [c for c in filediff.changes_of(store, first.checkpoint.id) if isinstance(c, Renamed) and c.path == current]
        if not moved:
            break
        out[-1] = (current, first, moved[0].old_path)
        current, until = moved[0].old_path, first.checkpoint
    return out


def compare(
    store: Store, a: str, b: str, view: str, only: bytes | None = None, budget: Budget | None = None, *,
    read_only: bool = False, context: int = filediff.CONTEXTS[0],
) -> Page:
    """Two checkpoints compared (``b`` empty: checkpoint ``a`` against the working tree, which
    a ``read_only`` browser has not: there ``b`` is needed)."""
    from snapstore.ui.here import resolve_number

    recent, _ = store.log_page(limit=100)  # labelled with the timeline's numbers (#N: one numbering)
    options = join(fmt('<option value="#{}">{}</option>', c.seq, c.message[:60]) for c in recent)
    form = fmt(
        '<form class="filters" method="get" action="/compare"><label>From <input name="a" value="{}" list="cps" required placeholder="#2, a tag, an id"></label>'
        '<label>To <input name="b" value="{}" list="cps" placeholder="{}"></label><datalist id="cps">{}</datalist>'
        '<input type="hidden" name="view" value="{}"><button type="submit">Compare</button></form>',
        a, b, "#1, a tag, an id" if read_only else "empty: the working tree", options, view,
    )
    if not a:
        return "Compare", fmt("<h1>Compare</h1>{}", form)
    if read_only and not b:
        raise UsageError("this browser is read-only and has no working tree: name both checkpoints (From and To)")
    old = resolve_number(store, a)
    new = resolve_number(store, b) if b else None
    changes = store.diff(old.id, new.id if new else None, [only.decode("utf-8", "surrogateescape")] if only else None, renames=True)
    counts = filediff.line_counts(store, changes)
    right = fmt('<a href="/c/{}">{}</a> {}', new.id, new.short_id, new.message) if new else Html("the working tree")

    def file_link(c: Change) -> Html:
        side = new.id if new else None
        if side and c.new is not None and c.new.is_file:
            return fmt('<a href="{}">file</a>', url(f"/c/{side}/file", p=path_token(c.path)))
        return fmt('<a href="{}">history</a>', url("/history", p=path_token(c.path)))

    section = changes_section(
        changes, counts, view, file_link=file_link,
        more_link=lambda c: url("/compare", a=a, b=b, p=path_token(c.path)),
        view_link=lambda v: url("/compare", a=a, b=b, p=path_token(only) if only else None, view=v),
        budget=budget,
        extra=lambda c: more_links(
            c, budget, lambda: url("/compare", a=a, b=b, p=path_token(c.path), view=view, full=1),
            new=new.id if new else None, old=old.id,
        ),
        render=filediff.Renderer(
            view, budget or Budget(), lambda c: url("/compare", a=a, b=b, p=path_token(c.path)),
            old_id=old.id, new_id=new.id if new else None, context=context, lazy=only is None,
        ),
    )
    body = fmt(
        '<h1>Compare</h1>{}<p>From <a href="/c/{}">{}</a> {} to {}: {} {}.</p><h2>Changed files</h2>{}',
        form, old.id, old.short_id, old.message, right, plural(len(changes), "path"),
        "differs" if len(changes) == 1 else "differ", section,
    )
    return "Compare", body


def compare_diff(store: Store, a: str, b: str, view: str, path: bytes, budget: Budget, context: int) -> Html:
    """One file's diff between ``a`` and ``b`` (empty: the working tree), alone."""
    from snapstore.ui.here import resolve_number

    old = resolve_number(store, a)  # (#N as the page that links here reads it: the log's number)
    new = resolve_number(store, b) if b else None
    found = store.diff(old.id, new.id if new else None, [path.decode("utf-8", "surrogateescape")], renames=True)
    found = [c for c in found if c.path == path]
    if not found:
        raise RefError(f"{display(path)} does not differ between these two")
    c = found[0]
    own = url("/compare", a=a, b=b, p=path_token(c.path))
    more = more_links(c, budget, lambda: filediff.with_params(own, view=view, full=1), new=new.id if new else None, old=old.id)
    renderer = filediff.Renderer(view, budget, lambda _: own, old_id=old.id, new_id=new.id if new else None, context=context, lazy=False)
    return renderer.body(c, more)


def operations(store: Store, *, read_only: bool = False) -> Page:
    """The operation log (restores and undos), newest first: what each did, to and from which
    checkpoint, and the Undo of the newest one (the library undoes the last operation; not in a
    ``read_only`` browser)."""
    from snapstore.errors import RefError

    if read_only:
        return "Operations", Html(
            '<h1>Operations</h1><p class="empty">A remote has no operations: restores, undos and reverts are made in a '
            "local store (pull a checkpoint into yours to work on it).</p>"
        )
    ops = store.operations()
    if not ops:
        return "Operations", Html('<h1>Operations</h1><p class="empty">No restore, undo or revert has been done in this store.</p>')

    def named(cid: str) -> Html:
        try:
            c = store.resolve(cid)
        except RefError:
            return fmt("<code>{}</code> <small>(no longer stored)</small>", cid[:12])
        return fmt('<a href="/c/{}"><code>{}</code></a> {}', c.id, c.short_id, c.message or "(no message)")

    rows = []
    for k, op in enumerate(ops):
        verb = "Revert" if op.kind != "undo" and _is_revert(store, op.target) else "Restore"
        if op.kind == "undo":
            what = Html("<strong>Undo</strong> of the operation before")
        elif op.paths:
            shown = ", ".join(op.paths[:5]) + (f" and {len(op.paths) - 5} more" if len(op.paths) > 5 else "")
            what = fmt("<strong>{}</strong> of {}: {}", verb, plural(len(op.paths), "path"), shown)
        else:
            what = fmt("<strong>{}</strong> of the whole tree", verb)
        undo = fmt('<td class="undo">{}</td>', preview.undo_button()) if k == 0 and not read_only else Html('<td class="undo"></td>')
        rows.append(
            fmt(
                '<tr><td class="ref">op {}</td><td>{}</td><td>{}<br><small>made the tree equal to</small> {}<br>'
                "<small>the tree before is kept in</small> {}</td><td>{}</td>{}</tr>",
                op.seq, time_el(op.time_ns, relative=True), what, named(op.target), named(op.before),
                plural(op.changed, "path"), undo,
            )
        )
    body = fmt(
        '<h1>Operations</h1><p>Every restore, revert and undo, newest first. Undo takes back the newest one (undoing an '
        "undo redoes what it undid); the tree it replaces is kept in a safety checkpoint first, so nothing is lost.</p>"
        '<table class="files ops"><thead><tr><th scope="col">Op</th><th scope="col">When</th><th scope="col">What</th>'
        '<th scope="col">Changed</th><th scope="col">Undo</th></tr></thead><tbody>{}</tbody></table>',
        join(rows),
    )
    return "Operations", body


def _is_revert(store: Store, target: str) -> bool:
    """Whether the operation that made the tree equal to ``target`` was a revert (its checkpoint
    records what it reverted)."""
    try:
        return "revert_of" in store.resolve(target).metadata
    except SnapstoreError:
        return False


def empty_store() -> Page:
    """The timeline of a store that holds no checkpoint yet: how to take the first."""
    return "Checkpoints", Html(
        '<h1>No checkpoints yet</h1><p>This store holds no checkpoint. Take the first one from the project\'s directory:</p>'
        '<pre><code>snapstore snapshot -m "start"</code></pre><p>or let your coding agent take one at each step '
        "(Claude Code, Codex, Cursor and the others):</p><pre><code>snapstore integrate</code></pre>"
        '<p>New checkpoints appear below by themselves.</p><div id="timeline" data-src="/timeline.frag"></div>'
    )


def plural(n: int, word: str) -> str:
    """``1 path``, ``3 paths``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"





def image_bytes(store: Store, ref: str, path: bytes) -> bytes:
    """The bytes of the file ``path`` at ``ref``, for showing as an image (at most
    :data:`snapstore.ui.images.MAX_IMAGE`)."""
    from snapstore.ui.images import MAX_IMAGE

    info = store.file_info(ref, path)
    if "hash" not in info:
        raise RefError(f"{display(path)} is not a file in that checkpoint")
    if int(info["size"]) > MAX_IMAGE:
        raise UsageError(f"{display(path)} is too large to show as an image (download it instead)")
    data, _ = diffview.read_head(store.iter_bytes(info["checkpoint"], path), MAX_IMAGE)
    return data


__all__ = [
    "checkpoint", "checkpoint_diff", "compare", "compare_diff", "empty_store", "file_at", "followed", "history", "image_bytes",
    "operations",
]
