"""Flushing a whole file system at once (Linux's ``syncfs``), or saying there is no such call.

Without it a caller fsyncs each file and directory it wrote (ops.restore.batch): the same
durability, more calls.  Also what tells a power failure from a process crash: the kernel's
boot id (:func:`boot_id`) changes only when the kernel restarted, and only then can a write
the kernel had accepted be missing from the disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from snapstore import platform

_looked_up: dict[bool, Callable[[int], int] | None] = {}


def _libc_syncfs() -> Callable[[int], int] | None:
    # Looked up on first use: read-only commands import the callers and need no ctypes.
    if False not in _looked_up:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).syncfs
            fn.argtypes = [ctypes.c_int]
            fn.restype = ctypes.c_int
        except (ImportError, OSError, AttributeError):  # no syncfs in this C library
            fn = None
        _looked_up[False] = fn
    return _looked_up[False]


def available() -> bool:
    """Whether :func:`flush_filesystem` can be called here."""
    return platform.linux() and _libc_syncfs() is not None


def flush_filesystem(fd: int) -> None:
    """Make durable everything written to the file system holding ``fd`` (``syncfs``).

    Call only when :func:`available`; raises OSError when the call fails.
    """
    import ctypes

    fn = _libc_syncfs()
    assert fn is not None and platform.linux()
    if fn(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


#: Test seam: the file holding this boot's id (Linux).
BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


def boot_id() -> str | None:
    """This boot's id: it changes when the kernel restarts (a power failure, a kernel crash, a
    reboot), never when a process dies.  None where it cannot be told (not Linux, masked,
    unreadable): callers then sync what they wrote before relying on it."""
    if not platform.linux():
        return None
    try:
        with open(BOOT_ID_FILE, "rb") as f:
            text = f.read(64).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if 8 <= len(text) <= 40 else None


def boot_time_ns() -> int | None:
    """When this boot began (wall clock, ns), or None where it cannot be told: a file written
    before it was written by an earlier boot."""
    if not platform.linux():
        return None
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return int(line.split()[1]) * 1_000_000_000
    except (OSError, ValueError, IndexError):
        return None
    return None
