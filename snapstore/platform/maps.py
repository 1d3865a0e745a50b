"""Which files processes map shared and writable: the watcher's blind spot, read from ``/proc``.

Only Linux shows every process's mappings to a process of the same user (``/proc/PID/maps``).
Elsewhere (or with the Linux facilities masked) :func:`mapped_for_write` finds nothing and
:func:`sees_mappings` says so: the watcher there is the polling one
(:mod:`snapstore.platform.polling`), which re-stats every file at every checkpoint, so a write
through a mapping is seen when it changes the file's mtime or size, as a full walk sees it, and
not otherwise (``serve --status`` and docs/reliability.md say the guarantee is weaker).

A write through a ``MAP_SHARED`` mapping gives no inotify event until the mapping goes
(``IN_CLOSE_WRITE`` at ``munmap`` or exit), only a new mtime, so a watching Store re-stats the
files found here at every checkpoint (:mod:`snapstore.ops.snapshot.incremental`).

Reading every process's ``/proc/PID/maps`` at every checkpoint was the largest part of a hook
event answered by the service, and it grows with the number of processes.  :class:`MapsCache`
keeps each process's shared writable mappings and reads its maps again only when one short read
of ``/proc/PID/stat`` shows a change of its start time, its mapped size or its page-fault counts.
Why that is enough: a write through a mapping made (or made writable) since the last look
faults at least once (a new mapping has no page tables yet; an ``mprotect`` to writable makes the
first write fault; ``MAP_POPULATE`` faults at ``mmap``), and those counts only grow.  A busy
process faults all the time and is read every time; an idle one is read once.  A name the cache
holds that went stale (renamed or deleted while mapped) sends its inode through the tree search:
the error is on the side of looking.

The stat files themselves stay open between looks (:class:`StatFiles`, up to
:data:`HELD_STATS` of them and never more than a small share of the process's file limit): one
``pread`` a process instead of an open, a read and a close, the larger part of a watched
checkpoint's time on a machine of many processes.  A held file answers only for the process it
was opened for: once that process is gone, its reads fail (a new process given the same pid is
a new ``/proc`` entry), and the pid is opened afresh.

Where the kernel answers ``PROCMAP_QUERY`` (Linux 6.11+), none of that is needed:
:mod:`snapstore.platform.procmap` asks each process for its shared writable file mappings
directly, one call for a process that has none, so a busy process costs no more than an idle
one and the answer is never a fingerprint's guess.  The fingerprints above are the fallback.
"""

from __future__ import annotations

import os
import re
import weakref
from typing import TYPE_CHECKING

from snapstore import platform

if TYPE_CHECKING:  # (imported when a watcher makes its cache: not on a CLI process's path)
    from snapstore.platform.procmap import Queries

#: A maps line of a shared mapping with write access: device, inode, name.
_SHARED_WRITABLE = re.compile(rb"^[0-9a-f]+-[0-9a-f]+ [r-]w[x-]s [0-9a-f]+ ([0-9a-f]+):([0-9a-f]+) (\d+) +(.*)$", re.M)

#: One process's shared writable mappings: (major, minor, inode, name) each
#: (:data:`snapstore.platform.procmap.Mappings`).
Mappings = tuple[tuple[int, int, int, bytes], ...]


#: The most ``/proc/PID/stat`` files a :class:`MapsCache` keeps open between looks.
HELD_STATS = 256


class StatFiles:
    """Open ``/proc/PID/stat`` files, by pid: read again with one ``pread``.

    At most ``limit`` are held (the others are opened, read and closed each time)."""

    def __init__(self, limit: int) -> None:
        self.fds: dict[bytes, int] = {}
        self.limit = limit
        #: How many stat files were opened to be held: a test's count.
        self.opened = 0
        # (A cache dropped without close, as a Watcher's that is never closed, closes them too.)
        from snapstore.platform.procmap import close_all

        weakref.finalize(self, close_all, self.fds)

    def read(self, pid: bytes) -> bytes:
        """The start of the process's stat file (empty when it is gone or unreadable)."""
        fd = self.fds.get(pid)
        if fd is None:
            path = b"/proc/" + pid + b"/stat"
            if len(self.fds) >= self.limit:
                return _read(path, 1024)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return b""
            self.fds[pid] = fd
            self.opened += 1
        try:
            data = os.pread(fd, 1024, 0)
        except OSError:
            data = b""
        if not data:  # (the process is gone: its pid, if reused, is opened afresh next time)
            self.drop(pid)
        return data

    def drop(self, pid: bytes) -> None:
        fd = self.fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Close every held file."""
        for pid in list(self.fds):
            self.drop(pid)


def _held_limit() -> int:
    """:data:`HELD_STATS`, or an eighth of the soft limit on open files when that is less."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return HELD_STATS if soft == resource.RLIM_INFINITY else max(0, min(HELD_STATS, soft // 8))


class MapsCache:
    """Each process's shared writable mappings, keyed by its pid, with the fingerprint (start
    time, mapped size) they were read under, and the held stat files the fingerprints are
    read from (:meth:`close` closes them)."""

    def __init__(self, *, queries: bool = True) -> None:
        self.entries: dict[bytes, tuple[bytes, Mappings]] = {}
        #: Mapped files found to be their file's one and only link (:func:`_sole_link`), as
        #: ``(major, minor, inode, name)``: not stat'ed again until :meth:`forget_links`.
        self.sole: set[tuple[int, int, int, bytes]] = set()
        #: How many maps files were read as text (the rest came from the cache): a test's count.
        self.reads = 0
        limit = _held_limit() if platform.linux() else 0
        from snapstore.platform import procmap

        #: The kernel's answers (:mod:`.procmap`) where it gives them (``queries=False``: never).
        self.queries: Queries | None = (
            procmap.Queries(limit) if queries and platform.linux() and procmap.supported() else None
        )
        self.stats = StatFiles(limit if self.queries is None else 0)

    def close(self) -> None:
        """Close the held files (a later look opens them again)."""
        self.stats.close()
        if self.queries is not None:
            self.queries.close()

    def look(self, pids: list[bytes]) -> list[Mappings]:
        """Each listed process's shared writable mappings (the kernel's answers, or the maps
        text of the processes whose fingerprint changed); forgets the processes not listed."""
        if self.queries is not None:
            return self.queries.look(pids)
        out = [self.mappings(pid) for pid in pids]
        self.forget_all_but(pids)
        return out

    def mappings(self, pid: bytes) -> Mappings:
        """One process's shared writable mappings, from the maps text (read again only when
        its fingerprint changed)."""
        mark = _fingerprint(pid, self.stats)
        if mark is not None:
            hit = self.entries.get(pid)
            if hit is not None and hit[0] == mark:
                return hit[1]
        self.reads += 1
        found = _numbers(_shared_writable(_read(b"/proc/" + pid + b"/maps")))
        if mark is not None:
            self.entries[pid] = (mark, found)
        return found

    def forget_links(self) -> None:
        """Forget which mapped files had one link (after a walk of the tree: a file that gained
        a link in the tree since gave an event there, which made the walk)."""
        self.sole.clear()

    def forget_all_but(self, pids: list[bytes]) -> None:
        """Drop the processes that are gone (and close their held files)."""
        alive = set(pids)
        for pid in [p for p in self.entries if p not in alive]:
            del self.entries[pid]
        for pid in [p for p in self.stats.fds if p not in alive]:
            self.stats.drop(pid)


def mapped_for_write(
    real_root: bytes, dev: int | None, cache: MapsCache | None = None
) -> tuple[set[bytes], set[int]]:
    """What processes map ``MAP_SHARED`` with write access now, from ``/proc/*/maps``: the
    root-relative paths of the files mapped by a name below ``real_root`` (a resolved path),
    and the inode numbers of all the files mapped on the tree's device (``dev``): a file mapped
    by another name (outside the tree, a name since deleted, another link in it) may have a
    link in the tree that the mapping writes to.

    Processes whose maps this user cannot read (other users', unless root) are not seen, nor,
    without the kernel's queries, names the maps text cannot show (a newline in a name): the
    periodic walk covers those.  ``cache`` (a watcher's) asks the kernel (:mod:`.procmap`), or
    else skips the maps of processes whose fingerprint did not change, and keeps which mapped
    files have one link (:attr:`MapsCache.sole`: a link made in the tree later gives an event
    there, whose patch finds the new link and walks; a walk makes the cache forget them).
    """
    prefix = real_root.rstrip(b"/") + b"/"
    paths: set[bytes] = set()
    inodes: set[int] = set()
    if not platform.linux():
        return paths, inodes
    try:
        pids = [p for p in os.listdir(b"/proc") if p.isdigit()]
    except OSError:
        return paths, inodes
    if cache is not None:
        looked = cache.look(pids)
    else:
        looked = [_numbers(_shared_writable(_read(b"/proc/" + pid + b"/maps"))) for pid in pids]
    sole = cache.sole if cache is not None else set()
    if len(sole) > 4096:  # (short-lived files mapped elsewhere on the device)
        sole.clear()
    for found in looked:
        for mapping in found:
            major, minor, number, path = mapping
            deleted = path.endswith(b" (deleted)")
            if path.startswith(prefix) and not deleted:
                paths.add(path[len(prefix) :])
            if dev is not None and number not in inodes and mapping not in sole and os.makedev(major, minor) == dev:
                if deleted or not _sole_link(path, dev, number):
                    inodes.add(number)  # (its other links in the tree write to it too)
                else:
                    sole.add(mapping)
    return paths, inodes


def sees_mappings() -> bool:
    """Whether :func:`mapped_for_write` can see other processes' mappings here (Linux)."""
    return platform.linux()


def guarantee() -> str:
    """What a checkpoint does about files written through shared mappings, in words (``serve --status``)."""
    if sees_mappings():
        return "files mapped shared and writable (found in /proc) are read at every checkpoint"
    return ("weaker: no process's mappings can be seen here, so a file written through a shared "
            "mapping is checkpointed when its mtime or size changes, as a walk sees it")


def own_ranges(path: str) -> list[tuple[int, int]]:
    """Address ranges where this process maps ``path`` (empty where the system does not say)."""
    if not platform.linux():
        return []
    target = os.fsencode(path)
    out = []
    for line in _read(b"/proc/self/maps").splitlines():
        if line.endswith(target):
            start, _, end = line.split(b" ", 1)[0].partition(b"-")
            out.append((int(start, 16), int(end, 16)))
    return out


def _numbers(found: tuple[tuple[bytes, bytes, bytes, bytes], ...]) -> Mappings:
    """Maps-text fields as the kernel's queries give them: numbers, and the name."""
    return tuple((int(major, 16), int(minor, 16), int(ino), name) for major, minor, ino, name in found)


def _shared_writable(data: bytes) -> tuple[tuple[bytes, bytes, bytes, bytes], ...]:
    if b"w-s " not in data and b"wxs " not in data:
        return ()  # (most processes map nothing shared and writable)
    # Only the lines holding a shared writable permission field go through the expression: a
    # busy process (a browser, a test runner) maps thousands of lines, and a scan of all of them
    # with the expression was most of a watched checkpoint's time on a machine of such processes.
    found = []
    for needle in (b"w-s ", b"wxs "):
        at = data.find(needle)
        while at != -1:
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            end = len(data) if end == -1 else end
            m = _SHARED_WRITABLE.match(data, start, end)
            if m is not None:
                found.append((start, (m[1], m[2], m[3], m[4])))
            at = data.find(needle, end)
    return tuple(mapping for _, mapping in sorted(found))


def _fingerprint(pid: bytes, held: StatFiles | None = None) -> bytes | None:
    """A process's minor and major page faults, start time and mapped size (``/proc/PID/stat``
    fields 10, 12, 22 and 23), or None; read through ``held`` when given."""
    data = held.read(pid) if held is not None else _read(b"/proc/" + pid + b"/stat", 1024)
    end = data.rfind(b")")  # (the command name, field 2, may hold spaces and parentheses)
    fields = data[end + 2 :].split()
    if end <= 0 or len(fields) <= 21:
        return None
    return b" ".join((fields[7], fields[9], fields[19], fields[20]))


def _sole_link(path: bytes, dev: int, ino: int) -> bool:
    """Whether ``path`` is the file's one and only link: then no other name of it can be in
    the tree, and nobody need search the tree for its inode (a desktop maps dozens of
    databases shared and writable, each a search of every file otherwise).  A link made in
    the tree later gives an event there, and a file that gains a link means a full walk."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return st.st_ino == ino and st.st_dev == dev and st.st_nlink == 1


def _read(path: bytes, limit: int = 0) -> bytes:
    """A /proc file (empty when the process is gone or not ours to read); ``limit`` bytes at
    most when given."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    chunks = []
    try:
        if limit:
            return os.read(fd, limit)
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    except OSError:
        pass
    finally:
        os.close(fd)
    return b"".join(chunks)
