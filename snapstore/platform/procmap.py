"""A process's shared writable file mappings, asked of the kernel (``PROCMAP_QUERY``, Linux 6.11+).

``ioctl(PROCMAP_QUERY)`` on an open ``/proc/PID/maps`` returns the first mapping at or after an
address that has the asked-for properties, the kernel skipping the others itself: asking for
"shared, writable, backed by a file" answers a process that maps nothing so (nearly all of them)
with one call, where reading its maps text costs the kernel a line for every mapping and, with
the page-fault fingerprint :mod:`snapstore.platform.maps` uses otherwise, a busy process (this
one, an agent's) is read again at every look.  The answer is the process's mappings at the
moment of the call, whatever happened before: no fingerprint, nothing that can be stale.

The ``maps`` files stay open between looks (up to a budget, as the stat files of the
fingerprints do): the permission check (the one reading the maps text makes) is done at open,
and the open file keeps the address space it was opened for.  When that address space is gone
(the process exited, or ran ``execve``) the call fails with ``ESRCH`` and the file is opened
again, which finds the new one, or nothing.  A kernel thread has no address space at all: each
is held as a pidfd instead, and one ``poll`` a look says which of them exited (a pid given again
is then a new process, asked afresh), so they cost nothing a process.  A zombie (no address
space any more, not yet reaped) is asked afresh at every look.

Names come as the kernel's path of the mapped file (``" (deleted)"`` appended when unlinked, as
in the maps text), without the maps text's escaping of a newline.
"""

from __future__ import annotations

import errno
import fcntl
import os
import select
import struct
import weakref
from array import array

#: ``_IOWR('f', 17, struct procmap_query)`` (linux/fs.h), the struct being 104 bytes.
PROCMAP_QUERY = (3 << 30) | (104 << 16) | (ord("f") << 8) | 17
#: struct procmap_query: size, query_flags, query_addr, vma_start, vma_end, vma_flags,
#: vma_page_size, vma_offset, inode, dev_major, dev_minor, vma_name_size, build_id_size,
#: vma_name_addr, build_id_addr.
_QUERY = struct.Struct("=QQQQQQQQQIIIIQQ")
_WRITABLE, _SHARED, _COVERING_OR_NEXT, _FILE_BACKED = 0x02, 0x08, 0x10, 0x20
_FLAGS = _WRITABLE | _SHARED | _COVERING_OR_NEXT | _FILE_BACKED
#: The name buffer (PATH_MAX: a longer path is answered ENAMETOOLONG and asked again without it).
_NAME_MAX = 4096
_ADDR, _NAME_SIZE = 16, 80  # (offsets of query_addr and vma_name_size)
_PF_KTHREAD = 0x00200000

#: One process's shared writable mappings: (major, minor, inode, name) each.
Mappings = tuple[tuple[int, int, int, bytes], ...]


class Unsupported(Exception):
    """This kernel does not answer ``PROCMAP_QUERY`` (before Linux 6.11)."""


class Queries:
    """Held ``/proc/PID/maps`` files (and pidfds of kernel threads), by pid, asked with
    ``PROCMAP_QUERY``.  At most ``limit`` are held; the other processes are opened, asked and
    closed each time."""

    def __init__(self, limit: int) -> None:
        self.maps: dict[bytes, int] = {}
        #: Kernel threads (no address space): their pidfd, and the pid of each pidfd.
        self.idle: dict[bytes, int] = {}
        self._idle_pids: dict[int, bytes] = {}
        self._exits = select.poll()
        self.limit = limit
        #: How many ``maps`` files were opened, and how many calls made: a test's counts.
        self.opened = 0
        self.calls = 0
        self._name = array("b", bytes(_NAME_MAX))
        self._ask = bytearray(_QUERY.pack(_QUERY.size, _FLAGS, 0, 0, 0, 0, 0, 0, 0, 0, 0, _NAME_MAX, 0,
                                          self._name.buffer_info()[0], 0))
        self._buf = bytearray(self._ask)
        weakref.finalize(self, close_all, self.maps, self.idle)

    def look(self, pids: list[bytes]) -> list[Mappings]:
        """Each listed process's shared writable file mappings now (none for a process gone,
        not ours, or with no address space); the held files of processes not listed are closed."""
        if self.idle:
            for fd, _ in self._exits.poll(0):  # kernel threads that exited since the last look
                self._forget_idle(self._idle_pids[fd])
        out = [self._mappings(pid) for pid in pids]
        alive = set(pids)
        for pid in [p for p in self.maps if p not in alive]:
            os.close(self.maps.pop(pid))
        for pid in [p for p in self.idle if p not in alive]:
            self._forget_idle(pid)
        return out

    def close(self) -> None:
        """Close every held file."""
        for pid in list(self.idle):
            self._forget_idle(pid)
        close_all(self.maps)

    def _mappings(self, pid: bytes) -> Mappings:
        if pid in self.idle:
            return ()
        fd = self.maps.get(pid)
        if fd is not None:
            try:
                return self._ask_all(fd)
            except ProcessLookupError:  # its address space went (exit, execve): open again
                os.close(self.maps.pop(pid))
        return self._fresh(pid)

    def _fresh(self, pid: bytes, again: bool = True) -> Mappings:
        try:
            fd = os.open(b"/proc/" + pid + b"/maps", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return ()  # gone, or not ours to read (as the maps text would be)
        self.opened += 1
        keep = len(self.maps) + len(self.idle) < self.limit
        try:
            found = self._ask_all(fd)
        except ProcessLookupError:  # no address space: a kernel thread, a zombie, an exit or execve
            os.close(fd)
            if keep and self._hold_idle(pid):
                return ()
            return self._fresh(pid, again=False) if again else ()  # (an execve since the open)
        except BaseException:
            os.close(fd)
            raise
        if keep:
            self.maps[pid] = fd
        else:
            os.close(fd)
        return found

    def _hold_idle(self, pid: bytes) -> bool:
        """Hold a kernel thread's pidfd; False (nothing held) for any other process.  The
        pidfd is opened first: if the pid changed hands before the check, it names the
        process that is gone, and the next look's poll forgets it."""
        try:
            fd = os.pidfd_open(int(pid))
        except (OSError, AttributeError):
            return False  # (then asked afresh at every look)
        if not _kernel_thread(pid):
            os.close(fd)
            return False
        self.idle[pid] = fd
        self._idle_pids[fd] = pid
        self._exits.register(fd, select.POLLIN)
        return True

    def _forget_idle(self, pid: bytes) -> None:
        fd = self.idle.pop(pid)
        self._exits.unregister(fd)
        del self._idle_pids[fd]
        os.close(fd)

    def _ask_all(self, fd: int) -> Mappings:
        found: list[tuple[int, int, int, bytes]] = []
        buf = self._buf
        buf[:] = self._ask
        while True:
            self.calls += 1
            try:
                fcntl.ioctl(fd, PROCMAP_QUERY, buf, True)
            except OSError as exc:
                if exc.errno == errno.ENOENT:
                    return tuple(found)  # (no more)
                if exc.errno == errno.ESRCH:
                    raise ProcessLookupError from exc
                if exc.errno == errno.ENAMETOOLONG:
                    found.append(self._unnamed(fd, buf))
                    continue
                if exc.errno in (errno.ENOTTY, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise Unsupported(str(exc)) from exc
                raise
            _, _, _, _, end, _, _, _, ino, major, minor, size, _, _, _ = _QUERY.unpack(buf)
            found.append((major, minor, ino, self._name[: max(0, size - 1)].tobytes()))
            _next(buf, end)

    def _unnamed(self, fd: int, buf: bytearray) -> tuple[int, int, int, bytes]:
        """The mapping whose path is longer than PATH_MAX, asked again without its name (an
        empty name: its inode is searched for in the tree)."""
        struct.pack_into("=I", buf, _NAME_SIZE, 0)
        self.calls += 1
        fcntl.ioctl(fd, PROCMAP_QUERY, buf, True)
        _, _, _, _, end, _, _, _, ino, major, minor, _, _, _, _ = _QUERY.unpack(buf)
        _next(buf, end)
        return (major, minor, ino, b"")


def supported() -> bool:
    """Whether this kernel answers ``PROCMAP_QUERY`` (asked once, of this process's maps)."""
    global _SUPPORTED
    if _SUPPORTED is None:
        fd = _open(b"/proc/self/maps")
        if fd is None:
            return False
        try:
            Queries(0)._ask_all(fd)
            _SUPPORTED = True
        except (Unsupported, OSError):
            _SUPPORTED = False
        finally:
            os.close(fd)
    return _SUPPORTED


_SUPPORTED: bool | None = None


def _next(buf: bytearray, end: int) -> None:
    """Set ``buf`` to ask for the next mapping after ``end``, with the whole name buffer."""
    struct.pack_into("=Q", buf, _ADDR, end)
    struct.pack_into("=I", buf, _NAME_SIZE, _NAME_MAX)


def _kernel_thread(pid: bytes) -> bool:
    """Whether the process is a kernel thread (``/proc/PID/stat`` field 9 has ``PF_KTHREAD``):
    it never has an address space."""
    fd = _open(b"/proc/" + pid + b"/stat")
    if fd is None:
        return False
    try:
        data = _pread(fd)
    finally:
        os.close(fd)
    fields = data[data.rfind(b")") + 2 :].split()
    return len(fields) > 6 and fields[6].isdigit() and bool(int(fields[6]) & _PF_KTHREAD)


def _open(path: bytes) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _pread(fd: int) -> bytes:
    try:
        return os.pread(fd, 512, 0)
    except OSError:
        return b""


def close_all(*helds: dict[bytes, int]) -> None:
    """Close the descriptors of each ``pid -> fd`` map, and empty it."""
    for held in helds:
        for fd in held.values():
            try:
                os.close(fd)
            except OSError:
                pass
        held.clear()
