"""Open flags that only some systems have."""

from __future__ import annotations

import os

from snapstore import platform


def traverse_flag() -> int:
    """A flag that opens a directory to walk through it without needing its read bit (Linux's
    ``O_PATH``); ``O_RDONLY`` elsewhere (then an unreadable directory on a long path's way
    cannot be passed, as with any ``open``)."""
    return getattr(os, "O_PATH", 0) if platform.linux() else 0


def nonblocking_pipe() -> tuple[int, int]:
    """A pipe whose two ends are non-blocking and close on exec (``pipe2`` where the system has
    it; macOS has not: then ``pipe`` and ``fcntl``, fine for a process's own wake-up pipe)."""
    if platform.linux() and hasattr(os, "pipe2"):
        return os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    r, w = os.pipe()  # (os.pipe's ends are already non-inheritable)
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def usable_cores() -> int:
    """How many cores this process may run on (its CPU affinity on Linux, else every core)."""
    if platform.linux() and hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
