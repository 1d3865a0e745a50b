"""The LMDB environment of a store directory: opening it safely, its map, its thread lock.

One environment per store directory, shared by every Store object of the process that opens it
(LMDB forbids opening one environment twice in a process): :func:`acquire` / :func:`release`
count its users.  Named databases hold the tables of ``backend.TABLES``.

**Store files are never followed through symlinks.**  A store directory can come from an
archive; LMDB opens ``lock.mdb`` (and ``data.mdb``) with ``O_CREAT`` and would follow a planted
link to a file outside the store.  :func:`check_store_files` refuses, before LMDB opens
anything, a store directory not owned by the user and any store file that is not a regular file.

**The map.**  On 64-bit systems the map is reserved at :data:`LARGE_MAP_SIZE` (address space
only: the file grows as data is written), so no process ever needs to grow it in practice.
Growing is still supported (a 32-bit build, or a store past that size): ``set_mapsize`` may only
run when no thread of the process is inside a read transaction (py-lmdb invalidates them all),
so readers hold :attr:`Env.lock` shared and a resize takes it exclusively.

Durability: the environment is opened with ``metasync=False``: every commit flushes its data
pages (fdatasync) but not the meta page, which the next commit or an explicit ``sync`` flushes.
A crash can lose at most the last commit, never corrupt the file.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from snapstore.errors import CorruptError, StoreNotFoundError, TreeIOError, UnsafePathError
from snapstore.storage.backend import TABLES

#: Files LMDB and the store keep in a store directory (none may be a symlink).
STORE_FILES = ("data.mdb", "lock.mdb", "lock")

SMALL_MAP_SIZE = 1 << 30
#: A sparse reservation of address space (64-bit): growth is never needed in practice.
LARGE_MAP_SIZE = 1 << 40
INITIAL_MAP_SIZE = LARGE_MAP_SIZE if sys.maxsize > 2**32 else SMALL_MAP_SIZE
MAX_MAP_SIZE = 1 << 44


class SharedExclusiveLock:
    """Many readers or one resizer (threads of this process)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._readers = 0
        self._exclusive = False
        #: Threads waiting for the exclusive side (a test seam: it shows a resize is queued).
        self.exclusive_waiters = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the shared side (a read transaction may be open) for the block."""
        with self.cond:
            while self._exclusive:
                self.cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self.cond:
                self._readers -= 1
                self.cond.notify_all()

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


def inode(path: str) -> int | None:
    """The inode of ``path`` (not following a symlink), or None if it does not exist."""
    try:
        return os.lstat(path).st_ino
    except OSError:
        return None


class Env:
    """One open LMDB environment, reference-counted per process."""

    def __init__(self, path: str, map_size: int) -> None:
        self.path = path
        self.map_size = map_size
        self.lock = SharedExclusiveLock()
        self.refs = 0
        #: Serialises this process's write transactions (LMDB allows one per environment).
        self.write_lock = threading.Lock()
        #: Cache of release_memory: (env id, map size) -> mapped address ranges.
        self.map_key: tuple[int, int] | None = None
        self.map_ranges: list[tuple[int, int]] = []
        self._open()

    def _open(self) -> None:
        # The inode of data.mdb this environment maps: gc --compact replaces the file by a
        # rename, and every writer compares this with the file's current inode (replaced()).
        data = os.path.join(self.path, "data.mdb")
        for _ in range(5):
            check_store_files(self.path)
            before = inode(data)
            env = lmdb.open(
                self.path,
                map_size=self.map_size,
                subdir=True,
                max_dbs=len(TABLES) + 2,
                metasync=False,
                sync=True,
                readahead=False,
                max_readers=256,
                create=True,
            )
            if before is None or inode(data) == before:
                break
            env.close()  # the file was swapped while we opened it: open the new one
        self.env = env
        self.ino = inode(data)
        with self.env.begin(write=True) as txn:
            self.dbs: dict[str, Any] = {
                name: self.env.open_db(name.encode(), txn=txn) for name in TABLES
            }

    def map_size_now(self) -> int:
        """The size of this process's map of the file."""
        return self.env.info()["map_size"]

    def last_txnid(self) -> int:
        """The id of the last committed transaction."""
        return self.env.info()["last_txnid"]

    def replaced(self) -> bool:
        """True when data.mdb is no longer the file this environment maps."""
        ino = inode(os.path.join(self.path, "data.mdb"))
        return ino is not None and ino != self.ino

    def reopen(self) -> None:
        """Map the current data.mdb (after another process's compaction renamed a new one in).

        Waits for this process's writers and readers; every Store object of the process shares
        this environment, so all of them see the new file at once.
        """
        with self.write_lock, self.lock.exclusive():
            self.map_size = max(self.map_size, self.map_size_now())
            self.env.close()
            self._open()

    def begin_read(self) -> Any:
        """Begin a read transaction; the caller holds :attr:`lock` shared.

        Raises lmdb.MapResizedError when another process grew the map: the caller must then
        release the shared side and call :meth:`adopt_map_size`.
        """
        return self.env.begin(buffers=False)

    def adopt_map_size(self) -> None:
        """Take another process's larger map size, with no read transaction of ours open."""
        with self.lock.exclusive():
            self.env.set_mapsize(0)


_envs: dict[str, Env] = {}
_envs_lock = threading.Lock()


def acquire(path: str, *, create: bool, map_size: int) -> Env:
    """The shared environment of store directory ``path`` (opened on first use)."""
    real = os.path.realpath(path)
    if not create and not os.path.lexists(os.path.join(real, "data.mdb")):
        raise StoreNotFoundError(f"no store at {path}")
    check_store_files(real)
    with _envs_lock:
        shared = _envs.get(real)
        if shared is None:
            try:
                shared = Env(real, map_size)
            except lmdb.Error as exc:
                raise translate(exc, f"cannot open the store at {path}") from exc
            _envs[real] = shared
        elif shared.replaced():
            shared.reopen()
        shared.refs += 1
    return shared


def release(shared: Env) -> None:
    """Drop one user of ``shared``; the last one closes the environment."""
    with _envs_lock:
        shared.refs -= 1
        if shared.refs == 0:
            _envs.pop(shared.path, None)
            shared.env.close()


def translate(exc: Exception, what: str, path: str | None = None) -> Exception:
    """The snapstore error for an LMDB error (damage, a full disk, or another I/O error)."""
    if isinstance(exc, lmdb.CorruptedError | lmdb.InvalidError | lmdb.PageNotFoundError):
        return CorruptError(f"{what}: the LMDB file is damaged ({exc})")
    text = str(exc)
    if "No space left" in text or getattr(exc, "errno", None) == errno.ENOSPC or (
        # LMDB reports a short write (the disk filled up mid-commit) as EIO.
        path is not None and isinstance(exc, lmdb.Error) and _nearly_full(path)
    ):
        return TreeIOError(
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
