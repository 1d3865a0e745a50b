"""Watching a tree: which paths may have changed since the last look.

The events come from the platform's event source (:mod:`snapstore.platform.events`: inotify on
Linux, a polling source elsewhere); this module turns them into :class:`Changes`.

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
  A service does that walk while it is idle (ops.snapshot.idle_check): a checkpoint then walks
  for it only when no idle check has passed for :data:`IDLE_CHECK_GRACE` intervals.

A directory that appears is watched first and listed after (the caller lists it as a dirty
subtree), so nothing created between the two steps is missed.
"""

from __future__ import annotations

import errno
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from array import array
    from concurrent.futures import Future, ThreadPoolExecutor

from snapstore.platform import events, maps
from snapstore.platform.maps import MapsCache, mapped_for_write

__all__ = ["Changes", "MapsCache", "Watcher", "mapped_for_write", "watchable"]

#: With idle checks, a checkpoint walks for the consistency check only after this many
#: intervals without one that passed (a service that is never idle still checks).
IDLE_CHECK_GRACE = 4


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


class Watcher:
    """Recursive watches on a tree (through the platform's event source), turned into :class:`Changes`."""

    def __init__(
        self,
        root: str,
        excluded: frozenset[bytes] = frozenset(),
        *,
        consistency_interval: float = 300.0,
    ):
        self.root = os.fsencode(os.path.abspath(root))
        self.excluded = excluded
        self.consistency_interval = consistency_interval
        self._source = events.make_source()
        #: The masks :meth:`poll` tests, as plain ints.
        self._bits = events.BITS
        self._wd: dict[int, bytes] = {}
        self._pending = Changes(full=True, reason="start")
        self._last_full = 0.0
        #: Set by a service that runs the consistency check when idle (ops.snapshot.idle_check).
        self.checks_when_idle = False
        #: While an idle check walks: every change taken since it began (:meth:`mark`).
        self._since: Changes | None = None
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
        #: ``(listings, warnings, special, unreadable)``: what a walk of those listings reports
        #: (ops.snapshot.incremental keeps it: a patch that lists nothing again reports the same).
        self.report_memo: tuple[Any, tuple[str, ...], int, int] | None = None
        self.last_error: str | None = None
        #: Mapping scans made or begun (a test's count), the one begun for the checkpoint
        #: being taken (:meth:`begin_scan`) and the thread it runs in.
        self.mapping_scans = 0
        self._scan: Future[tuple[set[bytes], set[int]]] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
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
        self.drop_scan()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self._source.close()
        self._maps.close()

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
                wd = self._source.add_watch(path)
            except OSError as exc:
                if exc.errno in _GONE:
                    self.blind.discard(current)  # vanished or replaced: its parent's events say so
                else:  # ENOSPC (max_user_watches), EACCES, ...: walked at every snapshot
                    self.watch_failures += 1
                    why = self._source.why(exc)
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
        overflow, ignored, isdir, selfgone, names, made = self._bits
        wds, pending = self._wd, self._pending
        paths, dirs = pending.paths, pending.dirs
        for wd, mask, name in self._source.read():
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
        every = self.consistency_interval * (IDLE_CHECK_GRACE if self.checks_when_idle else 1)
        if not changes.full and time.monotonic() - self._last_full > every:
            changes.full, changes.reason = True, "periodic consistency check"
        if changes.full:
            self.full_rescans += 1
            self._last_full = time.monotonic()
            if changes.reason != "start":  # (watched just now)
                self.rewatch()
        self._pending = Changes(full=False)
        if self._since is not None:
            _merge(self._since, changes)
        return changes

    def consistency_due(self) -> bool:
        """Whether the periodic consistency check is due."""
        return time.monotonic() - self._last_full > self.consistency_interval

    def mark(self) -> None:
        """Start collecting every change from now on (an idle check's walk begins)."""
        self._since = Changes(full=False)

    def since_mark(self) -> Changes:
        """Every change since :meth:`mark` (taken by snapshots, or pending), and stop collecting."""
        self.poll()
        out, self._since = self._since or Changes(full=False), None
        _merge(out, self._pending)
        out.blind |= self.blind
        return out

    def checked(self) -> None:
        """An idle consistency check passed: the next one is due an interval from now."""
        self._last_full = time.monotonic()

    def rewatch(self) -> None:
        """Watch the whole tree again, before a full walk: after an overflow the events of the
        directories made meanwhile are lost, so nothing would ever watch them (nor call them
        blind); the watches of directories gone or moved out are removed."""
        old, self._wd = self._wd, {}
        self.blind.clear()
        self.watch_tree()
        for wd in old.keys() - self._wd.keys():
            try:
                self._source.rm_watch(wd)
            except OSError:
                pass  # already gone with its directory

    def give_back(self, changes: Changes) -> None:
        """Make ``changes`` (from :meth:`take`) pending again, with any that came since: for a
        caller that took them and could not use them (the next snapshot will)."""
        _merge(self._pending, changes)

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
            "events_from": self._source.kind,
            "sees_mappings": maps.sees_mappings(),
            "mapped_files": maps.guarantee(),
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

    def forget_inodes(self) -> None:
        """After a walk of the tree: forget what was learnt of inode numbers (a path may have
        any inode now) and which mapped files had one link."""
        self.inode_memo.clear()
        self.inode_index = None
        self._maps.forget_links()

    def mapped_for_write(self) -> tuple[set[bytes], set[int]]:
        """The tree's files that some process maps shared and writable now
        (:func:`snapstore.platform.maps.mapped_for_write`), or what the scan :meth:`begin_scan`
        started finds (waited for, and taken once)."""
        scan, self._scan = self._scan, None
        if scan is not None and self._pool_pid == os.getpid():  # (else begun before a fork)
            return scan.result()
        self.mapping_scans += 1
        return mapped_for_write(self._real_root, self._dev, self._maps)

    def begin_scan(self) -> None:
        """Start the mapping scan of the checkpoint about to be taken in a thread of its own
        (the service begins it when it acknowledges a checkpointing request: it runs while the
        client confirms, then beside the checkpoint's patch and reads; a library checkpoint
        scans inline); :meth:`mapped_for_write` waits for it and takes it.

        The scan is as good as one made when the checkpoint starts: it begins after the request
        to checkpoint (after anything its caller wants checkpointed), and a mapping made after
        it is found by the next checkpoint's scan, as one made after a scan made inline is.
        Whoever begins one takes it or drops it (:meth:`drop_scan`) before its request ends:
        a scan never outlives the checkpoint it was begun for.  A scan already begun is kept."""
        if self._scan is not None:
            return
        if self._pool is None or self._pool_pid != os.getpid():
            # (a forked child has the pool but not its thread: it would wait forever)
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="snapstore-mapping-scan")
            self._pool_pid = os.getpid()
        self.mapping_scans += 1
        self._scan = self._pool.submit(mapped_for_write, self._real_root, self._dev, self._maps)

    def scan_begun(self) -> bool:
        """Whether a scan :meth:`begin_scan` started is still to be taken."""
        return self._scan is not None

    def drop_scan(self) -> None:
        """Forget a scan :meth:`begin_scan` started that no checkpoint took (once it has
        ended: the maps cache is its thread's until then)."""
        scan, self._scan = self._scan, None
        if scan is not None and self._pool_pid == os.getpid():
            try:
                scan.result()
            except Exception:  # (its error belongs to no checkpoint now)
                pass


#: add_watch errors that mean the directory is gone or is no longer one (not blindness).
_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def _show(rel: bytes) -> str:
    return rel.decode("utf-8", "replace") or "."


def watchable(root: str) -> str | None:
    """None when ``root`` can be watched reliably, else why not (for ``serve --status``)."""
    return events.watchable(root)


def _merge(into: Changes, changes: Changes) -> None:
    if changes.full and not into.full:
        into.full, into.reason = True, changes.reason
    into.dirs |= changes.dirs
    into.subtrees |= changes.subtrees
    into.paths |= changes.paths
    into.blind |= changes.blind
