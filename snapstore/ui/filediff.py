"""One file's diff on a page: rendered with the page or loaded when it scrolls into view, and
marked, not fatal, when its stored content cannot be read.

A page renders diffs while its budget's first part has room (:meth:`Budget.inline_room`: rows
rendered and bytes lexed, never seconds); every later file is a placeholder whose address
(the file's own diff, as a fragment) the browser loads as it nears the screen.  So the first
byte comes after a few files whatever the checkpoint holds, and every diff is rendered however
many pages load at once.  A file whose chunks are damaged says so, with the repair command, and
the page goes on with the others.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from snapstore.errors import SnapstoreError
from snapstore.ops.diff import Change
from snapstore.ops.renames import Renamed
from snapstore.ops.textdiff import LineCounts
from snapstore.ui import diffview
from snapstore.ui.budget import Budget
from snapstore.ui.highlight import lex_cost
from snapstore.ui.html import Html, fmt, path_token, url

if TYPE_CHECKING:
    from snapstore.store import Store

#: Lines of context shown around each change, and the steps of "show more context".
CONTEXTS = (3, 25, 200, 100_000)


class Damaged(LineCounts):
    """The line counts of a file whose content could not be read."""

    __slots__ = ()

    @property
    def note(self) -> str:
        return "damaged"


def line_counts(store: Store, changes: list[Change]) -> list[LineCounts]:
    """``store.line_counts(changes)``, with a file that cannot be read counted as :class:`Damaged`
    instead of failing the whole list."""
    try:
        return store.line_counts(changes)
    except SnapstoreError:
        out: list[LineCounts] = []
        for c in changes:
            try:
                out += store.line_counts([c])
            except SnapstoreError:
                out.append(Damaged(0, 0, False))
        return out


#: Checkpoints whose changes (and line counts) are kept, per store: a checkpoint never changes,
#: and its page, its fragments and four other readers of it all need them.
KEEP_CHANGES = 32
_kept: weakref.WeakKeyDictionary[Any, OrderedDict[str, tuple[list[Change], list[LineCounts] | None]]] = weakref.WeakKeyDictionary()
_kept_lock = threading.Lock()


def _kept_for(store: Store) -> OrderedDict[str, tuple[list[Change], list[LineCounts] | None]]:
    with _kept_lock:
        found = _kept.get(store)
        if found is None:
            found = _kept[store] = OrderedDict()
        return found


def changes_of(store: Store, cid: str) -> list[Change]:
    """Checkpoint ``cid``'s changes with renames (a full id: kept for the next request); without
    renames when finding them needs content that cannot be read (the damaged file is then
    marked by its own diff)."""
    kept = _kept_for(store)
    with _kept_lock:
        if cid in kept:
            kept.move_to_end(cid)
            return kept[cid][0]
    try:
        changes = store.changes(cid, renames=True)
    except SnapstoreError:
        changes = store.changes(cid)
    with _kept_lock:
        kept[cid] = (changes, None)
        while len(kept) > KEEP_CHANGES:
            kept.popitem(last=False)
    return changes


def checkpoint_counts(store: Store, cid: str, changes: list[Change]) -> list[LineCounts]:
    """:func:`line_counts` of checkpoint ``cid``'s ``changes`` (all of them), kept with them."""
    kept = _kept_for(store)
    with _kept_lock:
        found = kept.get(cid)
        if found is not None and found[0] is changes and found[1] is not None:
            return found[1]
    counts = line_counts(store, changes)
    with _kept_lock:
        if cid in kept and kept[cid][0] is changes:
            kept[cid] = (changes, counts)
    return counts


def damaged(change: Change, exc: SnapstoreError) -> Html:
    """The note in place of a diff whose stored content cannot be read."""
    return fmt(
        '<p class="note damaged" role="alert"><strong>Damaged:</strong> the stored content of <code>{}</code> cannot be '
        "read ({}). Run <code>snapstore verify --repair</code> (the working tree or a remote may still hold it); "
        "the other files are shown.</p>",
        change.display_path, exc.message,
    )


def with_params(address: str, **params: str | int | None) -> str:
    """``address`` with more query parameters."""
    extra = url("", **params)
    if not extra:
        return address
    return address + ("&" if "?" in address else "?") + extra[1:]


def next_context(context: int) -> int | None:
    """The next step of "show more context", or None at the whole file."""
    later = [n for n in CONTEXTS if n > context]
    return later[0] if later else None


@dataclass
class Renderer:
    """Renders the diffs of one page: ``own(change)`` is the address of a file's diff alone;
    ``old_id``/``new_id`` the checkpoints of the two sides (for images; None: not stored)."""

    view: str
    budget: Budget
    own: Callable[[Change], str]
    old_id: str | None = None
    new_id: str | None = None
    context: int = CONTEXTS[0]
    lazy: bool = True
    deferring: bool = False

    def __call__(self, change: Change, more: Html) -> Html:
        """The diff of ``change`` now, or its placeholder once the page's first part is full."""
        sizes = [e.size for e in (change.old, change.new) if e is not None and e.is_file]
        if self.lazy and (self.deferring or not self.budget.inline_room(lex=lex_cost(change.path, sizes))):
            self.deferring = True  # (the rest of the page loads in order, as it is scrolled to)
            own = self.own(change)
            return fmt(
                '<div class="lazy" data-src="{}"><p class="note">This diff loads as it comes into view. '
                '<a href="{}">Show this diff alone</a></p></div>',
                with_params(own, view=self.view, frag=1, ctx=self._ctx()), with_params(own, view=self.view, ctx=self._ctx()),
            )
        return self.body(change, more)

    def body(self, change: Change, more: Html) -> Html:
        """The diff of ``change`` within the budget, or the note saying it is damaged."""
        step, own = next_context(self.context), self.own(change)
        expand = with_params(own, view=self.view, ctx=step) if step and own else None
        try:
            return diffview.change_body(
                change, self.view, self.budget, more, images=self.images(change), context=self.context, expand=expand,
            )
        except SnapstoreError as exc:
            return damaged(change, exc)

    def images(self, change: Change) -> tuple[str | None, str | None]:
        old_path = change.old_path if isinstance(change, Renamed) else change.path
        old = url(f"/c/{self.old_id}/image", p=path_token(old_path)) if self.old_id and change.old is not None else None
        new = url(f"/c/{self.new_id}/image", p=path_token(change.path)) if self.new_id and change.new is not None else None
        return old, new

    def _ctx(self) -> int | None:
        return None if self.context == CONTEXTS[0] else self.context


__all__ = ["CONTEXTS", "Damaged", "Renderer", "changes_of", "checkpoint_counts", "damaged", "line_counts", "next_context", "with_params"]
