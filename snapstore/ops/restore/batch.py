"""Carrying out a whole plan: files written in parallel, made durable together, then renamed.

One fsync per file made restore several times slower than ``git checkout``.  Here the steps run
in this order (each still idempotent, so the journal protocol and recovery are unchanged):

1. every file whose directory already exists (and stays) is written to a temp file there, in a
   small thread pool (reading, decompressing and writing release the GIL);
2. the files (and symlinks) to delete, set aside and unlinked together as in 4; the other
   removals, deepest first, then the directories to create, shallowest first;
3. the files whose directory only now exists are written the same way;
4. the files the temp files replace are set aside (renamed to temp names), each checked
   unchanged first, and unlinked together by the pool (:func:`_clear_replaced`); then
   **durability point 1**: one ``syncfs`` per file system the temp files are on (where the platform has none, each writer fsynced its file and the old
   files stay until their renames): no name can point to unwritten data;
5. the renames, in path order, each right after its path is checked (still absent when cleared
   in 4, else unchanged); then symlinks;
6. directory modes, deepest first;
7. **durability point 2**: ``syncfs`` again (or, without it, the fsync of every directory
   written when the applier is closed), so the new names are on disk before the caller clears
   the journal.

With ``execute(..., defer=[])`` (durability ``normal``: :mod:`.settle`) the two durability
points are not made here: the caller keeps the journal until one ``syncfs`` later.

Files beyond :data:`GROUP_BYTES` are written, synced and renamed in further groups after the
first (steps 3-5 again), so the extra disk space a restore needs stays bounded.  The journal was
made durable before step 1 by the caller.  A crash anywhere leaves every
journaled path absent, as before or as after, and only our temp files besides (recovery removes
them).  ``before(i, step)`` runs right before step ``i`` touches the tree (the concurrent-edit
check and the crash tests' hook); :attr:`Run.done` lists what was carried out, for a roll-back.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from snapstore.errors import ConflictError
from snapstore.ops.restore.apply import Applier, Aside, Staged
from snapstore.ops.restore.plan import REMOVALS, Step
from snapstore.platform import sync
from snapstore.tree.paths import display

#: Files below this count are written in the calling thread (a pool costs more than it saves).
POOL_MIN_FILES = 8
#: Writer threads (I/O-bound: a few are enough, even on two cores).
WORKERS = 4
#: New file bytes staged before a sync and their renames: bounds the extra disk space a restore
#: needs (a new file and the one it replaces exist side by side until the rename).
GROUP_BYTES = 256 << 20


def _syncfs(fd: int) -> None:
    sync.flush_filesystem(fd)


#: Test seam: flushes the file system holding ``fd``; None (or no syncfs in the C library)
#: means each file and directory is fsynced instead.
syncfs: Callable[[int], None] | None = _syncfs


def _sync_fn() -> Callable[[int], None] | None:
    if syncfs is _syncfs and not sync.available():
        return None
    return syncfs


#: Runs right before step ``i`` touches the tree (the concurrent-edit check); returns the lstat
#: it checked the path with, or None when it checked none.
Before = Callable[[int, Step], "os.stat_result | None"]


@dataclass
class Run:
    """What :func:`execute` did so far (read after an error, for the roll-back)."""

    done: list[Step] = field(default_factory=list)
    paths: set[bytes] = field(default_factory=set)


def execute(
    applier: Applier, steps: list[Step], before: Before | None, run: Run,
    defer: list[tuple[bytes, int]] | None = None,
) -> None:
    """Carry out ``steps`` (a plan's order) against the tree, durably; see the module doc.

    With ``defer`` (a list), the two durability points are left to the caller: no ``syncfs``
    is made, and one directory per file system written to is appended to ``defer``: its path
    and an fd of it (a duplicate, the caller's to close).  Only for a caller that keeps the journal until it has synced
    them (:mod:`.settle`); requires :func:`deferrable`.
    """
    tree = applier.tree
    removed = {s.path for s in steps if s.action in REMOVALS}
    groups = _groups(applier, [(i, s) for i, s in enumerate(steps) if s.action in ("write", "chmod")])
    staged: dict[int, Staged] = {}
    sync = _sync_fn() if defer is None else _skip
    durable_each = sync is None
    try:
        early, late = _split_early(applier, groups[0], removed)
        _stage_all(applier, early, staged, durable_each)
        deleted = _delete_files(applier, steps, before, run)
        for i, s in enumerate(steps):
            if (s.action in REMOVALS or s.action == "mkdir") and i not in deleted:
                _touch(applier, i, s, before, run)
        for n, group in enumerate(groups):
            todo = late if n == 0 else group
            _stage_all(applier, [(i, s, *_parent(applier, s.path)) for i, s in todo], staged, durable_each)
            cleared: set[bytes] = set()
            if sync is not None:
                cleared = _clear_replaced(applier, group, staged, before, run)
                _sync_dirs(sync, {st.dir_fd for st in staged.values()})
            for i, s in group:
                if s.path in cleared:
                    _still_absent(applier, s, run)
                elif before is not None:
                    before(i, s)
                applier.commit(staged.pop(i))
                if s.path not in cleared:
                    run.done.append(s)
                    run.paths.add(s.path)
        for i, s in enumerate(steps):
            if s.action == "symlink":
                _touch(applier, i, s, before, run)
        for i, s in enumerate(steps):
            if s.action == "dirmode":
                _touch(applier, i, s, before, run)
    finally:
        for st in staged.values():
            applier.discard(st)
    if sync is not None and tree.touched:  # (a restore that changed nothing needs no sync)
        _last_point(tree.fds, sync, defer)
        tree.touched.clear()  # durable now (or the caller's to sync): no directory to fsync


def _last_point(fds: dict[bytes, int], sync: Callable[[int], None], defer: list[tuple[bytes, int]] | None) -> None:
    """Durability point 2, or (``defer``) the directories to make it with later."""
    if defer is None:
        _sync_dirs(sync, fds.values())
        return
    firsts = {fd: rel for rel, fd in fds.items()}
    defer.extend((firsts[fd], os.dup(fd)) for fd in _one_per_device(fds.values()))


def _groups(applier: Applier, writes: list[tuple[int, Step]]) -> list[list[tuple[int, Step]]]:
    """The writes cut into groups of at most :data:`GROUP_BYTES` (each staged, synced and
    renamed in turn), so a large restore never holds every new file beside its old one."""
    groups: list[list[tuple[int, Step]]] = [[]]
    size = 0
    for item in writes:
        n = applier.target[item[1].path].size
        if groups[-1] and size + n > GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += n
    return groups


def _touch(applier: Applier, i: int, s: Step, before: Before | None, run: Run) -> None:
    if before is not None:
        before(i, s)
    applier.apply(s)
    run.done.append(s)
    run.paths.add(s.path)


def _clear_replaced(
    applier: Applier, group: list[tuple[int, Step]], staged: dict[int, Staged],
    before: Before | None, run: Run,
) -> set[bytes]:
    """Clear the paths of the files the group's temp files replace, each checked unchanged
    first, before the data sync (:func:`_set_aside_all`); the paths cleared.

    A replaced file not yet written back is dropped with its dirty pages, so the data sync
    never writes it.  The path stays absent until its rename, a state the journal's recovery
    accepts (its bytes are in the durable safety checkpoint).
    """
    items = [(i, s, staged[i].dir_fd, staged[i].parent, staged[i].name) for i, s in group]
    return _set_aside_all(applier, items, before, run)


def _delete_files(applier: Applier, steps: list[Step], before: Before | None, run: Run) -> set[int]:
    """Delete the files (and symlinks) the plan deletes, together (:func:`_set_aside_all`); the
    indices of the steps done (a directory, or a path below a non-directory, is left to its
    step, in the plan's order)."""
    items = []
    for i, s in enumerate(steps):
        if s.action != "delete":
            continue
        fd, parent, name = applier.tree.split_existing(s.path)
        st = None if fd is None else applier.tree.lstat(s.path)
        if fd is not None and st is not None and not stat.S_ISDIR(st.st_mode):
            items.append((i, s, fd, parent, name))
    done = _set_aside_all(applier, items, before, run)
    return {i for i, s, *_ in items if s.path in done}


def _set_aside_all(
    applier: Applier, items: list[tuple[int, Step, int, bytes, bytes]],
    before: Before | None, run: Run,
) -> set[bytes]:
    """Rename each file of ``items`` to a temp name right after its check, then unlink them
    all in the writer pool; the paths cleared.

    Freeing a file whose data had reached the disk waits on the disk (a synchronous discard
    per file on file systems mounted with ``discard``): those waits overlap in the pool.  A
    crash leaves temp names, which recovery removes; when a check fails, the files already set
    aside get their names (and their inodes) back before the roll-back.
    """
    cleared: set[bytes] = set()
    aside: list[Aside] = []
    try:
        for i, s, fd, parent, name in items:
            seen = before(i, s) if before is not None else None
            moved = applier.set_aside(fd, parent, name, seen)
            if moved is not None:
                aside.append(moved)
                cleared.add(s.path)
                run.done.append(s)
                run.paths.add(s.path)
    except BaseException:
        for moved in aside:
            try:
                applier.put_back(moved)
            except OSError:
                applier.drop_aside(moved)  # its bytes are in the safety checkpoint
        raise
    _in_pool([functools.partial(applier.drop_aside, moved) for moved in aside])
    return cleared


def _still_absent(applier: Applier, s: Step, run: Run) -> None:
    """Refuse to rename over what someone put at a cleared path since (it is theirs: the
    roll-back leaves it too)."""
    if applier.tree.lstat(s.path) is not None:
        run.done.remove(s)
        run.paths.discard(s.path)
        raise ConflictError(
            f"{display(s.path)} changed while the restore ran; the restore was rolled back (nothing was lost)"
        )


def _parent(applier: Applier, path: bytes) -> tuple[int, bytes, bytes]:
    fd, parent, name = applier.tree.split(path, create=True)
    assert fd is not None  # create=True makes the parent or raises
    return fd, parent, name


def _split_early(
    applier: Applier, writes: list[tuple[int, Step]], removed: set[bytes]
) -> tuple[list[tuple[int, Step, int, bytes, bytes]], list[tuple[int, Step]]]:
    """The writes whose directory exists and stays (with its fd), and the others."""
    early: list[tuple[int, Step, int, bytes, bytes]] = []
    late: list[tuple[int, Step]] = []
    fine: dict[bytes, int | None] = {}
    for i, s in writes:
        parent = s.path.rpartition(b"/")[0]
        if parent not in fine:
            fine[parent] = None
            if not _below_removed(parent, removed):
                try:
                    fine[parent] = applier.tree.dir_fd(parent, create=False)
                except ConflictError:  # not a directory now: a removal makes room first
                    pass
        fd = fine[parent]
        if fd is None:
            late.append((i, s))
        else:
            early.append((i, s, fd, parent, s.path.rpartition(b"/")[2]))
    return early, late


def _below_removed(parent: bytes, removed: set[bytes]) -> bool:
    if not removed or not parent:
        return False
    d = parent
    while d:
        if d in removed:
            return True
        d = d.rpartition(b"/")[0]
    return False


def _stage_all(
    applier: Applier, items: list[tuple[int, Step, int, bytes, bytes]], staged: dict[int, Staged], durable: bool
) -> None:
    """Write the temp files of ``items`` (in a thread pool when there are several)."""

    def one(item: tuple[int, Step, int, bytes, bytes]) -> Callable[[], None]:
        i, s, fd, parent, name = item

        def run() -> None:
            staged[i] = applier.stage(s.path, fd, parent, name, durable=durable)

        return run

    _in_pool([one(item) for item in items])


def _in_pool(jobs: list[Callable[[], None]]) -> None:
    """Run ``jobs`` in the restore's writer pool (in this thread when they are few); wait for
    every one, so none is left running after an error, then raise the first error."""
    if len(jobs) < POOL_MIN_FILES:
        for job in jobs:
            job()
        return
    from snapstore.ops.workers import pool  # only for restores of many files

    errors: list[BaseException] = []
    todo = iter(jobs)

    def drain() -> None:
        for job in todo:  # (one iterator shared by the workers: each takes the next job)
            try:
                job()
            except BaseException as exc:
                errors.append(exc)

    for fut in [pool("restore", WORKERS).submit(drain) for _ in range(min(WORKERS, len(jobs)))]:
        fut.result()
    if errors:
        raise errors[0]


def _sync_dirs(sync: Callable[[int], None], fds: Iterable[int]) -> None:
    """One ``sync`` per file system among the directories ``fds``."""
    for fd in _one_per_device(fds):
        sync(fd)


def _one_per_device(fds: Iterable[int]) -> list[int]:
    devices: dict[int, int] = {}
    for fd in fds:
        devices.setdefault(os.fstat(fd).st_dev, fd)
    return list(devices.values())


def _skip(fd: int) -> None:
    """The durability point of a deferred run: left to the caller."""


def deferrable() -> bool:
    """Whether :func:`execute` can leave its syncs to the caller (there is a ``syncfs`` to
    make them with later)."""
    return _sync_fn() is not None


def sync_dirs_now(fds: Iterable[int]) -> None:
    """The deferred durability points: one ``syncfs`` per file system among ``fds`` (where
    there is none now, as when the platform layer is masked, every file system: ``sync``)."""
    sync = _sync_fn()
    if sync is None:
        os.sync()
        return
    _sync_dirs(sync, fds)
