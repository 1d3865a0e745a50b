"""The watcher's source of change events: one interface, two backends.

:class:`snapstore.tree.watcher.Watcher` turns events into the paths a checkpoint re-examines; it
gets them from an :class:`EventSource`:

* :class:`snapstore.platform.inotify.InotifySource` (Linux): the kernel queues an event as soon
  as a ``write()`` or ``rename()`` returns; a checkpoint costs O(changed).
* :class:`snapstore.platform.polling.PollingSource` (everywhere else, and on Linux with the
  facilities masked): each read re-stats every watched directory and every entry in it and
  makes the events of what differs, so a checkpoint through it finds what a full walk finds
  (tests/torture's watch-vs-walk category checks it), for a cost near a walk's.

Why not the ``watchdog`` package (FSEvents on macOS, kqueue on the BSDs): it delivers events
from a thread of its own, some time after the change (FSEvents coalesces them for a latency),
with no way to ask "is everything up to now delivered?"; a checkpoint taken right after an
agent's write could miss it.  Polling has no such gap (docs/platforms.md).

Events use one vocabulary, the flags of :mod:`snapstore.platform.eventbits` (inotify's numbers, so the Linux source passes the
kernel's masks through untouched): a source's :meth:`EventSource.read` returns
``(watch, mask, name)`` triples, ``name`` empty for an event on the watched directory itself.
"""

from __future__ import annotations

from typing import Protocol

from snapstore import platform
from snapstore.platform import eventbits

#: The flags, in one module of their own (the sources import them).
BITS = eventbits.BITS


class EventSource(Protocol):
    """What the watcher needs of a source of change events."""

    #: What ``serve --status`` calls it ("inotify", "polling").
    kind: str

    def add_watch(self, path: bytes) -> int:
        """Watch directory ``path`` (not what is below it); the watch's number (the same number
        for a directory watched already).  Raises OSError as ``inotify_add_watch`` does."""
        ...

    def rm_watch(self, wd: int) -> None:
        """Stop watching (raises OSError when the watch is gone already)."""
        ...

    def read(self) -> list[tuple[int, int, bytes]]:
        """Every event queued since the last read, never blocking."""
        ...

    def why(self, exc: OSError) -> str:
        """Why :meth:`add_watch` failed, in words."""
        ...

    def close(self) -> None: ...


def make_source() -> EventSource:
    """The event source of this platform (raises OSError when none can be made now)."""
    if platform.linux():
        from snapstore.platform.inotify import InotifySource

        return InotifySource()
    from snapstore.platform.polling import PollingSource

    return PollingSource()


def watchable(root: str) -> str | None:
    """None when ``root`` can be watched reliably here, else why not (``serve --status``)."""
    if platform.linux():
        from snapstore.platform import inotify

        return inotify.watchable(root)
    return None  # (polling sees what a walk sees, on any file system)


def instance_error(exc: OSError) -> str:
    """Why :func:`make_source` failed, in words."""
    if platform.linux():
        from snapstore.platform import inotify

        return inotify.instance_error(exc)
    return f"cannot start watching: {exc.strerror or exc}"
