"""The LMDB backend: read views, write batches applied with retry, memory trimming.

:class:`LmdbBackend` implements :class:`~snapstore.storage.backend.Backend` on the shared
environment of :mod:`snapstore.storage.lmdb_env`; compaction lives in
:mod:`snapstore.storage.lmdb_compact`.

A read view is one LMDB read transaction, opened with the environment's thread lock held shared
(so no resize can invalidate it).  A write batch is collected in Python and applied in one write
transaction at the end of the ``with`` block; a commit that fills the map is retried after
doubling it, and one that finds the map grown by another process after adopting its size.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import lmdb

from snapstore.errors import TreeIOError
from snapstore.storage import lmdb_compact, lmdb_env
from snapstore.storage.backend import ReadView, WriteBatch
from snapstore.storage.lmdb_env import INITIAL_MAP_SIZE, MAX_MAP_SIZE, translate

__all__ = ["INITIAL_MAP_SIZE", "MAX_MAP_SIZE", "LmdbBackend"]


class _LmdbView:
    def __init__(self, txn: Any, dbs: dict[str, Any]) -> None:
        self._txn = txn
        self._dbs = dbs

    def get(self, table: str, key: bytes) -> bytes | None:
        value: bytes | None = self._txn.get(key, db=self._dbs[table])
        return value

    def items(
        self, table: str, *, reverse: bool = False, prefix: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
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
        entries: int = self._txn.stat(self._dbs[table])["entries"]
        return entries


class LmdbBackend:
    """A :class:`~snapstore.storage.backend.Backend` on the LMDB environment in ``path``."""

    def __init__(self, path: str, *, create: bool = False, map_size: int = INITIAL_MAP_SIZE) -> None:
        self._shared = lmdb_env.acquire(path, create=create, map_size=map_size)
        self._closed = False

    @property
    def path(self) -> str:
        """The (real) store directory."""
        return self._shared.path

    @property
    def env(self) -> Any:
        """The lmdb.Environment (a test seam: tests damage records through it)."""
        return self._shared.env

    # -- reading ---------------------------------------------------------------------------------

    @contextmanager
    def _txn(self, *, buffers: bool = False) -> Iterator[Any]:
        """A read transaction held with the thread lock's shared side."""
        shared = self._shared
        while True:
            with shared.lock.shared():
                try:
                    txn = shared.env.begin(buffers=True) if buffers else shared.env.begin()
                except lmdb.MapResizedError:
                    txn = None
                except lmdb.Error as exc:
                    raise translate(exc, "cannot read the store") from exc
                if txn is not None:
                    try:
                        yield txn
                    finally:
                        txn.abort()
                    return
            # Another process grew the map: adopt its size once no thread of ours reads.
            shared.adopt_map_size()

    @contextmanager
    def read(self) -> Iterator[ReadView]:
        """A consistent view of every table (one read transaction)."""
        with self._txn() as txn:
            yield _LmdbView(txn, self._shared.dbs)

    def has_many(self, table: str, keys: Iterable[bytes]) -> list[bool]:
        """For each key, whether ``table`` holds it."""
        db = self._shared.dbs[table]
        with self._txn() as txn:
            return [txn.get(k, db=db) is not None for k in keys]

    def value_sizes(self, table: str) -> Iterator[tuple[bytes, int, bytes]]:
        """``(key, stored value length, first 32 bytes)`` of every record of ``table``.

        Reads through zero-copy buffers, so a large value is not copied to compute its size.
        """
        with self._txn(buffers=True) as txn:
            for key, value in txn.cursor(db=self._shared.dbs[table]):
                yield bytes(key), len(value), bytes(value[:32])

    # -- writing ---------------------------------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[WriteBatch]:
        """A batch applied in one transaction on clean exit (discarded on an exception)."""
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
                    shared.adopt_map_size()
                except lmdb.Error as exc:
                    raise translate(exc, "cannot write to the store", shared.path) from exc

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
            size = shared.map_size_now()
            if size >= MAX_MAP_SIZE:
                raise TreeIOError("the store has reached its maximum size")
            shared.env.set_mapsize(min(size * 2, MAX_MAP_SIZE))

    def set_map_size(self, size: int) -> None:
        """Test seam: force a (small) map size to exercise growth."""
        with self._shared.lock.exclusive():
            self._shared.env.set_mapsize(size)

    def map_size(self) -> int:
        """The size of this process's map of the store."""
        return self._shared.map_size_now()

    # -- the rest of the protocol ------------------------------------------------------------------

    def release_memory(self, trim_heap: bool = False) -> None:
        """Drop this process's mappings of data.mdb pages (they stay in the page cache).

        LMDB reads through a shared read-only map; every page it touches stays counted in the
        process's RSS, and the kernel's fault-around maps up to 16 neighbouring cached pages
        with each one.  A snapshot that writes 250 MB would otherwise end with most of the file
        resident.  MADV_DONTNEED on a shared file mapping only unmaps: the next access refaults
        the same bytes from the page cache, so this is safe at any moment.
        """
        shared = self._shared
        key = (id(shared.env), shared.map_size_now())
        if shared.map_key != key:
            shared.map_ranges = _mapped_ranges(os.path.join(shared.path, "data.mdb"))
            shared.map_key = key
        _madvise_dontneed(shared.map_ranges)
        if trim_heap:
            _malloc_trim()

    def compact(self) -> tuple[int, int] | None:
        """Rewrite data.mdb without free pages (see :mod:`snapstore.storage.lmdb_compact`)."""
        return lmdb_compact.compact(self._shared, self.sync)

    def refresh(self) -> bool:
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
            raise translate(exc, "cannot reopen the compacted store") from exc
        return True

    def sync(self) -> None:
        """Flush the meta page (data pages are flushed by every commit)."""
        try:
            self._shared.env.sync(True)
        except lmdb.Error as exc:
            raise translate(exc, "cannot flush the store to disk") from exc

    def disk_size(self) -> int:
        """The size of data.mdb."""
        try:
            return os.path.getsize(os.path.join(self._shared.path, "data.mdb"))
        except OSError:
            return 0

    def close(self) -> None:
        """Drop this backend's use of the shared environment (idempotent)."""
        if self._closed:
            return
        self._closed = True
        lmdb_env.release(self._shared)


# -- memory trimming (Linux) -----------------------------------------------------------------------

_libc: Any = None


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
