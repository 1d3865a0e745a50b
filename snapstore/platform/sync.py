"""Flushing a whole file system at once (Linux's ``syncfs``), or saying there is no such call.

Without it a caller fsyncs each file and directory it wrote (ops.restore.batch): the same
durability, more calls.
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
