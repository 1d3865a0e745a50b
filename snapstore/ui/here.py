""""You are here": the working tree's row at the top of the timeline.

It says, in the timeline's numbers, which checkpoint the tree is: "Tree = #N" when it equals
one (the latest when nothing changed, else the target of the last whole-tree restore or undo
when the tree still matches it: then nothing is unsaved, however much differs from the newest),
or "Tree = #N + 3 paths unsaved" (N: what the tree was last made equal to).  ``#N`` links to its
row.  Finding this walks the tree, so the timeline loads it after its own first paint
(``/here.frag``), and its first byte does not wait for the walk.  Also here: the paths holding
unsaved work (previews flag them) and ``#N`` read as the timeline's number (Compare).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snapstore.errors import RefError, SnapstoreError
from snapstore.ui.html import Html, fmt, time_el, url

if TYPE_CHECKING:
    from snapstore.records.checkpoint import Checkpoint
    from snapstore.store import Store

#: Columns of the timeline's table (the row spans them).
COLUMNS = 7


def placeholder() -> Html:
    """What the timeline shows until the row arrives (and without JavaScript)."""
    return fmt(
        '<tbody id="worktree" data-src="/here.frag"><tr class="worktree"><th scope="row" class="ref" colspan="2">Now</th>'
        '<td colspan="{}">Working tree: <a href="/compare?a=latest">compare it with the latest checkpoint</a></td></tr></tbody>',
        COLUMNS - 2,
    )


def equal_to(store: Store, latest_id: str, tree_changed: bool) -> str | None:
    """The id of the checkpoint the working tree equals, if it is the latest or the target of
    the last whole-tree restore or undo; None otherwise."""
    if not tree_changed:
        return latest_id
    ops = store.operations()  # newest first
    last = ops[0] if ops else None
    if last is None or last.paths is not None:
        return None
    try:
        return last.target if not store.diff(last.target, None) else None
    except RefError:
        return None


def _number(store: Store, cid: str) -> Checkpoint | None:
    try:
        return store.log_neighbours(cid, include_safety=True)[0]
    except RefError:
        return None


def _link(cp: Checkpoint) -> Html:
    """``#74`` linked to its row (on this page when there; else the page that starts with it)."""
    return fmt(
        '<a href="#r{}" data-page="{}" class="to-row">#{}</a> <span class="msg-here">{}</span>',
        cp.seq, url("/", before=cp.seq + 1) + f"#r{cp.seq}", cp.seq, cp.message or "(no message)",
    )


def row(store: Store) -> Html:
    """The working tree's row (the ``<tr>``), ``data-here`` naming the checkpoint it equals.

    In words: "Tree = #74 … · restored 2 minutes ago · 54 paths differ from the newest, #111"
    after a restore (no unsaved work: the tree is a checkpoint), "Tree = #111 (the newest) + 2
    unsaved paths" with edits since, "Tree = #111, the newest" when nothing changed.
    """
    try:
        latest = _number(store, store.resolve("latest").id)
    except RefError:
        return Html("")
    if latest is None:
        return Html("")
    changes = store.diff(latest.id, None)
    here = equal_to(store, latest.id, bool(changes))
    ops = store.operations()
    op = ops[0] if ops and ops[0].time_ns > latest.time_ns and ops[0].paths is None else None
    if here == latest.id:
        what = fmt("Tree = {} · the newest checkpoint, nothing unsaved", _link(latest))
    elif here is not None and (cp := _number(store, here)) is not None:
        verb = "undone to" if op is not None and op.kind == "undo" else "restored"
        when = fmt(" {} {}", verb, time_el(op.time_ns, relative=True)) if op is not None else Html("")
        what = fmt(
            'Tree = {} ·{} · nothing unsaved · <a href="{}">{} differ from the newest</a>, #{}',
            _link(cp), when, url("/compare", a=latest.short_id), _paths(len(changes)), latest.seq,
        )
    else:
        base = _number(store, op.target) if op is not None else None
        unsaved = store.diff(base.id, None) if base is not None else changes
        base = base or latest
        counts = {k: sum(1 for c in unsaved if c.status == k) for k in "AMD"}
        what = fmt(
            'Tree = {} + <a href="{}">{} unsaved</a> '
            '<span class="counts"><span class="add">+{}</span> <span class="mod">~{}</span> <span class="del">-{}</span></span>',
            _link(base), url("/compare", a=base.short_id), _paths(len(unsaved)), counts["A"], counts["M"], counts["D"],
        )
    return fmt(
        '<tr class="worktree" data-here="{}"><th scope="row" class="ref" colspan="2">Now</th><td colspan="{}">{}</td></tr>',
        here or "", COLUMNS - 2, what,
    )


def unsaved(store: Store) -> set[bytes]:
    """Paths whose working-tree state no checkpoint records: the tree against the checkpoint it
    last equalled (the newest checkpoint, or the target of a restore or undo done since)."""
    try:
        rows, _ = store.log_page(limit=1, include_safety=True)  # the newest only (not all of them)
        ops = store.operations()
        if ops and (not rows or ops[0].time_ns > rows[0].time_ns):
            reference = ops[0].target
        elif rows:
            reference = rows[0].id
        else:
            return set()
        return {c.path for c in store.diff(reference, None)}
    except SnapstoreError:
        return set()


def resolve_number(store: Store, ref: str) -> Checkpoint:
    """The checkpoint ``ref`` names in the browser: as the CLI reads it (``#N`` is the log's
    number there too: one numbering, the same on every page and in ``snapstore list``)."""
    return store.resolve(ref.strip())


def _paths(n: int) -> str:
    return f"{n:,} path{'' if n == 1 else 's'}"


__all__ = ["equal_to", "placeholder", "resolve_number", "row", "unsaved"]
