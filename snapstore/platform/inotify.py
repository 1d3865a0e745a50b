"""Linux's inotify as the watcher's event source (:class:`snapstore.platform.events.EventSource`).

inotify_simple is used (a ~100-line ctypes wrapper, maintained, no threads of its own): it
reports events as soon as ``write()`` returns and reports queue overflow, which watchfiles did
not (found when the service was designed).  The queue is read and parsed here rather than by
inotify_simple's ``read``, which makes a namedtuple and a str name of each event: a restore or
an agent's rewrite of 100 files queues hundreds of events, each cheaper parsed here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import struct
import sys
import termios
from typing import Any

#: statfs f_type magic numbers of file systems whose inotify events are incomplete (changes
#: made by other hosts or by a userspace daemon are not reported).
UNRELIABLE_FS = {
    0x6969: "nfs",
    0xFF534D42: "cifs",
    0xFE534D42: "smb2",
    0x517B: "smb",
    0x65735546: "fuse",
    0x01021997: "9p (v9fs)",
    0x6A656A63: "virtiofs",
    0x73757245: "coda",
    0x564C: "ncp",
    0x47504653: "gpfs",
    0x0BD00BD0: "lustre",
    0x5346414F: "afs",
}

#: One ``struct inotify_event`` without its name: wd, mask, cookie, name length.
_EVENT = struct.Struct("iIII")


class InotifySource:
    """Watches through one inotify instance (raises OSError when none can be made)."""

    kind = "inotify"

    def __init__(self) -> None:
        from inotify_simple import INotify, flags

        self._mask = (
            flags.CREATE | flags.DELETE | flags.MODIFY | flags.ATTRIB | flags.CLOSE_WRITE
            | flags.MOVED_FROM | flags.MOVED_TO | flags.DELETE_SELF | flags.MOVE_SELF
            | flags.DONT_FOLLOW | flags.ONLYDIR | flags.EXCL_UNLINK
        )  # fmt: skip
        self._inotify: Any = INotify()

    def add_watch(self, path: bytes) -> int:
        return int(self._inotify.add_watch(path, self._mask))

    def rm_watch(self, wd: int) -> None:
        self._inotify.rm_watch(wd)

    def read(self) -> list[tuple[int, int, bytes]]:
        fd = int(self._inotify.fileno())
        queued = int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)
        data = os.read(fd, queued) if queued else b""
        out, unpack, size = [], _EVENT.unpack_from, _EVENT.size
        pos, end = 0, len(data)
        while pos < end:
            wd, mask, _cookie, length = unpack(data, pos)
            pos += size
            out.append((wd, mask, data[pos : pos + length].split(b"\0", 1)[0] if length else b""))
            pos += length
        return out

    def why(self, exc: OSError) -> str:
        if exc.errno == errno.ENOSPC:
            return "fs.inotify.max_user_watches reached"
        return os.strerror(exc.errno or 0)

    def close(self) -> None:
        self._inotify.close()


def instance_error(exc: OSError) -> str:
    """Why no inotify instance could be made, in words."""
    why = f"cannot make an inotify instance: {exc.strerror or exc}"
    if exc.errno == errno.EMFILE:
        why += " (fs.inotify.max_user_instances reached)"
    return why


class _StatFs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_long * 15)]


def filesystem_type(path: str) -> int | None:
    """The statfs f_type of the file system holding ``path`` (None when unknown)."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)
    buf = _StatFs()
    if libc.statfs(os.fsencode(path), ctypes.byref(buf)) != 0:
        return None
    return int(buf.f_type) & 0xFFFFFFFF


def watchable(root: str) -> str | None:
    """None when ``root`` can be watched reliably with inotify, else why not."""
    try:
        import inotify_simple  # noqa: F401
    except ImportError:
        return "inotify_simple is not installed"
    fs = filesystem_type(root)
    if fs is not None and fs in UNRELIABLE_FS:
        return f"{UNRELIABLE_FS[fs]} gives no reliable change events"
    return None
