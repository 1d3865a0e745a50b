"""What one view may cost, counted in work done: rows rendered and bytes lexed, never seconds.

A page that shows file contents (a checkpoint's diffs, a comparison, a file) carries one
:class:`Budget`.  Each diff or file takes rows from it as it renders, and the bytes its
highlighting lexes (a cache hit lexes nothing).  A diff is rendered with the page while the
page's first part (:attr:`Limits.inline_lines`, :attr:`Limits.inline_lex`) has room; the
others are placeholders that the browser loads as they scroll into view, each a request with a
fresh budget of its own.  So what a page shows never depends on the machine's load or on other
pages loading at the same time: only on what the files hold.  A diff larger than one file's
caps is cut, with a link that asks for the same view with the larger :data:`FULL` limits ("show
anyway") and the raw download.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """The caps of one view."""

    #: diff or file rows rendered by one request
    page_lines: int
    #: rows rendered for one file (its diff, or the file view)
    file_lines: int
    #: a side larger than this is not read for a diff; the file view reads this much at most
    file_bytes: int
    #: rows rendered with the page itself: past them, diffs load as they scroll into view
    inline_lines: int = 1_500
    #: bytes lexed for highlighting with the page itself (cache misses only), likewise
    inline_lex: int = 16 << 10


#: What a page shows unasked: enough for any agent's step, cheap whatever the files hold.
DEFAULT = Limits(page_lines=5_000, file_lines=2_000, file_bytes=2 << 20, inline_lines=1_500, inline_lex=16 << 10)
#: "Show anyway": much more, still bounded (the store's own line-count cap for a side).
FULL = Limits(page_lines=100_000, file_lines=100_000, file_bytes=16 << 20, inline_lines=100_000, inline_lex=16 << 20)


@dataclass
class Budget:
    """The rows and lexing left to one view (one per request; not shared between threads)."""

    limits: Limits = DEFAULT
    lines_left: int = field(init=False)
    #: rows rendered so far
    rendered: int = field(init=False, default=0)
    #: bytes lexed so far (``lexed[0]``: a cell the highlighter adds to)
    lexed: list[int] = field(init=False, default_factory=lambda: [0])

    def __post_init__(self) -> None:
        self.lines_left = self.limits.page_lines

    @property
    def full(self) -> bool:
        """Whether these are the "show anyway" limits (then no larger view exists)."""
        return self.limits == FULL

    def file_lines(self) -> int:
        """How many rows the next file may render."""
        return max(0, min(self.limits.file_lines, self.lines_left))

    def spend(self, lines: int) -> None:
        """Count ``lines`` rows as rendered."""
        self.lines_left -= lines
        self.rendered += lines

    def exhausted(self) -> bool:
        """No rows left: the rest is listed, not rendered."""
        return self.lines_left <= 0

    def inline_room(self, rows: int = 0, lex: int = 0) -> bool:
        """Whether a diff of ``rows`` rows that lexes ``lex`` bytes still goes with the page (the
        first one always does when it is cheap); past that, diffs load when scrolled to."""
        lines, lexed = self.rendered + rows, self.lexed[0] + lex
        return lines <= self.limits.inline_lines and lexed <= self.limits.inline_lex and not self.exhausted()


def for_request(full: bool) -> Budget:
    """A fresh budget: :data:`FULL` when the reader asked to see everything."""
    return Budget(FULL if full else DEFAULT)


__all__ = ["DEFAULT", "FULL", "Budget", "Limits", "for_request"]
