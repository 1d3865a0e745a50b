"""The LMDB backend: the only module that imports lmdb.

One LMDB environment per store directory, shared by every Store object of the process that opens
it (LMDB forbids opening one environment twice in a process).  Named databases hold the tables of
backend.TABLES.

Durability: the environment is opened with ``metasync=False``: every commit flushes its data
pages (fdatasync) but not the meta page, which the next commit or an explicit :meth:`sync`
flushes.  A crash can therefore lose at most the last commit, never corrupt the file; the store
calls :meth:`sync` after writing a checkpoint so that a returned checkpoint is on disk.

The map grows on demand: a commit that fills the map is retried after doubling it.  Resizing
needs no live read transaction in this process, so readers hold a shared lock the resizer takes
exclusively; other processes pick the new size up on their next transaction.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterable
from contextlib import contextmanager

import lmdb

from .backend import TABLES, WriteBatch
from .errors import CorruptError, StoreNotFoundError, TreeIOError

INITIAL_MAP_SIZE = 1 << 30
MAX_MAP_SIZE = 1 << 44


class _SharedExclusiveLock:
    """Many readers or one resizer (threads of this process)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False

    @contextmanager
    def shared(self):
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self):
        with self._cond:
            while self._exclusive or self._readers:
                self._cond.wait()
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class _Env:
    """One open LMDB environment, reference-counted per process."""

    def __init__(self, path: str, map_size: int):
        self.path = path
        self.env = lmdb.open(
            path,
            map_size=map_size,
            subdir=True,
            max_dbs=len(TABLES) + 2,
            metasync=False,
            sync=True,
            readahead=False,
            max_readers=256,
            create=True,
        )
        self.lock = _SharedExclusiveLock()
        with self.env.begin(write=True) as txn:
            self.dbs = {name: self.env.open_db(name.encode(), txn=txn) for name in TABLES}
        self.refs = 0
        self.write_lock = threading.Lock()


_envs: dict[str, _Env] = {}
_envs_lock = threading.Lock()


class _LmdbView:
    def __init__(self, txn, dbs):
        self._txn = txn
        self._dbs = dbs

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._txn.get(key, db=self._dbs[table])

    def items(self, table: str, *, reverse: bool = False, prefix: bytes = b""):
        cursor = self._txn.cursor(db=self._dbs[table])
        if reverse:
            if prefix:
                raise ValueError("reverse iteration with a prefix is not supported")
            if not cursor.last():
                return
            while True:
                yield cursor.key(), cursor.value()
                if not cursor.prev():
                    return
        else:
            if not cursor.set_range(prefix):
                return
            for key, value in cursor:
                if not key.startswith(prefix):
                    return
                yield key, value

    def count(self, table: str) -> int:
        return self._txn.stat(self._dbs[table])["entries"]


class LmdbBackend:
    """A :class:`backend.Backend` on an LMDB environment in directory ``path``."""

    def __init__(self, path: str, *, create: bool = False, map_size: int = INITIAL_MAP_SIZE):
        real = os.path.realpath(path)
        if not create and not os.path.exists(os.path.join(real, "data.mdb")):
            raise StoreNotFoundError(f"no store at {path}")
        with _envs_lock:
            shared = _envs.get(real)
            if shared is None:
                try:
                    shared = _Env(real, map_size)
                except lmdb.Error as exc:
                    raise _translate(exc, f"cannot open the store at {path}") from exc
                _envs[real] = shared
            shared.refs += 1
        self._shared = shared
        self._closed = False

    @property
    def env(self):
        return self._shared.env

    @contextmanager
    def read(self):
        shared = self._shared
        with shared.lock.shared():
            txn = self._begin_read()
            try:
                yield _LmdbView(txn, shared.dbs)
            finally:
                txn.abort()

    def _begin_read(self):
        try:
            return self._shared.env.begin(buffers=False)
        except lmdb.MapResizedError:
            # Another process grew the map: adopt its size and try again.
            self._shared.env.set_mapsize(0)
            return self._shared.env.begin(buffers=False)
        except lmdb.Error as exc:
            raise _translate(exc, "cannot read the store") from exc

    def has_many(self, table: str, keys: Iterable[bytes]) -> list[bool]:
        with self.read() as view:
            txn, db = view._txn, self._shared.dbs[table]
            return [txn.get(k, db=db) is not None for k in keys]

    @contextmanager
    def write(self):
        batch = WriteBatch(self.read)
        yield batch
        if len(batch):
            self._apply(batch)

    def _apply(self, batch: WriteBatch) -> None:
        shared = self._shared
        with shared.write_lock:
            while True:
                try:
                    batch.inserted_bytes = self._apply_once(batch)
                    return
                except lmdb.MapFullError:
                    self._grow()
                except lmdb.MapResizedError:
                    with shared.lock.exclusive():
                        shared.env.set_mapsize(0)
                except lmdb.Error as exc:
                    raise _translate(exc, "cannot write to the store") from exc

    def _apply_once(self, batch: WriteBatch) -> int:
        shared = self._shared
        dbs = shared.dbs
        inserted = 0
        with shared.env.begin(write=True) as txn:
            for table, key, value, only_new in batch.operations():
                db = dbs[table]
                if value is None:
                    txn.delete(key, db=db)
                elif only_new:
                    if txn.put(key, value, db=db, overwrite=False):
                        inserted += len(value)
                else:
                    txn.put(key, value, db=db)
        return inserted

    def _grow(self) -> None:
        shared = self._shared
        with shared.lock.exclusive():
            size = shared.env.info()["map_size"]
            if size >= MAX_MAP_SIZE:
                raise TreeIOError("the store has reached its maximum size")
            shared.env.set_mapsize(size * 2)

    def set_map_size(self, size: int) -> None:
        """Test seam: force a (small) map size to exercise growth."""
        with self._shared.lock.exclusive():
            self._shared.env.set_mapsize(size)

    def map_size(self) -> int:
        return self._shared.env.info()["map_size"]

    def sync(self) -> None:
        try:
            self._shared.env.sync(True)
        except lmdb.Error as exc:
            raise _translate(exc, "cannot flush the store to disk") from exc

    def disk_size(self) -> int:
        try:
            return os.path.getsize(os.path.join(self._shared.path, "data.mdb"))
        except OSError:
            return 0

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with _envs_lock:
            shared = self._shared
            shared.refs -= 1
            if shared.refs == 0:
                _envs.pop(shared.path, None)
                shared.env.close()


def _translate(exc: Exception, what: str) -> Exception:
    if isinstance(exc, lmdb.CorruptedError | lmdb.InvalidError | lmdb.PageNotFoundError):
        return CorruptError(f"{what}: the LMDB file is damaged ({exc})")
    if isinstance(exc, lmdb.DiskError) or getattr(exc, "errno", None) == errno.ENOSPC:
        return TreeIOError(f"{what}: {exc}")
    text = str(exc)
    if "No space left" in text:
        return TreeIOError(f"{what}: no space left on device")
    return TreeIOError(f"{what}: {exc}")
