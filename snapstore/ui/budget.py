"""What one view may cost: lines and bytes rendered, and seconds spent.

A page that shows file contents (a checkpoint's diffs, a comparison, a file) carries one
:class:`Budget`.  Each diff or file takes lines and bytes from it as it renders; when the budget
runs out (or its time does), the rest is not rendered and the page says so, with a link that asks
for the same view with the larger :data:`FULL` limits ("show anyway") and the raw download.  So
an agent writing a 50 MB lockfile or rewriting a third of an 80,000-line file costs every
reader the same few thousand rows, never minutes of server time or a 100 MB page.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """The caps of one view."""

    #: diff or file rows rendered on the whole page
    page_lines: int
    #: rows rendered for one file (its diff, or the file view)
    file_lines: int
    #: a side larger than this is not read for a diff; the file view reads this much at most
    file_bytes: int
    #: rendering stops (at the next file or hunk) after this long
    seconds: float


#: What a page shows unasked: enough for any agent's step, cheap whatever the files hold.
DEFAULT = Limits(page_lines=5_000, file_lines=2_000, file_bytes=2 << 20, seconds=3.0)
#: "Show anyway": much more, still bounded (the store's own line-count cap for a side).
FULL = Limits(page_lines=100_000, file_lines=100_000, file_bytes=16 << 20, seconds=30.0)


@dataclass
class Budget:
    """The lines and time left to one view (one per request; not shared between threads)."""

    limits: Limits = DEFAULT
    lines_left: int = field(init=False)
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.lines_left = self.limits.page_lines
        self.deadline = time.monotonic() + self.limits.seconds

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

    def exhausted(self) -> bool:
        """No rows or no time left: the rest of the page is listed, not rendered."""
        return self.lines_left <= 0 or time.monotonic() > self.deadline


def for_request(full: bool) -> Budget:
    """A fresh budget: :data:`FULL` when the reader asked to see everything."""
    return Budget(FULL if full else DEFAULT)


__all__ = ["DEFAULT", "FULL", "Budget", "Limits", "for_request"]
