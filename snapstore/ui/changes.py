"""A set of changed files (a checkpoint's, a comparison's): the summary, the jump list with
checkboxes to restore a selection, and each file's diff, collapsible.

Renames show as renames (``old → new``, how similar), found by the library's rename detection.
The diffs share the request's :class:`~snapstore.ui.budget.Budget`; when it runs out the rest
are listed with a link to each one's own page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from snapstore.ops.diff import Change
from snapstore.ops.renames import Renamed
from snapstore.tree.paths import display
from snapstore.ui import diffview
from snapstore.ui.budget import FULL, Budget
from snapstore.ui.html import Html, fmt, join, path_token, url

if TYPE_CHECKING:
    from snapstore.ops.textdiff import LineCounts

#: Diffs shown inline on one page; the rest are listed with a link to their own diff.
MAX_INLINE_DIFFS = 40

Link = Callable[[Change], str]


def status_word(c: Change) -> str:
    """``modified``, ``renamed (87% similar)``..."""
    if isinstance(c, Renamed):
        return "renamed" if c.similarity == 100 else f"renamed ({c.similarity}% similar)"
    return diffview.STATUS_WORDS.get(c.status, c.status)


def old_path(c: Change) -> bytes:
    """Where the old side of ``c`` lived (its own path, unless it was renamed)."""
    return c.old_path if isinstance(c, Renamed) else c.path


def path_el(c: Change) -> Html:
    if isinstance(c, Renamed):
        return fmt('<span class="from">{}</span> → {}', display(c.old_path), display(c.path))
    return fmt("{}", c.display_path)


def summary(changes: list[Change], counts: list[LineCounts]) -> Html:
    """``3 files changed: 1 added, 2 modified; +12 −4 lines``."""
    by: dict[str, int] = {}
    for c in changes:
        word = "renamed" if isinstance(c, Renamed) else diffview.STATUS_WORDS.get(c.status, c.status)
        by[word] = by.get(word, 0) + 1
    added = sum(n.added for n in counts)
    removed = sum(n.removed for n in counts)
    kinds = ", ".join(f"{n} {w}" for w, n in by.items())
    files = f"{len(changes)} file{'' if len(changes) == 1 else 's'} changed"
    return fmt(
        '<p class="summary">{}: {}; <span class="add">+{}</span> <span class="del">−{}</span> lines</p>',
        files, kinds, f"{added:,}", f"{removed:,}",
    )


def changes_section(
    changes: list[Change],
    counts: list[LineCounts],
    view: str,
    *,
    file_link: Callable[[Change], Html],
    restore_ref: str | None = None,
    more_link: Link | None = None,
    view_link: Callable[[str], str] | None = None,
    budget: Budget | None = None,
    extra: Callable[[Change], Html] | None = None,
    render: Callable[[Change, Html], Html] | None = None,
) -> Html:
    """The summary, the list of changed files (with checkboxes to restore a selection) and
    their diffs, each in a ``<details>`` (open) so it can be folded away.

    The diffs are rendered within ``budget`` (one per request); a diff that does not fit is
    cut or listed with ``extra(change)``: its "show anyway" and download links.  ``render(change,
    links)``, when given, makes each diff instead (:class:`snapstore.ui.filediff.Renderer`).
    """
    budget = budget or Budget()
    if not changes:
        return Html('<p class="empty">No file changed.</p>')
    rows = []
    for i, (c, n) in enumerate(zip(changes, counts)):
        lines = n.note or f"+{n.added} -{n.removed}"
        box = fmt('<td><input type="checkbox" name="p" value="{}" aria-label="select {}"></td>', path_token(c.path), c.display_path) if restore_ref else Html("")
        target = f"#f-{i}" if i < MAX_INLINE_DIFFS else (more_link(c) if more_link else "#")
        rows.append(
            fmt(
                '<tr class="cp" data-href="{}">{}<td class="st st-{}">{} {}</td><td><a href="{}">{}</a></td><td class="lines">{}</td><td>{}</td></tr>',
                target, box, c.status, c.status, status_word(c), target, path_el(c), lines, file_link(c),
            )
        )
    table = fmt('<table class="files changes"><tbody>{}</tbody></table>', join(rows))
    if restore_ref:
        table = fmt(
            '<form method="post" action="/c/{}/restore/preview">{}<p><button type="submit" class="action">'
            "Preview restoring the selected files…</button></p></form>",
            restore_ref, table,
        )
    link = view_link or (lambda v: f"?view={v}")
    toggle = fmt(
        '<p class="toggle">Diffs: <a href="{}" id="view-unified"{}>unified</a> · '
        '<a href="{}" id="view-split"{}>side by side</a> · <button type="button" class="small" id="fold-all">fold all</button></p>',
        link("unified"),
        Html(' aria-current="true"') if view != "split" else Html(""),
        link("split"),
        Html(' aria-current="true"') if view == "split" else Html(""),
    )
    diffs = []
    for i, (c, n) in enumerate(zip(changes[:MAX_INLINE_DIFFS], counts)):
        lines = n.note or f"+{n.added} -{n.removed}"
        way_out = extra(c) if extra else Html("")
        if render is not None:
            body = render(c, way_out)
        elif budget.exhausted():
            # the page's rows or time are spent: list the rest, each a link to its own page
            own = more_link(c) if more_link else "#"
            body = fmt('<p class="note toolarge">Not rendered: this page reached its limit. <a href="{}">Show this diff alone</a> {}</p>', own, way_out)
        else:
            body = diffview.change_body(c, view, budget, way_out)
        diffs.append(
            fmt(
                '<details class="filediff" id="f-{}" open><summary><h3><span class="st st-{}">{}</span> {} <small>{}</small></h3></summary>{}</details>',
                i, c.status, status_word(c), path_el(c), lines, body,
            )
        )
    if len(changes) > MAX_INLINE_DIFFS:
        more = len(changes) - MAX_INLINE_DIFFS
        diffs.append(fmt('<p class="note">{} more file{}: open each from the list above.</p>', more, "" if more == 1 else "s"))
    return fmt("{}{}{}{}", summary(changes, counts), table, toggle, join(diffs))


def more_links(change: Change, budget: Budget | None, anyway: Callable[[], str], *, new: str | None, old: str | None) -> Html:
    """A cut or unshown diff's way out: "show anyway" (the same view with the larger limits,
    when they would show it) and the raw downloads of its stored sides."""
    sizes = [e.size for e in (change.old, change.new) if e is not None and e.is_file]
    fits = max(sizes, default=0) <= FULL.file_bytes
    show = anyway() if fits and not (budget and budget.full) else None
    downloads = []
    if old and change.old is not None and change.old.is_file:
        downloads.append(("download the old version", url(f"/c/{old}/raw", p=path_token(old_path(change)))))
    if new and change.new is not None and change.new.is_file:
        downloads.append(("download the new version", url(f"/c/{new}/raw", p=path_token(change.path))))
    return links(show, downloads)


def links(anyway: str | None, downloads: list[tuple[str, str]]) -> Html:
    """"Show anyway" (when given) and download links, in one line."""
    parts = [fmt('<a href="{}" class="anyway">Show anyway</a>', anyway)] if anyway else []
    parts += [fmt('<a href="{}" download>{}</a>', href, label) for label, href in downloads]
    return join(parts, " · ")


__all__ = ["MAX_INLINE_DIFFS", "changes_section", "links", "more_links", "old_path", "status_word", "summary"]
