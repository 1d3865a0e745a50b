"""Unix sockets: who is at the other end, and reaching a socket whose path is too long.

* The peer's uid: ``SO_PEERCRED`` on Linux; ``getpeereid`` from the C library elsewhere (macOS,
  the BSDs); where neither is there (Linux with the facilities masked, say) the **weaker mode**:
  no peer check, and the socket's own protection stands alone: it lives in the user's store
  directory, which another user cannot write, and clients check that the socket file is theirs
  before connecting (docs/platforms.md).
* A path longer than ``sun_path`` (~104-108 bytes): on Linux through ``/proc/self/fd`` of the
  directory; elsewhere through a private symlink to the directory in a new temporary directory
  (``mkdtemp``: 0700, this user's), whose short path the kernel follows.
"""

from __future__ import annotations

import os

from snapstore import platform

TYPE_CHECKING = False  # no `typing` at run time: the thin client's start-up (tests/test_service.py)
if TYPE_CHECKING:
    from typing import Any

#: What :func:`peer_uid` says when the system cannot tell (the weaker mode).  (The module
#: imports nothing at its top but os: the thin client connects through it.)
UNKNOWN = None


def peer_uid(conn: Any) -> int | None:
    """The uid of the process at the other end of the connected Unix socket ``conn``, or None
    when this system cannot tell (the caller then relies on the socket's file permissions)."""
    if platform.linux():
        import socket
        import struct

        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", creds)[1])
    getpeereid = _getpeereid()
    if getpeereid is None:
        return UNKNOWN
    import ctypes

    uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
    if getpeereid(conn.fileno(), ctypes.byref(uid), ctypes.byref(gid)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(uid.value)


def checks_peers() -> bool:
    """Whether :func:`peer_uid` can tell who connects (else the weaker mode is in force)."""
    return platform.linux() or _getpeereid() is not None


_found: list[Any] = []


def _getpeereid() -> Any:
    if not _found:
        fn = None
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).getpeereid  # macOS, the BSDs, musl
            fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
            fn.restype = ctypes.c_int
        except (ImportError, OSError, AttributeError):
            fn = None
        _found.append(fn)
    return _found[0]


#: sun_path's size is 108 bytes on Linux, 104 on macOS and the BSDs: paths below this go as they are.
SHORT = 100


def connect(sock: Any, path: str) -> None:
    """``sock.connect(path)`` for a Unix socket path of any length (see the module's docstring)."""
    if len(os.fsencode(path)) < SHORT:
        sock.connect(path)
        return
    directory, name = os.path.dirname(path), os.path.basename(path)
    if platform.linux():
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            sock.connect(f"/proc/self/fd/{fd}/{name}")
        finally:
            os.close(fd)
        return
    import shutil
    import tempfile

    short = tempfile.mkdtemp(prefix="snapstore.")  # (0700: no one else can swap the link)
    try:
        os.symlink(directory, os.path.join(short, "d"))
        sock.connect(os.path.join(short, "d", name))
    finally:
        shutil.rmtree(short, ignore_errors=True)
