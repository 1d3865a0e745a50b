"""A restore's or an undo's plan as a page: what matters first, the Confirm button always in view.

At the top, in a bar that stays on screen while the list scrolls (``position: sticky``): how
many paths would be created, overwritten and deleted, the warning about work no checkpoint
holds yet, the library's warnings, and Confirm.  Below, every path, those holding unsaved work
first, each with its diff from the tree now to what the restore would write (folded, and
rendered only when opened: the page is the list).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from snapstore.errors import SnapstoreError
from snapstore.ops.diff import Change
from snapstore.records.manifest import Entry
from snapstore.ui.budget import Budget
from snapstore.ui.html import Html, fmt, join, path_token, url

if TYPE_CHECKING:
    from snapstore.ops.restore import RestoreReport
    from snapstore.store import Store

VERBS = {"A": "create", "M": "overwrite", "D": "delete", "T": "replace", "X": "change the mode of"}


def plural(n: int, word: str) -> str:
    """``1 path``, ``3 paths``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def counts_line(report: RestoreReport) -> Html:
    """``create 2, overwrite 150 and delete 4 paths`` (only the kinds present)."""
    by: dict[str, int] = {}
    for c in report.changes:
        by[c.status] = by.get(c.status, 0) + 1
    order = list(VERBS)
    parts = [f"{VERBS.get(s, s)} {n:,}" for s, n in sorted(by.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)]
    said = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return fmt("{} {}", said, "path" if len(report.changes) == 1 else "paths")


def tree_to_target(store: Store, target_id: str, paths: list[bytes]) -> dict[bytes, Change]:
    """Each path's change from the working tree now to checkpoint ``target_id`` (what the
    restore would write), with lazy contents: the library's tree diff, turned around."""
    selection = [p.decode("utf-8", "surrogateescape") for p in paths] or None
    turned = {"A": "D", "D": "A"}
    out: dict[bytes, Change] = {}
    for c in store.diff(target_id, None, selection):
        tree_side, target_side = _loader(c.new_bytes), _loader(c.old_bytes)
        out[c.path] = Change(turned.get(c.status, c.status), c.path, c.new, c.old, tree_side, target_side)
    return out


def towards(store: Store, target_id: str, path: bytes) -> Html:
    """One path's diff from the working tree now to checkpoint ``target_id`` (a preview's row,
    loaded when opened)."""
    from snapstore.ui.filediff import Renderer, damaged

    change = tree_to_target(store, target_id, [path]).get(path)
    if change is None:
        return Html('<p class="note">This path no longer differs from the checkpoint.</p>')
    try:
        return Renderer("unified", Budget(), lambda _: "", lazy=False).body(change, Html(""))
    except SnapstoreError as exc:
        return damaged(change, exc)


def _loader(read: Callable[[], bytes | None]) -> Callable[[Entry], bytes]:
    return lambda _entry: read() or b""


def plan_page(
    report: RestoreReport,
    unsaved: set[bytes],
    diffs: dict[bytes, Change],
    *,
    verb: str,
    confirm: Html,
    notice: str = "",
) -> Html:
    """The sticky summary bar (counts, warnings, ``confirm``) and the per-path list."""
    if not report.changes:
        return Html('<p class="empty">Nothing would change: the tree already matches.</p>')
    at_risk = [c for c in report.changes if c.path in unsaved]
    note = fmt('<p class="notice" role="alert">{}</p>', notice) if notice else Html("")
    risk = Html("")
    if at_risk:
        risk = fmt(
            '<p class="warn" role="alert"><strong>{} {} work that no checkpoint has yet.</strong> The restore records '
            "the tree first (a safety checkpoint), so Undo brings {} back. {} listed first below.</p>",
            plural(len(at_risk), "path"), "holds" if len(at_risk) == 1 else "hold", "it" if len(at_risk) == 1 else "them",
            "It is" if len(at_risk) == 1 else "They are",
        )
    warnings = join(fmt('<p class="warn">{}</p>', w) for w in report.warnings)
    bar = fmt(
        '<div class="confirmbar" role="region" aria-label="Summary and confirmation">{}'
        "<p><strong>Dry run: nothing has changed yet.</strong> {} would {}.</p>{}{}{}</div>",
        note, verb, counts_line(report), risk, warnings, confirm,
    )
    ordered = sorted(report.changes, key=lambda c: c.path not in unsaved)  # unsaved first, stable
    rows = []
    for c in ordered:
        warn = Html(' <strong class="warn">unsaved work: kept in the safety checkpoint</strong>') if c.path in unsaved else Html("")
        head = fmt('<span class="st st-{}">would {}</span> <code>{}</code>{}', c.status, VERBS.get(c.status, c.status), c.display_path, warn)
        if c.path not in diffs:
            rows.append(fmt("<li>{}</li>", head))
            continue
        # rendered only when opened: a 54-path preview is a list, not 54 diffs in closed boxes
        src = url(f"/c/{report.target.id}/towards.frag", p=path_token(c.path))
        rows.append(fmt(
            '<li><details data-src="{}"><summary>{} <small>(diff)</small></summary><div class="lazybody">'
            '<p class="note">Loading the diff… (<a href="{}">open it alone</a>)</p></div></details></li>',
            src, head, src,
        ))
    return fmt('{}<h2>Every path <small>unsaved work first; open one for its diff, tree → restored</small></h2><ul class="plan">{}</ul>', bar, join(rows))


__all__ = ["counts_line", "plan_page", "plural", "towards", "tree_to_target", "undo_button"]


def undo_button() -> Html:
    """A form leading to the preview of undoing the last restore or undo."""
    return Html(
        '<form class="inline" method="post" action="/undo/preview"><button type="submit" class="action" id="undo">'
        "Undo the last operation…</button></form>"
    )
