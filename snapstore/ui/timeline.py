"""The timeline: checkpoints newest first, a page at a time, filtered, in one aligned table.

A page reads only its own records (:meth:`Store.log_page`: the log is read from the page's
cursor, ``before``, down to its last row), so the first page costs the same at 20 and at 20,000
checkpoints.  Each row is labelled with its log number (``seq``): it never changes, so a number
seen on the page names the same checkpoint after new ones arrive (the CLI's ``#N`` counts from
the newest and moves; the short id is the reference to copy).

Filters: text in the message; text in the messages of the conversation new in a checkpoint (so
the step where it was said, not every later one); a task (its index); a tag (the one checkpoint
it names); a path:
a file (the path index), a directory (``src/`` or ``src``: anything under it) or a glob
(``*.py``, ``src/*/test_*.py``; as :func:`fnmatch.fnmatchcase`, ``*`` crosses ``/``, and a
pattern without ``/`` also matches file names).  A directory or glob is matched against each
checkpoint's changes, and a conversation search reads its conversations, so such a page stops
after :data:`SCAN_SECONDS` with a link to search further back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from snapstore.errors import RefError
from snapstore.records.checkpoint import Checkpoint
from snapstore.ui import here
from snapstore.ui.here import COLUMNS
from snapstore.ui.html import Html, counts_el, fmt, group_key, join, tags_el, time_el, url, who

if TYPE_CHECKING:
    from snapstore.store import Store

#: Rows per page.
PAGE = 200
#: Records a filtered page reads at most before it offers to search further back.
SCAN_RECORDS = 5_000
#: Time a directory or glob filter spends at most per page (it reads each checkpoint's changes).
SCAN_SECONDS = 1.5
_GLOB = frozenset("*?[")

Page = tuple[str, Html]


@dataclass(frozen=True)
class Filters:
    """The timeline's filters (each empty when unused)."""

    q: str = ""
    path: str = ""
    said: str = ""
    task: str = ""
    tag: str = ""
    safety: bool = False
    #: Only the checkpoints whose metadata ``actor`` is this (agent, user, unknown).
    actor: str = ""

    def query(self) -> dict[str, str | int | None]:
        return {
            "q": self.q, "path": self.path, "said": self.said, "task": self.task, "tag": self.tag,
            "safety": 1 if self.safety else None, "actor": self.actor,
        }

    def any(self) -> bool:
        return bool(self.q or self.path or self.said or self.task or self.tag or self.actor)


@dataclass(frozen=True)
class Rows:
    """One page: its checkpoints, the cursor of the next page (None: no older ones), and
    whether the search stopped early (its bound) rather than at the page's size."""

    checkpoints: list[Checkpoint]
    after: int | None
    stopped: bool = False


def path_matcher(pattern: str) -> Callable[[bytes], bool]:
    """Whether a changed path matches the filter ``pattern`` (a directory or a glob)."""
    if _GLOB & set(pattern):
        names = "/" not in pattern

        def glob(path: bytes) -> bool:
            text = path.decode("utf-8", "surrogateescape")
            return fnmatchcase(text, pattern) or (names and fnmatchcase(text.rsplit("/", 1)[-1], pattern))

        return glob
    prefix = pattern.strip("/").encode("utf-8", "surrogateescape")
    return lambda path: path == prefix or path.startswith(prefix + b"/")


def _by_actor(actor: str, first: Callable[[Checkpoint], bool] | None) -> Callable[[Checkpoint], bool]:
    def keep(c: Checkpoint) -> bool:
        return c.metadata.get("actor") == actor and (first is None or first(c))

    return keep


def page_rows(store: Store, f: Filters, before: int | None) -> Rows:
    """The checkpoints of one page of the timeline."""
    needle = f.q.casefold()

    def message(c: Checkpoint) -> bool:
        return needle in c.message.casefold()

    keep: Callable[[Checkpoint], bool] | None = message if needle else None
    if f.actor:
        keep = _by_actor(f.actor, keep)
    task = f.task or None
    if f.tag:
        try:
            cp, _, _ = store.log_neighbours(f.tag, include_safety=True)  # (with its seq)
        except RefError:
            return Rows([], None)
        hit = f.tag in cp.tags and (task is None or cp.task == task) and (keep is None or keep(cp))
        return Rows([cp] if hit and (before is None or cp.seq < before) else [], None)
    hits: list[Callable[[Checkpoint], bool]] = []
    path = f.path.strip()
    if path:
        touched = set()
        if not (_GLOB & set(path)) and not path.endswith("/"):
            touched = {v.checkpoint.id for v in store.history(path)}
        if touched:  # a file's path: the path index answers, no scan

            def changed(c: Checkpoint, first: Callable[[Checkpoint], bool] | None = keep) -> bool:
                return c.id in touched and (first is None or first(c))

            keep = changed
        else:
            match = path_matcher(path)
            hits.append(lambda c: any(match(ch.path) for ch in store.changes(c.id)))
    if f.said:
        from snapstore.ui.conversation import said_in

        hits.append(said_in(store, f.said))
    if hits:
        return _scan(store, hits, before, task, f.safety, keep)
    scan = SCAN_RECORDS if (keep or task) else None
    rows, after = store.log_page(before=before, limit=PAGE, task=task, include_safety=f.safety, keep=keep, scan=scan)
    return Rows(rows, after, stopped=len(rows) < PAGE and after is not None)


def _scan(
    store: Store, hits: list[Callable[[Checkpoint], bool]], before: int | None, task: str | None, safety: bool,
    keep: Callable[[Checkpoint], bool] | None,
) -> Rows:
    """Checkpoints that every one of ``hits`` accepts (each may read the store: a checkpoint's
    changes, its conversation), for at most :data:`SCAN_SECONDS`."""
    deadline = time.monotonic() + SCAN_SECONDS
    found: list[Checkpoint] = []
    cursor = before
    while True:
        batch, after = store.log_page(before=cursor, limit=50, task=task, include_safety=safety, keep=keep)
        for c in batch:
            if all(hit(c) for hit in hits):
                found.append(c)
            cursor = c.seq
            if len(found) >= PAGE:
                return Rows(found, cursor)
            if time.monotonic() > deadline:
                return Rows(found, cursor, stopped=True)
        if after is None:
            return Rows(found, None)
        cursor = after


def timeline(store: Store, f: Filters, before: int | None = None, *, read_only: bool = False) -> Page:
    """The filter form and the page of checkpoints (``read_only``: no working-tree row)."""
    rows = page_rows(store, f, before)
    tasks = sorted({c.task for c in rows.checkpoints if c.task} | ({f.task} if f.task else set()))
    tags = sorted({t for c in rows.checkpoints for t in c.tags})
    form = fmt(
        '<form class="filters" method="get" action="/" role="search" aria-label="Filter the checkpoints">'
        '<label>Message <input name="q" value="{}" placeholder="text in the message" id="filter-q"></label>'
        '<label>Path <input name="path" value="{}" placeholder="src/app.py, src/, *.py"></label>'
        '<label>Conversation <input name="said" value="{}" placeholder="text in the messages"></label>'
        '<label>Task <input name="task" value="{}" list="tasks"></label><datalist id="tasks">{}</datalist>'
        '<label>Tag <input name="tag" value="{}" list="tags"></label><datalist id="tags">{}</datalist>'
        '<label>Who <select name="actor">{}</select></label>'
        '<label class="check"><input type="checkbox" name="safety" value="1"{}> safety checkpoints</label>'
        '<button type="submit">Filter</button> <a href="/">Clear</a></form>',
        f.q, f.path, f.said, f.task, join(fmt('<option value="{}">', t) for t in tasks),
        f.tag, join(fmt('<option value="{}">', t) for t in tags), _actor_options(f.actor), Html(" checked") if f.safety else Html(""),
    )
    picker = Html("") if read_only else range_picker()
    src = url("/timeline.frag", **f.query(), before=before)
    body = fmt(
        '<h1>Checkpoints</h1>{}{}<div id="timeline" data-src="{}" aria-live="polite">{}</div>',
        form, picker, src, rows_html(f, before, rows, here_row=not read_only, picks=not read_only),
    )
    return "Timeline", body


def _actor_options(chosen: str) -> Html:
    return join(
        fmt('<option value="{}"{}>{}</option>', v, Html(" selected") if v == chosen else Html(""), label)
        for v, label in (("", "everyone"), ("agent", "the agent"), ("user", "the user"), ("unknown", "unknown"))
    )


def range_picker() -> Html:
    """"Undo what the agent did since here": a window, a row's "since here", or two ticked rows,
    and whose changes (the range's page shows them combined, then the revert's preview)."""
    return fmt(
        '<form class="rangebar" id="range-form" method="get" action="/range" aria-label="Pick a range to review or take back">'
        "<strong>Review or take back</strong> <label><select name=\"actor\" id=\"range-actor\">{}</select> changes</label> in "
        '<button type="submit" name="since" value="1h" id="since-1h">the last hour</button> '
        '<button type="submit" name="since" value="1d" id="since-1d">the last day</button> '
        '<button type="submit" id="range-picked">the two ticked rows</button> '
        "<small>or follow a row's <em>since here</em></small></form>",
        join(fmt('<option value="{}">{}</option>', v, label) for v, label in (("agent", "the agent's"), ("user", "the user's"), ("unknown", "the unknown"), ("", "everyone's"))),
    )


def prompts(store: Store, f: Filters, before: int | None = None) -> dict[str, str]:
    """The prompt each row of a page belongs to (``{id: text}``), for ui.js to fill in."""
    from snapstore.ui.conversation import prompts as read

    rows = page_rows(store, f, before).checkpoints
    found = read(store, rows)
    # Once per turn, not on every row: on the oldest row of a run of rows with the same prompt,
    # never on the user's own checkpoints (they are not the turn's); a prompt's own row (the
    # turn's header) already reads as its prompt, and its steps are below it.
    out: dict[str, str] = {}
    for i, c in enumerate(rows):
        text = found.get(c.id)
        older = found.get(rows[i + 1].id) if i + 1 < len(rows) else None
        if text and text != older and not is_prompt(c) and c.metadata.get("actor") != "user":
            out[c.id] = text
    return out


def timeline_list(store: Store, f: Filters, before: int | None = None, *, read_only: bool = False) -> Html:
    """The list part of the timeline (also served alone, for live updates)."""
    return rows_html(f, before, page_rows(store, f, before), here_row=not read_only, picks=not read_only)


def rows_html(f: Filters, before: int | None, rows: Rows, *, here_row: bool = True, picks: bool = False) -> Html:
    """One table for the page, a header row per run of the same task (or agent session), and
    first, on the first page of an unfiltered timeline, the working tree's row (``here_row``)."""
    pager = _pager(f, before, rows)
    if not rows.checkpoints:
        if rows.stopped:
            return fmt('<p class="empty">No match in the checkpoints searched so far.</p>{}', pager)
        if f.any() or before is not None:
            return fmt('<p class="empty">No checkpoint matches.</p>{}', pager)
        return Html('<p class="empty">No checkpoints yet: run <code>snapstore snapshot</code>.</p>')
    groups: list[tuple[tuple[str, str], list[Checkpoint]]] = []
    for c in rows.checkpoints:
        key = group_key(c)
        if groups and groups[-1][0] == key:
            groups[-1][1].append(c)
        else:
            groups.append((key, [c]))
    gaps = {} if (f.any() or f.safety) else _gaps(rows.checkpoints)
    body = join(_group(key, members, picks, gaps) for key, members in groups)
    if here_row and before is None and not f.any():
        body = fmt("{}{}", here.placeholder(), body)
    return fmt(
        '<table class="timeline"><thead><tr><th scope="col" class="pick"><span class="sr">Tick</span></th><th scope="col">No.</th><th scope="col">When</th>'
        '<th scope="col">Message</th><th scope="col">Changes</th><th scope="col" class="who">Who</th>'
        '<th scope="col" class="id">Id</th></tr></thead>{}</table>{}',
        body, pager,
    )


def _pager(f: Filters, before: int | None, rows: Rows) -> Html:
    links = []
    if before is not None:
        links.append(fmt('<a href="{}" id="newer">Newest</a>', url("/", **f.query())))
    if rows.after is not None:
        what = "Search older checkpoints" if rows.stopped else "Older checkpoints"
        links.append(fmt('<a href="{}" rel="next" id="older">{} →</a>', url("/", **f.query(), before=rows.after), what))
    if not links:
        return Html("")
    return fmt('<nav class="pager" aria-label="Pages">{}</nav>', join(links, " "))


def plural(n: int, word: str) -> str:
    """``1 checkpoint``, ``2 checkpoints``."""
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def is_prompt(c: Checkpoint) -> bool:
    """Whether ``c`` was taken when the user sent a prompt (a hook's prompt event)."""
    event = c.metadata.get("event")
    return isinstance(event, str) and "prompt" in event.lower()


def _gaps(rows: list[Checkpoint]) -> dict[str, int]:
    """``{id: n}``: the n hidden records (safety checkpoints) numbered just above each row."""
    return {c.id: newer.seq - c.seq - 1 for newer, c in zip(rows, rows[1:]) if newer.seq - c.seq > 1}


def _group(key: tuple[str, str], members: list[Checkpoint], picks: bool = False, gaps: dict[str, int] | None = None) -> Html:
    kind, name = key
    title = fmt("{}: <strong>{}</strong>", kind, name) if kind else Html("No task")
    span = time_el(members[0].time_ns) if len(members) == 1 else fmt(
        "{}, {} – {}", plural(len(members), "checkpoint"), time_el(members[-1].time_ns), time_el(members[0].time_ns)
    )
    back = Html("")
    if picks and kind == "task":
        back = fmt(
            ' <form class="inline" method="post" action="/revert/preview"><input type="hidden" name="task" value="{}">'
            '<input type="hidden" name="actor" value="agent"><button type="submit" class="small task-revert">'
            "Take back the agent's changes in this task…</button></form>",
            name,
        )
    return fmt(
        '<tbody class="group"><tr class="grp"><th colspan="{}" scope="rowgroup">{} <small>{}</small>{}</th></tr>{}</tbody>',
        COLUMNS, title, span, back, join(_turns(members, picks, gaps or {})),
    )


def _turns(members: list[Checkpoint], picks: bool, gaps: dict[str, int]) -> list[Html]:
    """The rows of a group, anchored to prompts: each prompt's row heads its turn and the steps
    after it (newer, newest first) are nested below it."""
    out: list[Html] = []
    pending: list[Checkpoint] = []
    for c in members:  # newest first
        if is_prompt(c):
            out.append(_row(c, picks, head=len(pending), gap=gaps.get(c.id, 0)))
            out.extend(_row(s, picks, turn=c.seq, gap=gaps.get(s.id, 0)) for s in pending)
            pending = []
        else:
            pending.append(c)
    out.extend(_row(s, picks, gap=gaps.get(s.id, 0)) for s in pending)
    return out


def _row(c: Checkpoint, picks: bool = False, *, head: int | None = None, turn: int | None = None, gap: int = 0) -> Html:
    """One checkpoint's row; ``head``: it heads a turn of that many steps; ``turn``: the number
    of the prompt row it is nested under; ``gap``: hidden records numbered just above it."""
    href = f"/c/{c.id}"
    message = c.message or "(no message)"
    label = fmt('<span title="checkpoint number {} (it never changes)">#{}</span>', c.seq, c.seq)
    if c.is_safety:
        label = fmt("{} <small>safety</small>", label)
    if gap:
        # The numbers skipped above this row belong to hidden safety checkpoints: say so.
        label = fmt(
            '{} <small class="gap" title="{} safety checkpoint{} (the tree before a restore, undo or revert) numbered just above: '
            'tick &quot;safety checkpoints&quot; to list {}">+{} hidden</small>',
            label, gap, "" if gap == 1 else "s", "it" if gap == 1 else "them", gap,
        )
    tick = Html("")
    since = Html("")
    if picks:
        tick = fmt('<input type="checkbox" form="range-form" name="pick" value="{}" aria-label="tick #{} for a range">', c.id, c.seq)
        since = fmt(' <a class="since" href="{}">{}</a>', url("/range", start=c.id, actor="agent"), "since this prompt" if head is not None else "since here")
    classes = "cp" + (" safety" if c.is_safety else "") + (" turn" if head is not None else "") + (" step" if turn is not None else "")
    lead = fmt('<span class="turn-label">Prompt</span> ') if head is not None else Html("")
    steps = Html("")
    if head:
        steps = fmt(' <button type="button" class="small steps" data-fold="{}" aria-expanded="true">{}</button>', c.seq, plural(head, "step"))
    return fmt(
        '<tr class="{}" id="r{}"{} data-href="{}" data-id="{}"><td class="pick">{}</td><td class="ref">{}</td><td>{}</td>'
        '<td class="msg">{}<a href="{}">{}</a>{} {}{}</td><td>{}</td><td class="who">{}</td><td class="id"><code>{}</code></td></tr>',
        classes, c.seq, fmt(' data-turn="{}"', turn) if turn is not None else Html(""), href, c.id, tick, label, time_el(c.time_ns, relative=True), lead, href, message, steps,
        tags_el(c.tags), since, counts_el(c.stats), who(c) or "–", c.short_id,
    )


__all__ = ["PAGE", "Filters", "is_prompt", "range_picker", "Rows", "page_rows", "path_matcher", "prompts", "rows_html", "timeline", "timeline_list"]
