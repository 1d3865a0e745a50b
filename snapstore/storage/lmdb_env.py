"""The LMDB environment of a store directory: opening it safely, its map, its thread lock.

One :class:`Env` per generation of a store (see :mod:`snapstore.storage.lmdb_generations`),
shared by every Store object of the process (LMDB forbids opening one environment twice in a
process).  Named databases hold the tables of ``backend.TABLES``.

**Store files are never followed through symlinks.**  A store directory can come from an
archive; LMDB opens ``lock.mdb`` (and ``data.mdb``) with ``O_CREAT`` and would follow a planted
link to a file outside the store.  :func:`check_store_files` refuses, before LMDB opens
anything, a store directory not owned by the user and any store file that is not a regular file.

**The map.**  On 64-bit systems the map is reserved at :data:`LARGE_MAP_SIZE` (address space
only: the file grows as data is written), so no process ever needs to grow it in practice; a
process whose address space is limited (``ulimit -v``) reserves a quarter of its limit instead
(:func:`fitting_map_size`), or less when mmap refuses, and grows the map as the store grows.
Growing is still supported (a 32-bit build, or a store past that size): ``set_mapsize`` may only
run when no thread of the process is inside a read transaction (py-lmdb invalidates them all),
so readers hold :attr:`Env.lock` shared and a resize takes it exclusively.

Durability (see :mod:`snapstore.storage.lmdb_durability`): the environment is opened with
``metasync=False``: every commit flushes its data pages (fdatasync) but not the meta page, which
the next commit or an explicit ``sync`` flushes (a power failure can lose at most the last
commit, never corrupt the file); or, for a store whose setting is ``off``, with ``sync=False``.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import lmdb

if TYPE_CHECKING:
    from lmdb import _Database

from snapstore.errors import (
    CorruptError,
    NoSpaceError,
    StoreNotFoundError,
    TreeIOError,
    UnsafePathError,
)
from snapstore.storage.backend import TABLES

#: Files LMDB and the store keep in a store or generation directory (none may be a symlink).
STORE_FILES = ("data.mdb", "lock.mdb", "lock", "CURRENT")

SMALL_MAP_SIZE = 1 << 30
#: A sparse reservation of address space (64-bit): growth is never needed in practice.
LARGE_MAP_SIZE = 1 << 40
INITIAL_MAP_SIZE = LARGE_MAP_SIZE if sys.maxsize > 2**32 else SMALL_MAP_SIZE
MAX_MAP_SIZE = 1 << 44


#: The least map tried when the process may not map more (the file's used size always fits:
#: LMDB raises a smaller map to it).
MIN_MAP_SIZE = 1 << 26


def fitting_map_size(wanted: int) -> int:
    """``wanted``, or a quarter of the address space the process may use when that is less
    (``ulimit -v`` in small containers: the interpreter, its threads and the page cache of the
    chunks it reads share the limit).  The map grows on demand past it while it can."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return wanted
    return max(MIN_MAP_SIZE, min(wanted, soft // 4))


def _open_mapped(path: str, map_size: int, create: bool, sync: bool = True) -> lmdb.Environment:
    """``lmdb.open`` with the largest map this process may reserve, at most ``map_size``;
    ``sync`` False opens it with ``MDB_NOSYNC`` (durability ``off``)."""
    size = fitting_map_size(map_size)
    while True:
        try:
            return lmdb.open(
                path,
                map_size=size,
                subdir=True,
                max_dbs=len(TABLES) + 2,
                metasync=False,
                sync=sync,
                readahead=False,
                max_readers=256,
                create=create,
            )
        except lmdb.Error as exc:
            # mmap refused the reservation (a limit getrlimit does not show: overcommit, a
            # cgroup): try a smaller one; the file's used size is always mapped in full.
            if getattr(exc, "errno", None) != errno.ENOMEM and "Cannot allocate memory" not in str(exc):
                raise
            if size <= MIN_MAP_SIZE:
                raise TreeIOError(
                    f"cannot map the store at {path}: this process may not reserve even "
                    f"{MIN_MAP_SIZE >> 20} MiB of address space (ulimit -v?)"
                ) from exc
            size = max(MIN_MAP_SIZE, size // 4)


class SharedExclusiveLock:
    """Many readers or one resizer (threads of this process)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._readers = 0
        self._exclusive = False
        #: Threads waiting for the exclusive side (a test seam: it shows a resize is queued).
        self.exclusive_waiters = 0

    def acquire_shared(self) -> None:
        """Take the shared side (a read transaction may be open until release_shared)."""
        with self.cond:
            while self._exclusive:
                self.cond.wait()
            self._readers += 1

    def release_shared(self) -> None:
        """Drop the shared side taken by acquire_shared."""
        with self.cond:
            self._readers -= 1
            if not self._readers:
                self.cond.notify_all()

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the shared side (a read transaction may be open) for the block."""
        self.acquire_shared()
        try:
            yield
        finally:
            self.release_shared()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the exclusive side (no read transaction of this process is open) for the block."""
        with self.cond:
            self.exclusive_waiters += 1
            self.cond.notify_all()
            try:
                while self._exclusive or self._readers:
                    self.cond.wait()
            finally:
                self.exclusive_waiters -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self.cond:
                self._exclusive = False
                self.cond.notify_all()


def check_store_files(path: str) -> None:
    """Refuse a store directory not owned by us, or a store file that is not a regular file.

    Raises UnsafePathError naming the file; nothing has been opened or created yet.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise TreeIOError(f"cannot open the store at {path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StoreNotFoundError(f"no store at {path} (not a directory)")
    # Another user could swap a file in a directory they own between our check and LMDB's
    # open.  A root-owned directory is safe from that; root itself may open anyone's store (an
    # administrator's choice; symlinked files are still refused below).
    if hasattr(os, "geteuid") and os.geteuid() not in (0, st.st_uid) and st.st_uid != 0:
        raise UnsafePathError(
            f"refusing the store at {path}: the directory belongs to another user (uid {st.st_uid})"
        )
    for name in STORE_FILES:
        full = os.path.join(path, name)
        try:
            lst = os.lstat(full)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise TreeIOError(f"cannot check {full}: {exc.strerror}") from exc
        if not stat.S_ISREG(lst.st_mode):
            what = "a symlink" if stat.S_ISLNK(lst.st_mode) else "not a regular file"
            raise UnsafePathError(f"refusing the store at {path}: {name} is {what}")


class Env:
    """One open LMDB environment: the store's data of one generation (see lmdb_generations).

    ``path`` is the directory holding data.mdb and lock.mdb: the store directory itself for
    generation 0 (the original layout), ``gen-N`` below it after a compaction.  ``dir_fd`` holds
    a shared flock on that directory for as long as the environment is open, so no other process
    deletes the generation under this one.
    """

    def __init__(self, path: str, dir_fd: int, map_size: int, *, create: bool, sync: bool = True) -> None:
        self.path = path
        #: False when opened with MDB_NOSYNC (no commit syncs anything).
        self.synced_commits = sync
        #: Held while the environment is flushed or closed (the flusher thread flushes too).
        self.flush_lock = threading.Lock()
        self.closed = False
        self.dir_fd = dir_fd
        self.map_size = map_size
        self.lock = SharedExclusiveLock()
        #: Serialises this process's write transactions (LMDB allows one per environment).
        self.write_lock = threading.Lock()
        #: Transactions of this process open on this environment, and whether a newer
        #: generation replaced it (it closes when both say so).
        self.active = 0
        self.retired = False
        #: Cache of release_memory: (env id, map size) -> mapped address ranges.
        self.map_key: tuple[int, int] | None = None
        self.map_ranges: list[tuple[int, int]] = []
        check_store_files(path)
        self.env = _open_mapped(path, map_size, create, sync)
        try:
            with self.env.begin(write=True) as txn:
                self.dbs: dict[str, _Database] = {
                    name: self.env.open_db(name.encode(), txn=txn) for name in TABLES
                }
        except BaseException:
            self.env.close()
            raise

    def map_size_now(self) -> int:
        """The size of this process's map of the file."""
        return self.env.info()["map_size"]

    def last_txnid(self) -> int:
        """The id of the last committed transaction."""
        return self.env.info()["last_txnid"]

    def adopt_map_size(self) -> None:
        """Take another process's larger map size, with no read transaction of ours open."""
        with self.lock.exclusive():
            self.env.set_mapsize(0)

    def flush(self) -> None:
        """Sync every committed page (data and meta) to the disk, now."""
        with self.flush_lock:
            if not self.closed:
                self.env.sync(True)

    def flush_later(self) -> None:
        """Have the process's flusher thread sync the meta page within its delay."""
        from snapstore.storage.lmdb_durability import flusher

        flusher.later(self)

    def close(self) -> None:
        """Close the environment (syncing a meta page that waits for the flusher) and drop the
        generation's shared flock."""
        from snapstore.storage.lmdb_durability import flusher

        with self.flush_lock:
            if flusher.forget(self):
                try:
                    self.env.sync(True)
                except lmdb.Error:
                    pass  # the pages stay in the page cache: the kernel writes them back
            self.closed = True
            self.env.close()
        os.close(self.dir_fd)


def translate(exc: Exception, what: str, path: str | None = None) -> Exception:
    """The snapstore error for an LMDB error (damage, a full disk, or another I/O error)."""
    if isinstance(exc, lmdb.CorruptedError | lmdb.InvalidError | lmdb.PageNotFoundError):
        return CorruptError(f"{what}: the LMDB file is damaged ({exc})")
    text = str(exc)
    if (
        any(s in text for s in ("No space left", "Disk quota exceeded"))
        or getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        # LMDB reports a short write (the disk filled up mid-commit) as EIO.
        or (path is not None and isinstance(exc, lmdb.Error) and _nearly_full(path))
    ):
        return NoSpaceError(
            f"{what}: no space left on the device holding {path or 'the store'} "
            "(this write was not recorded; free some space and try again)"
        )
    return TreeIOError(f"{what}: {exc}")


def _nearly_full(path: str, margin: int = 1 << 20) -> bool:
    """True when the file system holding ``path`` has less than ``margin`` bytes free."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin
