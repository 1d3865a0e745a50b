"""A portable event source: each read re-stats every watched directory and its entries.

The events a read makes are those of what differs from the last read (a name that came or went,
an entry whose type or inode changed, a file whose size, times or mode changed), in the
vocabulary of :mod:`snapstore.platform.events`, so the watcher treats them as it treats
inotify's.  What it cannot see by comparing (a write in the same timestamp tick as the last
look, of the same size) it reports anyway: an entry whose mtime or ctime is within a tick of
the last read (:func:`_tick`) is named again at the next one, until it is older (git's
"racily clean" rule).  So a checkpoint through this source finds what a full walk finds, on
any POSIX system and file system, for about a walk's cost (docs/platforms.md has the numbers).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import time

from snapstore.platform.eventbits import CREATED, DELETED, DELETED_SELF, IGNORED, IS_DIR, MODIFIED

#: Timestamps this close to the last read may hide a later change in the same tick: on a file
#: system that keeps whole seconds (HFS+: 1 s; FAT: 2 s), and on one that keeps nanoseconds
#: (ext4, APFS, tmpfs), whose clock still moves in ticks of a few milliseconds.
COARSE_NS = 2_000_000_000
FINE_NS = 50_000_000


def _tick(mtime_ns: int) -> int:
    """The timestamp granularity to allow for: a time in whole seconds says the file system
    keeps no more (or, once in a billion, that this time fell on one: a harmless look)."""
    return COARSE_NS if mtime_ns % 1_000_000_000 == 0 else FINE_NS

#: What is compared of an entry: its type and inode (a directory: only those: its own watch
#: reports the rest), size, mtime, ctime (a file); packed, since one is kept for every entry of
#: the tree between reads (36 bytes instead of a 5-field tuple and its ints, ~200 bytes more).
Sig = bytes
_SIG = struct.Struct("<IQQqq")
_sig_fields = _SIG.unpack
#: The bytes of a Sig that say what the entry is (its mode and inode).
_WHAT = 12


def _sig(st: os.stat_result) -> Sig:
    if stat.S_ISDIR(st.st_mode):
        return _SIG.pack(st.st_mode & 0o170000, st.st_ino, 0, 0, 0)
    return _SIG.pack(st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _isdir(sig: Sig) -> int:
    return IS_DIR if stat.S_ISDIR(_sig_fields(sig)[0]) else 0


class _Watched:
    __slots__ = ("entries", "ino", "path", "own", "mtime")

    def __init__(self, path: bytes, st: os.stat_result, entries: dict[bytes, Sig]):
        self.path, self.ino, self.entries = path, st.st_ino, entries
        self.own = (st.st_mode, st.st_uid, st.st_gid)
        self.mtime = st.st_mtime_ns


def _listing(path: bytes) -> dict[bytes, Sig]:
    """Each entry of directory ``path`` with its :func:`_sig` (an entry gone meanwhile is left out)."""
    out: dict[bytes, Sig] = {}
    with os.scandir(path) as it:
        for entry in it:
            try:
                out[entry.name] = _sig(entry.stat(follow_symlinks=False))
            except OSError:
                continue  # (gone since it was listed: the next read sees it so)
    return out


class PollingSource:
    """Watches by comparing: see the module's docstring."""

    kind = "polling"

    def __init__(self) -> None:
        self._wd_of: dict[bytes, int] = {}
        self._dirs: dict[int, _Watched] = {}
        self._next = 1
        #: Events made outside a read (a watch replaced by another of the same path).
        self._queued: list[tuple[int, int, bytes]] = []
        self._last_read = time.time_ns()

    def add_watch(self, path: bytes) -> int:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        wd = self._wd_of.get(path)
        if wd is not None:
            if self._dirs[wd].ino == st.st_ino:
                return wd  # (watched already: its last look stands)
            self._forget(wd)
            self._queued.append((wd, IGNORED, b""))
        entries = _listing(path)  # (EACCES and the like: the caller calls it blind)
        wd, self._next = self._next, self._next + 1
        self._wd_of[path], self._dirs[wd] = wd, _Watched(path, st, entries)
        return wd

    def _forget(self, wd: int) -> None:
        d = self._dirs.pop(wd)
        if self._wd_of.get(d.path) == wd:
            del self._wd_of[d.path]

    def rm_watch(self, wd: int) -> None:
        if wd not in self._dirs:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        self._forget(wd)

    def read(self) -> list[tuple[int, int, bytes]]:
        events, self._queued = self._queued, []
        racy = self._last_read
        self._last_read = time.time_ns()  # (before any look: what changes after it is racy next time)
        for wd, d in list(self._dirs.items()):
            self._compare(wd, d, racy, events)
        return events

    def _compare(self, wd: int, d: _Watched, racy: int, events: list[tuple[int, int, bytes]]) -> None:
        try:
            st = os.lstat(d.path)
        except OSError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode) or st.st_ino != d.ino:
            events += ((wd, DELETED_SELF, b""), (wd, IGNORED, b""))  # gone or replaced
            self._forget(wd)
            return
        try:
            now = _listing(d.path)
        except OSError:  # (no longer listable: a walk cannot list it either)
            now = d.entries
        own = (st.st_mode, st.st_uid, st.st_gid)
        if own != d.own:
            events.append((wd, MODIFIED, b""))
            d.own = own
        first = len(events)
        before = d.entries
        for name, sig in now.items():
            old = before.get(name)
            mode, _, _, mtime, ctime = _sig_fields(sig)
            isdir = IS_DIR if stat.S_ISDIR(mode) else 0
            if old is None:
                events.append((wd, CREATED | isdir, name))
            elif old[:_WHAT] != sig[:_WHAT]:  # another type or inode: another entry by the same name
                events += ((wd, DELETED | _isdir(old), name), (wd, CREATED | isdir, name))
            elif old != sig or (not isdir and max(mtime, ctime) >= racy - _tick(mtime)):
                events.append((wd, MODIFIED | isdir, name))
        for name, old in before.items():
            if name not in now:
                events.append((wd, DELETED | _isdir(old), name))
        d.entries = now
        if st.st_mtime_ns != d.mtime and len(events) == first:
            # Names made and removed between two reads: no entry differs, but the directory's
            # mtime moved (a walk records an empty directory's).
            events.append((wd, MODIFIED, b""))
        d.mtime = st.st_mtime_ns

    def why(self, exc: OSError) -> str:
        return os.strerror(exc.errno or 0)

    def close(self) -> None:
        self._dirs.clear()
        self._wd_of.clear()
