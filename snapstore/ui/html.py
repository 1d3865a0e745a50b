"""Safe markup for the UI: text is escaped unless it is already :class:`Html`, and the page frame.

Every value that reaches a page goes through :func:`fmt` or :func:`esc`, which escape anything
that is not an :class:`Html`; only literal templates written in this package are trusted.  So a
file holding ``<script>`` shows as text, and so does a message, a tag, a path or a metadata
value.  Pages load no inline script or style (the Content-Security-Policy forbids them).
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlencode

from snapstore import render
from snapstore.records.checkpoint import Checkpoint


class Html(str):
    """A string that is already HTML: :func:`esc` and :func:`fmt` leave it as it is."""

    __slots__ = ()


def esc(value: object) -> Html:
    """``value`` as HTML: escaped text, or itself when it is already :class:`Html`."""
    if isinstance(value, Html):
        return value
    return Html(html.escape(str(value), quote=True))


def fmt(template: str, *args: object, **kwargs: object) -> Html:
    """``template.format(...)`` with every argument escaped (the template itself is trusted)."""
    return Html(template.format(*(esc(a) for a in args), **{k: esc(v) for k, v in kwargs.items()}))


def join(parts: Iterable[Html], sep: str = "") -> Html:
    """Concatenate pieces of HTML."""
    return Html(sep.join(esc(p) for p in parts))


# -- paths and URLs ---------------------------------------------------------------------------


def path_token(path: bytes) -> str:
    """A stored path (bytes, maybe not UTF-8) as an ASCII token for URLs and form fields."""
    return quote(path, safe="/")


def path_from_token(token: str) -> bytes:
    """The inverse of :func:`path_token`."""
    return unquote_to_bytes(token)


def url(base: str, /, **params: str | int | None) -> str:
    """``base`` with the non-empty ``params`` as a query string."""
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return f"{base}?{query}" if query else base


# -- small pieces -----------------------------------------------------------------------------


def time_el(time_ns: int, *, relative: bool = False) -> Html:
    """A ``<time>``: the server's local format, re-rendered in the browser's locale by ui.js
    (``relative``: as "5 minutes ago", the date and time in its title)."""
    import datetime as _dt

    iso = _dt.datetime.fromtimestamp(time_ns / 1e9, _dt.timezone.utc).isoformat(timespec="seconds")
    if relative:
        return fmt('<time datetime="{}" class="rel">{}</time>', iso, render.local_time(time_ns))
    return fmt('<time datetime="{}">{}</time>', iso, render.local_time(time_ns))


def size_el(n: int) -> Html:
    """A size: ``14.2 KiB`` here, re-rendered with the browser's number format by ui.js."""
    return fmt('<data class="size" value="{}">{}</data>', int(n), render.size(n))


def counts_el(stats: dict[str, Any]) -> Html:
    """``+2 ~5 -1`` with the words in a title, so it reads without colour too."""
    a, m, d = (int(stats.get(k, 0)) for k in ("added", "modified", "deleted"))
    return fmt(
        '<span class="counts" title="{} added, {} modified, {} deleted">'
        '<span class="add">+{}</span> <span class="mod">~{}</span> <span class="del">-{}</span></span>',
        a, m, d, a, m, d,
    )


def tags_el(tags: Iterable[str]) -> Html:
    """Tags as labelled badges."""
    return join(fmt('<span class="tag" title="tag">#{}</span>', t) for t in tags)


def who(cp: Checkpoint) -> str:
    """Who made the checkpoint, from the metadata agents and hooks record (empty if unknown).

    ``actor`` ("agent", "user", "shell"), ``tool_name`` (or the older ``tool``) and, for an
    agent's tool call, nothing else is needed for the list; the page shows every key.
    """
    if cp.is_safety:
        return "snapstore (before a restore)"
    md = cp.metadata
    actor = md.get("actor")
    tool = md.get("tool_name") or md.get("tool")
    parts = [str(p) for p in (actor, tool) if isinstance(p, str | int) and str(p)]
    return " · ".join(parts)


def group_key(cp: Checkpoint) -> tuple[str, str]:
    """What the timeline groups by: the task, else the agent session, else nothing."""
    if cp.task:
        return "task", cp.task
    session = cp.metadata.get("session_id")
    if isinstance(session, str) and session:
        return "session", session
    return "", ""


# -- the page frame ---------------------------------------------------------------------------

NAV = (("timeline", "/", "Timeline"), ("compare", "/compare", "Compare"), ("ops", "/ops", "Operations"))


def page(title: str, body: Html, *, active: str = "", root: str = "", revision: str = "", banner: Html | None = None) -> Html:
    """A whole page: head, navigation, ``banner`` (say, :func:`read_only_banner`), ``body``,
    and the keyboard help line."""
    from snapstore.ui.assets import href

    nav = join(
        fmt('<a href="{}"{}>{}</a>', href, Html(' aria-current="page"') if key == active else Html(""), label)
        for key, href, label in NAV
        if not (banner and key == "ops")  # a read-only browser (a remote) has no operations
    )
    return fmt(
        """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · snapstore</title>
<link rel="stylesheet" href="{css}"><link rel="stylesheet" href="{hl_css}">
<link rel="stylesheet" href="{since_css}">
<script src="{js}" defer></script><script src="{since_js}" defer></script>
</head><body data-revision="{revision}">
<a class="skip" href="#main">Skip to the content</a>
<header><a class="brand" href="/">snapstore</a><nav>{nav}</nav><span class="root" title="{where}">{root}</span></header>
{banner}<main id="main" tabindex="-1">
{body}
</main>
<footer>Keys: <kbd>j</kbd>/<kbd>k</kbd> move, <kbd>Enter</kbd> opens, <kbd>/</kbd> filters,
<kbd>[</kbd>/<kbd>]</kbd> older/newer, <kbd>u</kbd>/<kbd>s</kbd> unified/side-by-side diffs, <kbd>?</kbd> all keys. Nothing leaves this machine.</footer>
</body></html>
""",
        title=title,
        css=href("ui.css"),
        hl_css=href("pygments.css"),
        since_css=href("since.css"),
        since_js=href("since.js"),
        js=href("ui.js"),
        revision=revision,
        nav=nav,
        root=root,
        where="what is shown" if banner else "working tree",
        banner=banner or Html(""),
        body=body,
    )


def read_only_banner(remote: str | None) -> Html:
    """The notice atop every page of a read-only browser (``remote``: the remote it shows)."""
    what = fmt("the remote <strong>{}</strong>", remote) if remote else Html("a store")
    return fmt(
        '<p class="banner read-only" role="status">Read-only: these are the checkpoints of {}, '
        "as last fetched into a local cache. Nothing here restores, undoes, reverts or tags; "
        "to work on one, fetch or pull it into your own store (<code>snapstore pull</code>).</p>\n",
        what,
    )


def error_body(status: int, message: str) -> Html:
    """The body of an error page: the one-line message of the error."""
    return fmt('<h1>Error {}</h1><p class="error" role="alert">{}</p><p><a href="/">Back to the timeline</a></p>', status, message)
