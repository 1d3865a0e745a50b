"""The store's writer lock: one writer at a time, any number of readers.

An advisory ``flock`` on ``<store>/lock``.  The holder writes its pid into the file so that a
waiter that times out can name it.  The kernel drops the lock when the holder dies (even by
SIGKILL), so a crashed writer never leaves the store locked.  Readers take no lock: LMDB's MVCC
gives them a consistent view while a writer works.

The lock is re-entrant per :class:`WriterLock` object (a store method that calls another keeps
it), and distinct objects conflict even within one process, because flock locks belong to open
file descriptions.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from snapstore.errors import LockedError, TreeIOError, UnsafePathError

DEFAULT_TIMEOUT = 30.0
#: A waiter tries again after FIRST_POLL seconds, then twice as long each time, up to POLL:
#: most holders (a checkpoint, a journal's clearing) are done within a few milliseconds, and a
#: waiter that slept the whole POLL each time paid up to 20 ms for a lock held for one.
FIRST_POLL = 0.001
POLL = 0.02


class WriterLock:
    """The flock on ``path``; :meth:`held` takes it (re-entrant per object)."""

    def __init__(self, path: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        self._fd: int | None = None
        self._depth = 0
        self._mutex = threading.RLock()
        #: Called right after the lock is taken (outermost level only); the store uses it to
        #: notice a data file replaced by another process's ``gc --compact``.
        self.on_acquire: Callable[[], object] | None = None

    @contextmanager
    def held(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the lock for the duration of the block (waiting up to ``timeout`` seconds,
        the lock's own timeout by default)."""
        with self._mutex:
            if self._depth == 0:
                self._acquire(self.timeout if timeout is None else timeout)
                if self.on_acquire is not None:
                    try:
                        self.on_acquire()
                    except BaseException:
                        self._release()
                        raise
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._release()

    def _acquire(self, timeout: float) -> None:
        try:
            # Never through a symlink: a planted `lock` link would have us truncate its target.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(f"refusing the store lock {self.path}: it is a symlink") from exc
            raise TreeIOError(f"cannot open the store lock {self.path}: {exc.strerror}") from exc
        deadline = time.monotonic() + timeout
        pause = FIRST_POLL
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _read_pid(fd)
                    os.close(fd)
                    who = f"process {holder}" if holder else "another process"
                    raise LockedError(
                        f"the store is locked by {who} (waited {timeout:g} s); "
                        "try again when it finishes"
                    ) from None
                time.sleep(min(pause, max(deadline - time.monotonic(), 0.0)))
                pause = min(pause * 2, POLL)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid is only informational
        self._fd = fd

    def _release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
