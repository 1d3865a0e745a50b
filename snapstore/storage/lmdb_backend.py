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

from snapstore.errors import CorruptError, StoreNotFoundError, TreeIOError
from snapstore.storage.backend import TABLES, WriteBatch

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
        self.map_size = map_size
        self._open()
        self.lock = _SharedExclusiveLock()
        self.refs = 0
        self.write_lock = threading.Lock()

    def _open(self) -> None:
        # The inode of data.mdb this environment maps: gc --compact replaces the file by a
        # rename, and every writer compares this with the file's current inode (reopen_if_replaced).
        data = os.path.join(self.path, "data.mdb")
        for _ in range(5):
            before = _inode(data)
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
            if before is None or _inode(data) == before:
                break
            env.close()  # the file was swapped while we opened it: open the new one
        self.env = env
        self.ino = _inode(data)
        with self.env.begin(write=True) as txn:
            self.dbs = {name: self.env.open_db(name.encode(), txn=txn) for name in TABLES}

    def replaced(self) -> bool:
        """True when data.mdb is no longer the file this environment maps."""
        ino = _inode(os.path.join(self.path, "data.mdb"))
        return ino is not None and ino != self.ino

    def reopen(self) -> None:
        """Map the current data.mdb (after another process's compaction renamed a new one in).

        Waits for this process's writers and readers; every Store object of the process shares
        this environment, so all of them see the new file at once.
        """
        with self.write_lock, self.lock.exclusive():
            self.map_size = max(self.map_size, self.env.info()["map_size"])
            self.env.close()
            self._open()


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


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
            elif shared.replaced():
                shared.reopen()
            shared.refs += 1
        self._shared = shared
        self._closed = False

    def reopen_if_replaced(self) -> bool:
        """Reopen the environment if data.mdb was replaced (gc --compact in another process).

        Called by every writer right after it takes the store's writer lock: the compacting
        process held that lock while it renamed the new file in, so from then on no write can
        go to the old, unlinked file.  Returns True if it reopened.
        """
        shared = self._shared
        if not shared.replaced():
            return False
        try:
            shared.reopen()
        except lmdb.Error as exc:
            raise _translate(exc, "cannot reopen the compacted store") from exc
        return True

    def keys(self, table: str) -> list[bytes]:
        """Every key of ``table`` (values are not copied), in key order."""
        with self.read() as view:
            cursor = view._txn.cursor(db=self._shared.dbs[table])
            return list(cursor.iternext(keys=True, values=False))

    def value_sizes(self, table: str):
        """Yield ``(key, stored value length, first 32 bytes)`` of every record of ``table``.

        Reads through zero-copy buffers, so a large value is not copied to compute its size.
        """
        shared = self._shared
        with shared.lock.shared():
            try:
                txn = shared.env.begin(buffers=True)
            except lmdb.Error as exc:
                raise _translate(exc, "cannot read the store") from exc
            try:
                for key, value in txn.cursor(db=shared.dbs[table]):
                    yield bytes(key), len(value), bytes(value[:32])
            finally:
                txn.abort()

    def compact(self, work_dir: str) -> tuple[int, int]:
        """Rewrite data.mdb without free pages; returns ``(size before, size after)``.

        The caller holds the store's writer lock.  Steps: ``env.copy(compact=True)`` into
        ``work_dir`` (inside the store directory, so the rename below stays on one file
        system); give the copy the transaction id of the live file (see _stamp_txnid); fsync;
        check the copy opens and reads; rename it over data.mdb; fsync the directory; reopen.
        A crash before the rename leaves the old file untouched (the work dir is removed by
        the next compaction); after it, the new file is complete.
        """
        shared = self._shared
        data = os.path.join(shared.path, "data.mdb")
        before = os.path.getsize(data)
        _remove_dir(work_dir)
        os.mkdir(work_dir)
        try:
            self.sync()
            with shared.write_lock:
                txnid = shared.env.info()["last_txnid"]
                try:
                    shared.env.copy(work_dir, compact=True)
                except lmdb.Error as exc:
                    raise _translate(exc, "cannot compact the store") from exc
                new = os.path.join(work_dir, "data.mdb")
                _stamp_txnid(new, txnid)
                fd = os.open(new, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                _check_copy(work_dir, txnid)
                lock_copy = os.path.join(work_dir, "lock.mdb")
                if os.path.exists(lock_copy):
                    os.unlink(lock_copy)
                if shared.env.info()["last_txnid"] != txnid:
                    raise TreeIOError("the store changed during compaction; nothing was replaced")
                os.rename(new, data)
                _fsync_dir(shared.path)
        finally:
            _remove_dir(work_dir)
        shared.reopen()
        return before, os.path.getsize(data)

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
                    raise _translate(exc, "cannot write to the store", shared.path) from exc

    def _apply_once(self, batch: WriteBatch) -> int:
        shared = self._shared
        dbs = shared.dbs
        inserted = 0
        with shared.env.begin(write=True) as txn:
            for n, (table, key, value, only_new) in enumerate(batch.operations(), 1):
                if n % 256 == 0:
                    self.release_memory()  # a long batch maps many B-tree pages
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

    def release_memory(self, trim_heap: bool = False) -> None:
        """Drop this process's mappings of data.mdb pages (they stay in the page cache).

        LMDB reads through a shared read-only map; every page it touches stays counted in the
        process's RSS, and the kernel's fault-around maps up to 16 neighbouring cached pages
        with each one.  A snapshot that writes 250 MB would otherwise end with most of the file
        resident.  MADV_DONTNEED on a shared file mapping only unmaps: the next access refaults
        the same bytes from the page cache, so this is safe at any moment.
        """
        shared = self._shared
        key = (id(shared.env), shared.env.info()["map_size"])
        if getattr(shared, "_map_key", None) != key:
            shared._map_ranges = _mapped_ranges(os.path.join(shared.path, "data.mdb"))
            shared._map_key = key
        _madvise_dontneed(shared._map_ranges)
        if trim_heap:
            _malloc_trim()

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


# -- compaction helpers ------------------------------------------------------------------------
#
# LMDB keeps the id of the last committed transaction in the lock file (lock.mdb) as well as in
# the two meta pages of data.mdb, and readers and writers of a process that attaches to an
# existing lock file trust the lock file's copy to pick the current meta page.  A compacted copy
# restarts at transaction 1, so renaming it in while another process keeps lock.mdb open would
# make that process (and every process opening the store after it) read the wrong meta page.
# We therefore stamp the copy with the live file's transaction id T: both meta pages get the
# copy's (identical) root, page T % 2 with id T and the other with T - 1.  Whichever page a
# process picks, it sees the compacted tree, and the next commit (T + 1) continues the sequence.
# Layout (LMDB 0.9, 64-bit): a 16-byte page header, then MDB_meta: magic u32, version u32,
# address, mapsize, two MDB_db records of 48 bytes, last_pgno u64 at 136, txnid u64 at 144.

_META_MAGIC = 0xBEEFC0DE
_META_START = 16
_META_END = 152
_TXNID_AT = 144


def _stamp_txnid(path: str, txnid: int) -> None:
    import struct

    if struct.calcsize("P") != 8:
        raise TreeIOError("compaction needs a 64-bit LMDB build")
    with open(path, "r+b") as f:
        head = f.read(_META_END)
        magic, version = struct.unpack_from("<II", head, _META_START)
        psize = struct.unpack_from("<I", head, _META_START + 24)[0]  # FREE_DBI.md_pad
        if magic != _META_MAGIC or version != 1 or psize < 512 or psize & (psize - 1):
            raise TreeIOError("compaction: unexpected LMDB file layout; nothing was replaced")
        f.seek(psize)
        meta1 = bytearray(f.read(_META_END))
        if struct.unpack_from("<II", meta1, _META_START) != (_META_MAGIC, 1):
            raise TreeIOError("compaction: unexpected LMDB file layout; nothing was replaced")
        copy_txn = struct.unpack_from("<Q", meta1, _TXNID_AT)[0]
        f.seek(0)
        meta0 = f.read(_META_END)
        if copy_txn < struct.unpack_from("<Q", meta0, _TXNID_AT)[0]:
            raise TreeIOError("compaction: unexpected LMDB copy; nothing was replaced")
        body = bytes(meta1[_META_START:_TXNID_AT])
        for page in (0, 1):
            stamp = txnid if page == txnid % 2 else max(txnid - 1, 0)
            f.seek(page * psize + _META_START)
            f.write(body + struct.pack("<Q", stamp))
        f.flush()


def _check_copy(work_dir: str, txnid: int) -> None:
    """Open the stamped copy on its own (fresh lock file) and read every table's first key."""
    try:
        env = lmdb.open(work_dir, subdir=True, max_dbs=len(TABLES) + 2, readonly=False, create=False)
    except lmdb.Error as exc:
        raise TreeIOError(f"compaction: the copy does not open ({exc}); nothing was replaced") from exc
    try:
        if env.info()["last_txnid"] != txnid:
            raise TreeIOError("compaction: the copy has the wrong transaction id; nothing was replaced")
        with env.begin() as txn:
            if txn.get(b"meta") is None:
                raise TreeIOError("compaction: the copy has no tables; nothing was replaced")
    finally:
        env.close()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_dir(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


_libc = None


def _mapped_ranges(path: str) -> list[tuple[int, int]]:
    """Address ranges where this process maps ``path`` (Linux /proc/self/maps)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            maps = f.read().splitlines()
    except OSError:
        return []
    target = os.fsencode(path)
    out = []
    for line in maps:
        if line.endswith(target):
            start, _, end = line.split(b" ", 1)[0].partition(b"-")
            out.append((int(start, 16), int(end, 16)))
    return out


def _malloc_trim() -> None:
    # Worker threads free their read buffers into per-thread malloc arenas, which glibc keeps;
    # trimming hands the free pages back so RSS follows what is really in use.
    try:
        if _libc is not None:
            _libc.malloc_trim(0)
    except AttributeError:
        pass  # not glibc


def _madvise_dontneed(ranges: list[tuple[int, int]]) -> None:
    global _libc
    if not ranges:
        return
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
            _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        for lo, hi in ranges:
            _libc.madvise(lo, hi - lo, 4)  # MADV_DONTNEED
    except (OSError, AttributeError):
        return  # no libc madvise: only a memory optimisation is lost


def _translate(exc: Exception, what: str, path: str | None = None) -> Exception:
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
