"""The processes a mapping scan asks about: ``/proc`` listed again only when a process may have
been created since the last look that listed it.

Listing ``/proc`` makes the kernel find (or build) a dentry for every process, kernel threads
included; with the caches cold, as they are when a watched checkpoint starts, that was a third
of the checkpoint's mapping scan (:mod:`snapstore.platform.maps`).  Most looks follow another
by milliseconds, and few processes were created in between: the kernel hands out pids in
increasing order (wrapping at ``pid_max``) and ``/proc/loadavg`` ends with the last one it
handed out, in the reader's pid namespace.  So the processes created since the last look have
pids between that look's last pid and now's, and each of those is asked with ``pidfd_open``
(which answers for a process, not for one of its threads, nor a pid gone).

A pid handed out to a process not yet visible (a ``fork`` half-way) is answered as gone, as a
listing would skip it: every pid that was not found is asked once more at the next look.
``/proc`` is listed again whenever that cannot be relied on: the first look, a last pid that
went back (the pids wrapped) or moved on by more than :data:`MAX_NEW`, a ``/proc`` of another
pid namespace, no ``pidfd_open``, another process than the one that listed (a fork), and at
least every :data:`RELIST` seconds whatever the counts say.
"""

from __future__ import annotations

import os
import time
import weakref

from snapstore.platform.procmap import close_all

#: The most pids asked one by one; past that ``/proc`` is listed again (cheaper by then).
MAX_NEW = 64
#: ``/proc`` is listed again at least this often (seconds), whatever the last pid says.
RELIST = 0.5


class Pids:
    """The pids of the processes that exist now (the numbers of ``/proc``'s entries), kept
    between looks.  :meth:`gone` drops the processes a look found exited."""

    def __init__(self) -> None:
        self.listed: list[bytes] = []
        #: How many times ``/proc`` was listed, and pids asked one by one: a test's counts.
        self.listings = 0
        self.asked = 0
        self._last: int | None = None  # the last pid handed out, at the last look
        self._when = 0.0  # when /proc was last listed (time.monotonic)
        self._owner = 0  # the process that listed
        self._again: list[int] = []  # pids not found at the last look: asked once more
        self._held: dict[bytes, int] = {}  # /proc/loadavg's descriptor, once opened
        weakref.finalize(self, close_all, self._held)

    def now(self) -> list[bytes]:
        """The pids of the processes that exist now (and some that just exited)."""
        last = self._last_pid()
        known = self._last
        if (
            last is None or known is None or self._owner != os.getpid()
            or not 0 <= last - known <= MAX_NEW or time.monotonic() - self._when > RELIST
        ):  # fmt: skip
            return self._list(last)
        self._last = last
        candidates, self._again = [*range(known + 1, last + 1), *self._again], []
        for number in candidates:
            self.asked += 1
            try:
                os.close(os.pidfd_open(number))
            except OSError:
                if number > known:  # (a fork half-way is not visible yet: once more next look)
                    self._again.append(number)
                continue
            pid = str(number).encode()
            if pid not in self.listed:
                self.listed.append(pid)
        return self.listed

    def gone(self, pids: list[bytes]) -> None:
        """Forget processes found exited (their pids are handed out again only after a wrap,
        which makes the next look list ``/proc``)."""
        if pids:
            drop = set(pids)
            self.listed = [p for p in self.listed if p not in drop]

    def close(self) -> None:
        """Close the held ``/proc/loadavg`` (a later look opens it again)."""
        close_all(self._held)

    def _list(self, last: int | None) -> list[bytes]:
        self.listings += 1
        self.listed = [p for p in os.listdir(b"/proc") if p.isdigit()]
        self._when = time.monotonic()
        self._again = []
        self._owner = os.getpid()
        # Only where /proc is this process's pid namespace (loadavg counts in the reader's).
        self._last = last if last is not None and _own_namespace() and hasattr(os, "pidfd_open") else None
        return self.listed

    def _last_pid(self) -> int | None:
        try:
            fd = self._held.get(b"loadavg")
            if fd is None:
                fd = self._held[b"loadavg"] = os.open(b"/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
            return int(os.pread(fd, 128, 0).rsplit(None, 1)[-1])
        except (OSError, ValueError, IndexError):
            return None


def _own_namespace() -> bool:
    """Whether ``/proc`` shows this process's pid namespace (its ``self`` is this pid)."""
    try:
        return os.readlink(b"/proc/self") == str(os.getpid()).encode()
    except OSError:
        return False
