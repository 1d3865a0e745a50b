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

import errno
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import lmdb

if TYPE_CHECKING:
    from lmdb import Transaction, _Database

from snapstore.errors import TreeIOError
from snapstore.storage import lmdb_compact, lmdb_durability, lmdb_generations
from snapstore.storage.backend import ReadView, WriteBatch
from snapstore.storage.lmdb_env import INITIAL_MAP_SIZE, MAX_MAP_SIZE, Env, translate

__all__ = ["INITIAL_MAP_SIZE", "MAX_MAP_SIZE", "LmdbBackend"]

#: Test seam: called with ``"commit"``, ``"committed"`` or ``"sync"`` around every commit and
#: flush, so crash tests can SIGKILL a process at each step of its writes.
step_hook: Callable[[str], None] | None = None


class _LmdbView:
    def __init__(self, txn: Transaction[bytes], dbs: dict[str, _Database], env: lmdb.Environment) -> None:
        self._txn = txn
        self._dbs = dbs
        self._env = env
        self._buffers: Transaction[memoryview] | None = None

    def get(self, table: str, key: bytes) -> bytes | None:
        value: bytes | None = self._txn.get(key, db=self._dbs[table])
        return value

    def part(self, table: str, key: bytes, start: int, stop: int) -> tuple[int, bytes] | None:
        """``(length of the value, its bytes start..stop)``, copying only those bytes; None
        when there is no such value.

        For a frame of a pack (the pack's key is the hash of its bytes, so any transaction
        that holds it holds the same bytes): ``get`` copied the whole ~1 MiB pack for every
        frame read, most of a ``cat``'s memory traffic on a consolidated store.  The bytes come
        through a second read transaction with zero-copy buffers (py-lmdb opens every
        environment with ``MDB_NOTLS``), opened on first use and closed with this view, so no
        buffer outlives it.  That transaction began later and may miss a value this view
        holds: then the value is read here, as it is when that transaction cannot begin (another
        process grew the map since this view's began).
        """
        buf: memoryview | None = None
        if self._buffers is None:
            try:
                self._buffers = self._env.begin(buffers=True)
            except lmdb.Error:
                pass
        if self._buffers is not None:
            buf = self._buffers.get(key, db=self._dbs[table])
        if buf is None:
            value = self.get(table, key)
            return None if value is None else (len(value), value[start:stop])
        return len(buf), bytes(buf[start:stop])

    def close(self) -> None:
        """End the zero-copy transaction of :meth:`part` (when one was opened)."""
        if self._buffers is not None:
            self._buffers.abort()
            self._buffers = None

    def items(
        self, table: str, *, reverse: bool = False, prefix: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        cursor = self._txn.cursor(db=self._dbs[table])
        if reverse:
            # Start at the last key below every key that has the prefix.
            end = _after(prefix)
            if end is None:
                placed = cursor.last()
            elif cursor.set_range(end):
                placed = cursor.prev()  # False when that key is the table's first
            else:
                placed = cursor.last()  # every key is below ``end``
            if not placed:
                return
            while True:
                key = cursor.key()
                if not key.startswith(prefix):
                    return
                yield key, cursor.value()
                if not cursor.prev():
                    return
        else:
            if not cursor.set_range(prefix):
                return
            if not prefix:  # the whole table: no per-item test (a walk of 7.7k cache rows: -50%)
                yield from cursor
                return
            for key, value in cursor:
                if not key.startswith(prefix):
                    return
                yield key, value

    def count(self, table: str) -> int:
        entries: int = self._txn.stat(self._dbs[table])["entries"]
        return entries


def _after(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes((trimmed[-1] + 1,))


class LmdbBackend:
    """A :class:`~snapstore.storage.backend.Backend` on the LMDB environment in ``path``."""

    def __init__(
        self, path: str, *, create: bool = False, map_size: int = INITIAL_MAP_SIZE, durability: str = "full"
    ) -> None:
        self._gens = lmdb_generations.acquire(path, create=create, map_size=map_size)
        self._closed = False
        self._applying = self._gens.current
        self.stamp: Callable[[WriteBatch], None] | None = None
        self.durability = "full"
        self._deferring = False
        if durability != "full":
            self.set_durability(durability)

    def set_durability(self, mode: str) -> str:
        """Follow durability ``mode`` (:mod:`snapstore.storage.lmdb_durability`); returns the
        mode in effect.  ``off`` needs the environment reopened without synced commits, which is
        possible only while this backend is its only user in the process: otherwise commits
        keep syncing their data pages and the mode in effect is ``normal``."""
        mode = lmdb_durability.check(mode)
        want_synced = mode != "off"
        if not self._gens.set_sync(want_synced) and want_synced:
            # Another Store of this process opened the file with MDB_NOSYNC: only whole-file
            # syncs make anything durable, so every operation ends with one.
            mode = "full"
        elif not want_synced and self._gens.current.synced_commits:
            mode = "normal"
        self.durability = mode
        return mode

    @property
    def path(self) -> str:
        """The (real) store directory."""
        return self._gens.store_dir

    @property
    def _shared(self) -> Env:
        """The environment of the current generation."""
        return self._gens.current

    @property
    def env(self) -> lmdb.Environment:
        """The lmdb.Environment (a test seam: tests damage records through it)."""
        return self._gens.current.env

    # -- reading ---------------------------------------------------------------------------------

    @contextmanager
    def _txn(self, *, buffers: bool = False) -> Iterator[tuple[Transaction[Any], Env]]:
        """A read transaction on the current generation (and that generation's environment),
        with its thread lock held shared.  The hot path: one lstat, no nested context managers."""
        gens = self._gens
        while True:
            shared = gens.enter()
            txn: Transaction[Any] | None = None
            try:
                shared.lock.acquire_shared()
                try:
                    try:
                        txn = shared.env.begin(buffers=True) if buffers else shared.env.begin()
                    except lmdb.MapResizedError:
                        txn = None
                    except lmdb.Error as exc:
                        raise translate(exc, "cannot read the store") from exc
                    if txn is not None and gens.changed():
                        # A compaction named a new generation: this transaction may be stale.
                        txn.abort()
                        txn = None
                        stale = True
                    else:
                        stale = False
                    if txn is not None:
                        try:
                            yield txn, shared
                        finally:
                            txn.abort()
                        return
                finally:
                    shared.lock.release_shared()
            finally:
                gens.leave(shared)
            if stale:
                gens.follow()
            else:
                # Another process grew the map: adopt its size once no thread of ours reads.
                shared.adopt_map_size()

    @contextmanager
    def read(self) -> Iterator[ReadView]:
        """A consistent view of every table (one read transaction)."""
        with self._txn() as (txn, shared):
            view = _LmdbView(txn, shared.dbs, shared.env)
            try:
                yield view
            finally:
                view.close()

    def has_many(self, table: str, keys: Iterable[bytes]) -> list[bool]:
        """For each key, whether ``table`` holds it."""
        with self._txn() as (txn, shared):
            db = shared.dbs[table]
            return [txn.get(k, db=db) is not None for k in keys]

    def value_sizes(self, table: str) -> Iterator[tuple[bytes, int, bytes]]:
        """``(key, stored value length, first 32 bytes)`` of every record of ``table``.

        Reads through zero-copy buffers, so a large value is not copied to compute its size.
        """
        with self._txn(buffers=True) as (txn, shared):
            db = shared.dbs[table]
            for key, value in txn.cursor(db=db):
                yield bytes(key), len(value), bytes(value[:32])

    def table_pages(self, table: str) -> int:
        """Bytes of the B-tree and overflow pages of ``table`` (LMDB's own statistics)."""
        with self._txn() as (txn, shared):
            st = txn.stat(shared.dbs[table])
        pages: int = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
        return pages * int(st["psize"])

    # -- writing ---------------------------------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[WriteBatch]:
        """A batch applied in one transaction on clean exit (discarded on an exception)."""
        batch = WriteBatch(self.read)
        yield batch
        if len(batch):
            if self.stamp is not None:
                self.stamp(batch)
            self._apply(batch)

    def _apply(self, batch: WriteBatch) -> None:
        if step_hook is not None:
            step_hook("commit")
        self._apply_locked(batch)
        if step_hook is not None:
            step_hook("committed")

    def _apply_locked(self, batch: WriteBatch) -> None:
        with self._gens.use() as shared, shared.write_lock:
            while True:
                try:
                    self._applying = shared
                    batch.inserted_bytes = self._apply_once(batch)
                    return
                except lmdb.MapFullError:
                    self._grow(shared)
                except lmdb.MapResizedError:
                    shared.adopt_map_size()
                except lmdb.Error as exc:
                    raise translate(exc, "cannot write to the store", shared.path) from exc

    def _apply_once(self, batch: WriteBatch) -> int:
        # The environment _apply chose and holds the write lock of (set just before the call:
        # this signature is a test seam that injects failures).
        shared = self._applying
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

    def _grow(self, shared: Env) -> None:
        with shared.lock.exclusive():
            size = shared.map_size_now()
            if size >= MAX_MAP_SIZE:
                raise TreeIOError("the store has reached its maximum size")
            try:
                shared.env.set_mapsize(min(size * 2, MAX_MAP_SIZE))
            except lmdb.Error as exc:
                if getattr(exc, "errno", None) != errno.ENOMEM and "Cannot allocate memory" not in str(exc):
                    raise
                raise TreeIOError(
                    f"the store needs a map of {size * 2 >> 20} MiB, more address space than this "
                    "process may use (ulimit -v): this write was not recorded"
                ) from exc

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
        """Write a new generation without free pages (see :mod:`snapstore.storage.lmdb_compact`)."""
        self.barrier()
        return lmdb_compact.compact(self._gens)

    def refresh(self) -> bool:
        """Follow CURRENT to a generation written by another process's compaction.

        Called by every writer right after it takes the store's writer lock: the compacting
        process held that lock while it renamed CURRENT, so from then on no write can go to an
        old generation.  Also deletes old generations no process has open.  True if it switched.
        """
        try:
            switched = self._gens.follow()
            self._gens.remove_old()
        except lmdb.Error as exc:
            raise translate(exc, "cannot open the compacted store") from exc
        except OSError as exc:
            raise TreeIOError(f"cannot follow the compacted store: {exc}") from exc
        return switched

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Within the block, :meth:`sync` waits for the caller's :meth:`barrier` (a restore's
        safety checkpoint is synced with its journal: one meta-page sync instead of two)."""
        saved, self._deferring = self._deferring, True
        try:
            yield
        finally:
            self._deferring = saved

    def sync(self) -> None:
        """An operation's commits are done: make them durable as the durability setting says
        (``full``: the meta page now; ``normal``: within the flusher's delay; ``off``: never)."""
        if self._deferring:
            return
        if self.durability == "full":
            self.barrier()
        elif self.durability == "normal":
            self._shared.flush_later()

    def barrier(self) -> None:
        """Sync every committed page now, whatever the setting (before the tree is touched)."""
        if step_hook is not None:
            step_hook("sync")
        try:
            self._shared.flush()
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
        lmdb_generations.release(self._gens)


# -- memory trimming (Linux) -----------------------------------------------------------------------

_libc: Any = None


def _mapped_ranges(path: str) -> list[tuple[int, int]]:
    """Address ranges where this process maps ``path`` (:func:`snapstore.platform.maps.own_ranges`)."""
    from snapstore.platform import maps

    return maps.own_ranges(path)


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
