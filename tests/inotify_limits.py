"""Real inotify limits for the watch tests: set a sysctl under ``/proc/sys/fs/inotify`` for a
short while, always restored.

The limits are per user and machine-wide, so a lowered one also applies to every other process
of this user while it is in force (another test's Store or service would lose its watches or its
inotify instance).  So every test holds a shared lock on one lock file while it runs (an
autouse fixture in tests/conftest.py: :func:`hold_shared`), and :func:`limited` turns it into
an exclusive one for its window: no other test of any worker runs while a limit is lowered.
Callers still keep the window short (a few checkpoints).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator

import pytest

SYSCTL = "/proc/sys/fs/inotify/"
_LOCK = "/tmp/snapstore-test-inotify-limits.lock"


def skip_unless_settable(name: str) -> None:
    """Skip (with the reason) when this process cannot set ``fs.inotify.<name>``."""
    if os.geteuid() != 0:
        pytest.skip(f"setting fs.inotify.{name} needs root")
    if not os.access(SYSCTL + name, os.W_OK):
        pytest.skip(f"{SYSCTL}{name} is not writable here (a container without it?)")


def read(name: str) -> int:
    with open(SYSCTL + name) as f:
        return int(f.read())


def _write(name: str, value: int) -> None:
    with open(SYSCTL + name, "w") as f:
        f.write(f"{value}\n")


_fd: int | None = None  # this process's descriptor of the lock file


def _lock_fd() -> int:
    global _fd
    if _fd is None:
        _fd = os.open(_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    return _fd


def hold_shared() -> None:
    """Take the shared lock for the test that starts (released by :func:`release`)."""
    fcntl.flock(_lock_fd(), fcntl.LOCK_SH)


def release() -> None:
    if _fd is not None:
        fcntl.flock(_fd, fcntl.LOCK_UN)


@contextlib.contextmanager
def limited(name: str, value: int | Callable[[], int]) -> Iterator[int]:
    """``fs.inotify.<name>`` set to ``value`` inside the block (the original value is yielded
    and written back on the way out, whatever happens), with no other test running.  A
    callable ``value`` is computed once the others have stopped (a count of watches in use
    taken before would count theirs)."""
    skip_unless_settable(name)
    fd = _lock_fd()
    fcntl.flock(fd, fcntl.LOCK_EX)  # (converts this test's shared lock: waits for the others)
    try:
        original = read(name)
        if callable(value):
            value = value()
        try:
            _write(name, value)
        except OSError as exc:
            pytest.skip(f"cannot set fs.inotify.{name}: {exc.strerror}")
        try:
            yield original
        finally:
            _write(name, original)
    finally:
        fcntl.flock(fd, fcntl.LOCK_SH)


def watches_in_use() -> int:
    """Inotify watches held by this user's processes now (from /proc/*/fdinfo)."""
    total = 0
    uid = os.geteuid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            fds = os.listdir(f"/proc/{pid}/fdinfo")
        except OSError:
            continue
        for fd in fds:
            try:
                with open(f"/proc/{pid}/fdinfo/{fd}", "rb") as f:
                    total += f.read().count(b"inotify wd:")
            except OSError:
                continue
    return total
