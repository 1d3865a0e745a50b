"""Store generations: how a compacted store replaces the old one under live readers.

A store's data lives in one *generation*: generation 0 is the original layout (data.mdb and
lock.mdb directly in the store directory); a compaction writes generation N+1 into ``gen-N+1/``
and then names it in the small file ``CURRENT`` (written to a temporary name, fsynced, renamed:
atomic).  No LMDB internals are involved: each generation is a complete LMDB environment with
its own lock file.

**Readers and writers follow CURRENT.**  Every transaction start stats ``CURRENT`` (one lstat,
compared with the last one seen); when it names another generation the process opens that one
and retires the old environment, which closes once its last open transaction ends.  After a
transaction has begun, CURRENT is checked again: a compaction renames CURRENT while it holds the
writer lock, before anyone can write to the new generation, so a transaction that began while
CURRENT still named its generation saw the latest committed state.  Writers also check right
after taking the writer lock (``refresh``).

**Old generations** are deleted only when no process has them open: every process holds a shared
``flock`` on the directory of each generation it has open, and deletion (under the writer lock)
takes the exclusive side without waiting, skipping a generation still in use (the next writer
tries again).  Opening a generation takes the shared flock first and then re-reads CURRENT, so a
generation cannot be deleted between choosing it and opening it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import lmdb

from snapstore.errors import CorruptError, StoreNotFoundError, TreeIOError, UnsafePathError
from snapstore.storage.lmdb_env import Env, check_store_files, translate

CURRENT = "CURRENT"


def _gen_number(name: str) -> int | None:
    """N for a generation directory named ``gen-N`` (1 to 9 ASCII digits, no leading zero).

    (String tests, not a regex: ``re`` is the costliest import a plain CLI snapshot had left.)
    """
    digits = name[4:]
    if (
        not name.startswith("gen-")
        or not 1 <= len(digits) <= 9
        or not (digits.isascii() and digits.isdigit())
        or digits[0] == "0"
    ):
        return None
    return int(digits)


#: What identifies one version of CURRENT: (inode, size, mtime) of its lstat, or None if absent.
StatKey = tuple[int, int, int] | None


def is_store(path: str) -> bool:
    """True when directory ``path`` holds a store (of any generation)."""
    from snapstore.storage.discovery import holds_store

    return holds_store(path)


def _stat_key(current_path: str) -> StatKey:
    try:
        st = os.lstat(current_path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_current(store_dir: str) -> tuple[StatKey, str]:
    """The generation CURRENT names (``""`` for generation 0) and the stat key it was read at."""
    path = os.path.join(store_dir, CURRENT)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, ""
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(f"refusing the store at {store_dir}: CURRENT is a symlink") from exc
        raise TreeIOError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"refusing the store at {store_dir}: CURRENT is not a regular file")
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if _gen_number(text) is None:
        raise CorruptError(f"the store's CURRENT file is damaged ({text[:20]!r})")
    return (st.st_ino, st.st_size, st.st_mtime_ns), text


def gen_path(store_dir: str, name: str) -> str:
    """The directory of generation ``name`` (the store directory for generation 0)."""
    return os.path.join(store_dir, name) if name else store_dir


def _open_dir_locked(path: str, how: int) -> int | None:
    """A directory fd of ``path`` holding flock ``how``; None if the directory is gone or busy."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError(f"refusing the store: {path} is not a directory") from exc
        raise TreeIOError(f"cannot open {path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, how)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


class Generations:
    """The environments of one store directory in this process: the current one and those
    retired but still inside a transaction."""

    def __init__(self, store_dir: str, map_size: int, *, create: bool, sync: bool = True) -> None:
        self.store_dir = store_dir
        #: Whether environments are opened with synced commits (False: MDB_NOSYNC).
        self.sync = sync
        self._current_path = os.path.join(store_dir, CURRENT)
        self.map_size = map_size
        self.refs = 0
        self._mutex = threading.Lock()
        self.key: StatKey = None
        self.name = ""
        self.current = self._open(create=create)

    def _open(self, *, create: bool) -> Env:
        for _ in range(100):
            key, name = read_current(self.store_dir)
            path = gen_path(self.store_dir, name)
            fd = _open_dir_locked(path, fcntl.LOCK_SH)
            if fd is None:
                continue  # deleted since CURRENT was read: read it again
            try:
                if read_current(self.store_dir)[1] != name:
                    os.close(fd)
                    continue
                if not create and not os.path.lexists(os.path.join(path, "data.mdb")):
                    raise StoreNotFoundError(f"no store at {self.store_dir}")
                env = Env(path, fd, self.map_size, create=create and not name, sync=self.sync)
            except lmdb.Error as exc:
                os.close(fd)
                raise translate(exc, f"cannot open the store at {self.store_dir}") from exc
            except BaseException:
                os.close(fd)
                raise
            self.key, self.name = key, name
            return env
        raise TreeIOError(f"cannot open the store at {self.store_dir}: its generation keeps changing")

    def follow(self) -> bool:
        """Switch to the generation CURRENT names if it changed; True if it switched."""
        if _stat_key(self._current_path) == self.key:
            return False
        with self._mutex:
            key, name = read_current(self.store_dir)
            if name == self.name:
                self.key = key
                return False
            self.map_size = max(self.map_size, self.current.map_size_now())
            old = self.current
            self.current = self._open(create=False)
            old.retired = True
            if old.active == 0:
                old.close()
            return True

    def set_sync(self, sync: bool) -> bool:
        """Reopen the current environment with synced commits or not (``MDB_NOSYNC`` is fixed
        when LMDB opens a file); True when its commits now sync as asked.  Only possible while
        this is the only user in the process and no transaction is open: otherwise the first
        opener's choice stays (False)."""
        if self.current.synced_commits == sync:
            self.sync = sync
            return True
        with _stores_lock, self._mutex:
            if self.refs > 1 or self.current.active:
                return False
            old = self.current
            self.sync = sync
            old.close()
            self.current = self._open(create=False)
            return True

    def changed(self) -> bool:
        """True when CURRENT is no longer the version this process last followed."""
        return _stat_key(self._current_path) != self.key

    def enter(self) -> Env:
        """The current environment, counted as in use until :meth:`leave` (not closed under it).

        Does not look at CURRENT: a reader checks :meth:`changed` once its transaction has begun
        (one lstat per transaction) and follows then.
        """
        with self._mutex:
            env = self.current
            env.active += 1
        return env

    def leave(self, env: Env) -> None:
        """End a use begun by :meth:`enter`; a retired environment closes with its last use."""
        with self._mutex:
            env.active -= 1
            if env.retired and env.active == 0:
                env.close()

    @contextmanager
    def use(self) -> Iterator[Env]:
        """The current environment (after following CURRENT), in use for the block."""
        self.follow()
        env = self.enter()
        try:
            yield env
        finally:
            self.leave(env)

    def remove_old(self) -> None:
        """Delete every generation but the current one that no process has open (writer lock held)."""
        for entry in os.listdir(self.store_dir):
            if entry == self.name:
                continue
            full = os.path.join(self.store_dir, entry)
            if _gen_number(entry) is not None or entry.startswith("gen-") and entry.endswith(".tmp"):
                fd = _open_dir_locked(full, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if fd is not None:
                    try:
                        import shutil  # only when an old generation is deleted

                        shutil.rmtree(full, ignore_errors=True)
                    finally:
                        os.close(fd)
        if self.name and os.path.lexists(os.path.join(self.store_dir, "data.mdb")):
            # Generation 0 lives in the store directory itself: its flock is on that directory.
            fd = _open_dir_locked(self.store_dir, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if fd is not None:
                try:
                    for name in ("data.mdb", "lock.mdb"):
                        try:
                            os.unlink(os.path.join(self.store_dir, name))
                        except FileNotFoundError:
                            pass
                finally:
                    os.close(fd)

    def next_name(self) -> str:
        """The name of the next generation (above every one that exists)."""
        top = 0
        for entry in os.listdir(self.store_dir):
            number = _gen_number(entry.removesuffix(".tmp"))
            if number is not None:
                top = max(top, number)
        return f"gen-{top + 1}"

    def close(self) -> None:
        """Close every environment (the last user of the store in this process is gone)."""
        self.current.close()


_stores: dict[str, Generations] = {}
_stores_lock = threading.Lock()


def acquire(path: str, *, create: bool, map_size: int) -> Generations:
    """The shared generations of store directory ``path`` (opened on first use)."""
    real = os.path.realpath(path)
    if not create and not is_store(real):
        raise StoreNotFoundError(f"no store at {path}")
    check_store_files(real)
    with _stores_lock:
        shared = _stores.get(real)
        if shared is None:
            shared = Generations(real, map_size, create=create)
            _stores[real] = shared
        shared.refs += 1
    return shared


def release(shared: Generations) -> None:
    """Drop one user of ``shared``; the last one closes its environments."""
    with _stores_lock:
        shared.refs -= 1
        if shared.refs == 0:
            _stores.pop(shared.store_dir, None)
            shared.close()
