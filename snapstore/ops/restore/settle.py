"""A restore's tree syncs left for later (durability ``normal``), the journal kept until then.

Whatever the setting, the safety checkpoint and the journal are durable before the first file
of the tree is touched: the user's bytes are in the store, nothing can be lost.  Under
``normal``, in a watching (long-lived) context (:func:`mode` ``"later"``), the restore then makes no ``syncfs``: its temp files,
renames and unlinks sit in the page cache, and the transaction that logs the operation marks
the journal *applied* (one directory per file system written to, and the inode and mtime of
each file it renamed into place) instead of clearing it.  The journal already carries the boot
id (:func:`snapstore.platform.sync.boot_id`).  Later, one ``syncfs`` per file system, then the
journal is cleared (:func:`clear_when_synced`), by whichever comes first:

* this process's tree flusher, :data:`DELAY` seconds after the restore (a long-lived Store, the
  service);
* the next restore, undo or revert (it needs the journal's key), in any process;
* the next writer of another process (a CLI without a service), or an explicit ``recover``.

A process crash loses nothing the kernel accepted, so an applied journal found under the same
boot id needs only that sync.  Under another boot id (a power failure or a kernel crash came
first) the files may be empty, torn or missing: :mod:`.powerfail` checks each path of the
plan by content and writes again, from the store, the ones that are not as the target has them
and were the restore's own (or are as before the restore, or absent).  ``full`` syncs inline
(:func:`mode` ``"now"``); ``off`` syncs nothing and clears the journal at once (``"never"``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from snapstore.errors import ConflictError, LockedError
from snapstore.ops.context import StageContext
from snapstore.ops.restore import batch, journal
from snapstore.ops.restore.apply import DirTree
from snapstore.ops.restore.journal import Journal, tables
from snapstore.ops.restore.plan import Step
from snapstore.platform import sync
from snapstore.storage.backend import JOURNAL_KEY
from snapstore.storage.lmdb_durability import FLUSH_DELAY, Flusher

#: How long (seconds) an applied restore's tree may wait for its ``syncfs``.
DELAY = FLUSH_DELAY
#: How many times the tree flusher tries again when the writer lock is busy (then the next
#: writer settles the journal).
RETRIES = 20

#: Test seam: called with ``"applied"`` once a restore's journal is marked applied and with
#: ``"synced"`` between a settle's ``syncfs`` and its clearing (crash tests kill there).
step_hook: Callable[[str], None] | None = None

_flusher = Flusher(DELAY)
_pending: dict[str, UnsyncedRestore] = {}
_pending_lock = threading.Lock()


def mode(ctx: StageContext) -> str:
    """When a restore through ``ctx`` syncs the tree: ``"now"`` (two ``syncfs``, inline),
    ``"later"`` (this module) or ``"never"`` (durability ``off``).

    ``"later"`` only in a watching context (the service, a library loop with ``watch=True``):
    a process that lives on, so its tree flusher makes the sync soon.  A short-lived process
    (a CLI without a service) would leave it to the next writer, which would have to sync
    before its own restore frees the files it replaces: on a file system mounted with
    ``discard`` freeing a file already written costs a discard each (docs/benchmarks-design.md,
    Restore), where the inline order frees them before its first sync.
    """
    durability = getattr(ctx.backend, "durability", "full")
    if ctx.store_dir is None or not batch.deferrable():
        return "now"
    if durability == "off":
        return "never"
    if durability == "normal" and ctx.watcher is not None and sync.boot_id() is not None:
        return "later"
    return "now"


def applied_value(op: dict[str, object], steps: list[Step], dirs: list[bytes],
                  identity: dict[bytes, tuple[int, int]]) -> bytes:
    """The journal value of ``op`` marked applied: ``dirs`` to sync, the files' identities."""
    index = {s.path: i for i, s in enumerate(steps)}
    ids = [[index[p], ino, mtime] for p, (ino, mtime) in identity.items() if p in index]
    return journal.record({**op, "applied": {"dirs": dirs, "ids": ids}}, steps)


class UnsyncedRestore:
    """An applied restore of this process whose tree waits for its ``syncfs``."""

    def __init__(self, store_dir: str, fds: list[int], stamp: bytes) -> None:
        self.store_dir = store_dir
        self.fds = fds
        #: The journal value marked applied: cleared only while the journal is still it.
        self.stamp = stamp
        self.mutex = threading.Lock()
        self.synced = False
        self.tries = 0

    def sync_tree(self) -> bool:
        """The ``syncfs`` (once); whether the tree is synced.  The fds are closed either way."""
        with self.mutex:
            if not self.synced and self.fds:
                try:
                    batch.sync_dirs_now(self.fds)
                    self.synced = True
                except OSError:
                    pass  # the journal stays: the next writer syncs from its directories
                finally:
                    for fd in self.fds:
                        os.close(fd)
                    self.fds = []
            return self.synced

    def flush(self) -> None:
        """The tree flusher's turn: sync, then clear the journal as a writer would.  Whatever
        fails leaves the journal to the next writer (the flusher ignores the error)."""
        again = False
        try:
            if self.sync_tree():
                _hook("synced")
                _clear_as_writer(self.store_dir, self.stamp)
        except LockedError:
            self.tries += 1
            again = self.tries < RETRIES  # (a writer holds the lock; it may settle it first)
        finally:
            if again:
                _flusher.later(self)
            else:
                _forget(self)


def later(ctx: StageContext, fds: list[int], stamp: bytes) -> None:
    """Have this process sync ``fds`` (it closes them) and clear the applied journal ``stamp``
    soon."""
    assert ctx.store_dir is not None
    _hook("applied")
    p = UnsyncedRestore(os.path.realpath(ctx.store_dir), fds, stamp)
    with _pending_lock:
        old = _pending.pop(p.store_dir, None)
        _pending[p.store_dir] = p
    if old is not None:
        old.sync_tree()
    _flusher.later(p)


def own(ctx: StageContext, value: bytes) -> bool:
    """Whether this process's tree flusher will settle the applied journal ``value``."""
    if ctx.store_dir is None:
        return False
    with _pending_lock:
        p = _pending.get(os.path.realpath(ctx.store_dir))
    return p is not None and p.stamp == value


def now(ctx: StageContext) -> None:
    """Settle an applied journal of this boot now, if the store holds one (the caller holds
    the writer lock): its ``syncfs``, then its clearing."""
    with tables(ctx.backend).read() as view:
        value = view.get("journal", JOURNAL_KEY)
    if value is None:
        return
    j = journal.parse(value)
    if j.applied is not None and j.boot == sync.boot_id():
        clear_when_synced(ctx, j, value)


def clear_when_synced(ctx: StageContext, j: Journal, value: bytes) -> None:
    """Sync the tree of applied journal ``j`` (whose stored value is ``value``), then clear it."""
    p = None
    if ctx.store_dir is not None:
        with _pending_lock:
            p = _pending.get(os.path.realpath(ctx.store_dir))
            if p is not None and p.stamp == value:
                del _pending[p.store_dir]
            else:
                p = None
    if p is not None:
        _flusher.forget(p)
    if p is None or not p.sync_tree():
        sync_dirs_of(ctx.root_bytes, j)
    _hook("synced")
    journal.clear_if(ctx.backend, value)


def sync_dirs_of(root: bytes, j: Journal) -> None:
    """``syncfs`` the file systems applied journal ``j`` wrote to (the tree's root's, at least).
    Each directory is opened below the root without following links; one that is gone is
    skipped."""
    tree = DirTree(root)
    try:
        fds = [tree.root_fd]
        for rel in (j.applied or {}).get("dirs", []):
            try:
                fd = tree.dir_fd(rel, create=False)
            except (ConflictError, OSError):  # no longer a directory: nothing of ours to sync
                fd = None
            if fd is not None:
                fds.append(fd)
        batch.sync_dirs_now(fds)
    finally:
        tree.touched.clear()
        tree.sync_and_close()


def _hook(what: str) -> None:
    if step_hook is not None:
        step_hook(what)


def sync_pending() -> None:
    """Settle now, in this thread, every restore of this process still waiting for its
    ``syncfs``: the flusher's turn (the sync, then the journal's clearing, or, when a writer
    holds the lock, the flusher's retry).  For a caller that must not have the flusher thread
    act later, such as a test patching the seams."""
    with _pending_lock:
        waiting = list(_pending.values())
    for p in waiting:
        _flusher.forget(p)
        try:
            p.flush()
        except Exception:  # noqa: BLE001 - as in the flusher's turn: the next writer settles it
            pass


def _forget(p: UnsyncedRestore) -> None:
    with _pending_lock:
        if _pending.get(p.store_dir) is p:
            del _pending[p.store_dir]


def _clear_as_writer(store_dir: str, stamp: bytes) -> None:
    """Clear the journal if it is still ``stamp``, under the store's writer lock (not waiting
    for it: LockedError), through a backend of this thread's own."""
    from snapstore.storage.lmdb_backend import LmdbBackend
    from snapstore.storage.lock import WriterLock

    lock = WriterLock(os.path.join(store_dir, "lock"), 0.0)
    with lock.held():
        backend = LmdbBackend(store_dir, durability="normal")
        try:
            backend.refresh()
            journal.clear_if(backend, stamp)
        finally:
            backend.close()


def _reset_after_fork() -> None:
    global _flusher, _pending_lock
    _flusher = Flusher(DELAY)
    _pending_lock = threading.Lock()
    _pending.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
