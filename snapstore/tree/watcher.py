"""Watching a tree with inotify: which paths may have changed since the last look.

Events are hints, never the truth: they only narrow which directories are listed again and
which paths are re-examined; the stat cache (with its racy-file rule) still decides whether a
file's content is read.  A watcher never vouches for what it cannot see:

* at start, before the first complete walk, and after the kernel's event queue overflowed
  (``IN_Q_OVERFLOW``), :meth:`Watcher.take` says ``full=True`` and the caller walks the tree;
* a directory whose watch could not be added (``max_user_watches`` reached, or any other
  refusal) is *blind*, and so is everything below it: :meth:`Watcher.take` retries its watch
  and names it in ``Changes.blind`` every time, and the caller walks it completely, until a
  watch is added;
* a write through another hard link names that link (or nothing, outside the tree), and a
  write through a shared memory mapping gives no event until the mapping goes
  (``IN_CLOSE_WRITE`` at ``munmap``): the caller re-stats files with more than one link and
  the files :func:`mapped_for_write` finds mapped (ops.snapshot.incremental);
* on file systems whose events are unreliable (network and FUSE file systems, found with
  ``statfs``) the watcher is not used at all, nor when no inotify instance can be made
  (``max_user_instances``): then every snapshot walks;
* periodically (``consistency_interval``), a full walk checks it; divergences are counted.

A directory that appears is watched first and listed after (the caller lists it as a dirty
subtree), so nothing created between the two steps is missed.

inotify_simple is used (a ~100-line ctypes wrapper, maintained, no threads of its own): it
reports events as soon as ``write()`` returns and reports queue overflow, which watchfiles did
not (found when the service was designed).
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
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from array import array

from snapstore.tree.mapped import MapsCache, mapped_for_write

__all__ = ["Changes", "MapsCache", "Watcher", "filesystem_type", "mapped_for_write", "watchable"]

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


@dataclass
class Changes:
    """What may have changed since the last :meth:`Watcher.take`."""

    full: bool
    #: Directories whose listing may differ (an entry created, deleted or renamed in them).
    dirs: set[bytes] = field(default_factory=set)
    #: Directories that appeared: walk them completely.
    subtrees: set[bytes] = field(default_factory=set)
    #: Paths whose content, metadata or type may differ.
    paths: set[bytes] = field(default_factory=set)
    reason: str = ""
    #: Directories with no watch on them or below them: walk them completely.
    blind: set[bytes] = field(default_factory=set)


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


class Watcher:
    """Recursive inotify watches on a tree, turned into :class:`Changes`."""

    def __init__(
        self,
        root: str,
        excluded: frozenset[bytes] = frozenset(),
        *,
        consistency_interval: float = 300.0,
    ):
        from inotify_simple import INotify, flags

        self.root = os.fsencode(os.path.abspath(root))
        self.excluded = excluded
        self.consistency_interval = consistency_interval
        self._mask = (
            flags.CREATE | flags.DELETE | flags.MODIFY | flags.ATTRIB | flags.CLOSE_WRITE
            | flags.MOVED_FROM | flags.MOVED_TO | flags.DELETE_SELF | flags.MOVE_SELF
            | flags.DONT_FOLLOW | flags.ONLYDIR | flags.EXCL_UNLINK
        )
        self._inotify: Any = INotify()
        #: The masks :meth:`poll` tests, as plain ints (an IntEnum's ``&`` is much slower).
        self._bits = (
            int(flags.Q_OVERFLOW), int(flags.IGNORED), int(flags.ISDIR),
            int(flags.DELETE_SELF | flags.MOVE_SELF),
            int(flags.CREATE | flags.DELETE | flags.MOVED_FROM | flags.MOVED_TO),
            int(flags.CREATE | flags.MOVED_TO),
        )  # fmt: skip
        self._wd: dict[int, bytes] = {}
        self._pending = Changes(full=True, reason="start")
        self._last_full = 0.0
        #: Directories whose watch could not be added (nothing below them is watched either):
        #: retried and walked at every :meth:`take` until a watch is added.
        self.blind: set[bytes] = set()
        #: Counters for ``serve --status``.
        self.events = 0
        self.overflows = 0
        self.watch_failures = 0
        self.full_rescans = 0
        #: Paths a periodic consistency check found changed without any event (counted by
        #: ops.snapshot.incremental, which compares the walk with what the events led it to believe).
        self.divergences = 0
        self.last_divergence: str | None = None
        #: What the watching Store did with the changes (counted by ops.snapshot): snapshots
        #: that walked the whole tree (for any reason: the ones above, a changed ignore file, a
        #: doubt), snapshots patched from the events, read-only looks (``diff``) answered from
        #: the patched state.
        self.walks = 0
        self.patched = 0
        self.looks = 0
        #: Re-stat'ed without an event (counted by ops.snapshot.incremental): files with more
        #: than one hard link, files mapped shared and writable.
        self.links_restatted = 0
        self.mapped_restatted = 0
        #: inode -> the tree's paths with it (() for none), for files mapped by another name
        #: (ops.snapshot.incremental keeps it).
        self.inode_memo: dict[int, tuple[bytes, ...]] = {}
        #: The inodes of the tree's files, sorted (8 bytes a file, built when an inode is
        #: first asked about), and those of files found since it was built: an inode in
        #: neither is not the tree's, and no record is scanned for it.
        self.inode_index: array[int] | None = None
        self.inode_recent: set[int] = set()
        #: The files found mapped at the last snapshot (read once more by the next one).
        self.last_mapped: set[bytes] = set()
        self.last_error: str | None = None
        self._real_root = os.fsencode(os.path.realpath(root))
        self._maps = MapsCache()
        try:
            self._dev: int | None = os.stat(self._real_root).st_dev
        except OSError:
            self._dev = None

    @property
    def watched_dirs(self) -> int:
        return len(self._wd)

    def close(self) -> None:
        self._inotify.close()

    def fileno(self) -> int:
        return int(self._inotify.fileno())

    # -- watches --------------------------------------------------------------------------

    def _skip(self, rel: bytes) -> bool:
        # What every walk leaves out by name (.git, nested stores): no watch to spend on it.
        name = rel.rsplit(b"/", 1)[-1]
        return name in (b".git", b".snapstore") or rel in self.excluded

    def watch_tree(self, rel: bytes = b"") -> None:
        """Watch ``rel`` and every directory below it (watch first, then list).

        A directory whose watch cannot be added becomes blind (:attr:`blind`), with everything
        below it (nothing below is tried); one that is watched now is no longer blind.
        """
        stack = [rel]
        while stack:
            current = stack.pop()
            if current and self._skip(current):
                continue
            path = self.root + b"/" + current if current else self.root
            try:
                wd = self._inotify.add_watch(path, self._mask)
            except OSError as exc:
                if exc.errno in _GONE:
                    self.blind.discard(current)  # vanished or replaced: its parent's events say so
                else:  # ENOSPC (max_user_watches), EACCES, ...: walked at every snapshot
                    self.watch_failures += 1
                    why = os.strerror(exc.errno or 0)
                    if exc.errno == errno.ENOSPC:
                        why = "fs.inotify.max_user_watches reached"
                    self.last_error = f"cannot watch {_show(current)}: {why}"
                    self.blind.add(current)
                continue
            self.blind.discard(current)
            self._wd[wd] = current
            try:
                with os.scandir(path) as it:
                    for entry in it:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(current + b"/" + os.fsencode(entry.name) if current else os.fsencode(entry.name))
            except OSError:
                continue

    # -- events ---------------------------------------------------------------------------

    def poll(self) -> None:
        """Read every queued event (non-blocking) into the pending changes."""
        # Parsed here rather than by inotify_simple.read, which makes a namedtuple and a str
        # name of each event (and this loop a bytes name again): a restore or an agent's
        # rewrite of 100 files queues hundreds of events, each cheaper parsed here.
        data = self._read_queue()
        overflow, ignored, isdir, selfgone, names, made = self._bits
        wds, pending, unpack, size = self._wd, self._pending, _EVENT.unpack_from, _EVENT.size
        paths, dirs = pending.paths, pending.dirs
        pos, end = 0, len(data)
        while pos < end:
            wd, mask, _cookie, length = unpack(data, pos)
            pos += size
            name = data[pos : pos + length].split(b"\0", 1)[0] if length else b""
            pos += length
            self.events += 1
            if mask & overflow:
                self.overflows += 1
                pending.full = True
                pending.reason = "event queue overflow"
                continue
            base = wds.get(wd)
            if base is None:
                continue
            if mask & ignored:
                wds.pop(wd, None)
                continue
            if not name:  # an event on the watched directory itself
                paths.add(base)
                if mask & selfgone:
                    dirs.add(base.rsplit(b"/", 1)[0] if b"/" in base else b"")
                continue
            rel = base + b"/" + name if base else name
            paths.add(rel)
            if mask & names:
                dirs.add(base)
                if mask & isdir and mask & made:
                    self.watch_tree(rel)
                    pending.subtrees.add(rel)

    def _read_queue(self) -> bytes:
        """What the kernel has queued for this instance (b"" when nothing: never blocks)."""
        fd = self.fileno()
        queued = int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, bytes(4)), sys.byteorder)
        return os.read(fd, queued) if queued else b""

    def take(self) -> Changes:
        """The changes since the last call (after reading the queue), then start afresh.

        Blind directories are retried first (a watch added now sees what comes next) and named
        in ``blind`` all the same: what changed in them before has no event.
        """
        self.poll()
        changes = self._pending
        changes.blind |= self.blind
        for rel in sorted(self.blind):
            if rel in self.blind:  # (not made watchable by retrying a directory above it)
                self.watch_tree(rel)
        if not changes.full and time.monotonic() - self._last_full > self.consistency_interval:
            changes.full, changes.reason = True, "periodic consistency check"
        if changes.full:
            self.full_rescans += 1
            self._last_full = time.monotonic()
            if changes.reason != "start":  # (watched just now)
                self.rewatch()
        self._pending = Changes(full=False)
        return changes

    def rewatch(self) -> None:
        """Watch the whole tree again, before a full walk: after an overflow the events of the
        directories made meanwhile are lost, so nothing would ever watch them (nor call them
        blind); the watches of directories gone or moved out are removed."""
        old, self._wd = self._wd, {}
        self.blind.clear()
        self.watch_tree()
        for wd in old.keys() - self._wd.keys():
            try:
                self._inotify.rm_watch(wd)
            except OSError:
                pass  # already gone with its directory

    def give_back(self, changes: Changes) -> None:
        """Make ``changes`` (from :meth:`take`) pending again, with any that came since: for a
        caller that took them and could not use them (the next snapshot will)."""
        p = self._pending
        if changes.full and not p.full:
            p.full, p.reason = True, changes.reason
        p.dirs |= changes.dirs
        p.subtrees |= changes.subtrees
        p.paths |= changes.paths
        p.blind |= changes.blind

    def peek(self) -> Changes:
        """The changes since the last :meth:`take` (after reading the queue), left pending: a
        read-only look (``diff`` against the tree) must not hide them from the next snapshot
        (nor add watches: blind directories stay blind until the next :meth:`take`)."""
        self.poll()
        p = self._pending
        return Changes(p.full, set(p.dirs), set(p.subtrees), set(p.paths), p.reason, p.blind | self.blind)

    def mode(self) -> str:
        """What a snapshot through this watcher does, in words (``serve --status``)."""
        if not self.blind:
            return f"watching {self.watched_dirs} directories: snapshots re-examine what events name"
        return (
            f"watching {self.watched_dirs} directories; {len(self.blind)} could not be watched "
            f"({self.last_error}): walking those {len(self.blind)} unwatched directories (with "
            "everything below them) at every checkpoint, and retrying their watches"
        )

    def status(self) -> dict[str, Any]:
        return {
            "watching": True,
            "mode": self.mode(),
            "watched_dirs": self.watched_dirs,
            "blind_dirs": len(self.blind),
            "blind": sorted(_show(b) for b in self.blind)[:10],
            "events": self.events,
            "overflows": self.overflows,
            "watch_failures": self.watch_failures,
            "full_rescans": self.full_rescans,
            "divergences": self.divergences,
            "last_divergence": self.last_divergence,
            "walks": self.walks,
            "patched": self.patched,
            "looks": self.looks,
            "links_restatted": self.links_restatted,
            "mapped_restatted": self.mapped_restatted,
            "last_error": self.last_error,
        }

    def mapped_for_write(self) -> tuple[set[bytes], set[int]]:
        """The tree's files that some process maps shared and writable now
        (:func:`snapstore.tree.mapped.mapped_for_write`; each process's maps read again only
        when its mapped size changed)."""
        return mapped_for_write(self._real_root, self._dev, self._maps)


#: add_watch errors that mean the directory is gone or is no longer one (not blindness).
_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def _show(rel: bytes) -> str:
    return rel.decode("utf-8", "replace") or "."


def watchable(root: str) -> str | None:
    """None when ``root`` can be watched reliably, else why not (for ``serve --status``)."""
    try:
        import inotify_simple  # noqa: F401
    except ImportError:
        return "inotify_simple is not installed"
    fs = filesystem_type(root)
    if fs is not None and fs in UNRELIABLE_FS:
        return f"{UNRELIABLE_FS[fs]} gives no reliable change events"
    return None
