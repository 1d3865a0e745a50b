""""You are here": the working tree's row at the top of the timeline.

It says what changed in the tree since the latest checkpoint (a link compares them) and names
the checkpoint the tree equals, if one does: the latest when nothing changed, else the target
of the last restore or undo when the tree still matches it (a selective restore matches only
its paths, so it names none).  Finding this walks the tree, so the timeline loads it after its
own first paint (``/here.frag``), and its first byte does not wait for the walk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snapstore.errors import RefError
from snapstore.ui.html import Html, fmt, url

if TYPE_CHECKING:
    from snapstore.store import Store

#: Columns of the timeline's table (the row spans them).
COLUMNS = 6


def placeholder() -> Html:
    """What the timeline shows until the row arrives (and without JavaScript)."""
    return fmt(
        '<tbody id="worktree" data-src="/here.frag"><tr class="worktree"><th scope="row" class="ref">Now</th>'
        '<td colspan="{}">Working tree: <a href="/compare?a=latest">compare it with the latest checkpoint</a></td></tr></tbody>',
        COLUMNS - 1,
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


def row(store: Store) -> Html:
    """The working tree's row (the ``<tr>``), ``data-here`` naming the checkpoint it equals."""
    try:
        latest = store.resolve("latest")
    except RefError:
        return Html("")
    changes = store.diff(latest.id, None)
    here = equal_to(store, latest.id, bool(changes))
    counts = {k: sum(1 for c in changes if c.status == k) for k in "AMD"}
    compare = url("/compare", a=latest.short_id)
    if changes:
        n = len(changes)
        what = fmt(
            '<a href="{}">{} path{} changed</a> since the latest checkpoint '
            '<span class="counts"><span class="add">+{}</span> <span class="mod">~{}</span> <span class="del">-{}</span></span>',
            compare, n, "" if n == 1 else "s", counts["A"], counts["M"], counts["D"],
        )
    else:
        what = Html("no changes since the latest checkpoint")
    where = Html("")
    if here is not None:
        where = fmt(' · it equals checkpoint <a href="/c/{}"><code>{}</code></a>', here, here[:12])
    return fmt(
        '<tr class="worktree" data-here="{}"><th scope="row" class="ref">Now</th><td colspan="{}">Working tree: {}{}</td></tr>',
        here or "", COLUMNS - 1, what, where,
    )


__all__ = ["equal_to", "placeholder", "row"]
