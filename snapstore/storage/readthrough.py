"""A backend whose missing rows are filled on demand: the cache under ``--remote`` browsing.

:class:`ReadThroughBackend` wraps a :class:`~snapstore.storage.backend.Backend`.  When a view's
``get`` finds no row in one of the tables a *filler* serves, the filler is asked for it (for a
remote: a ranged read of the one frame that holds a chunk, :mod:`snapstore.remote.browse`).  It
puts the rows it found into a pending batch, and the view answers from there.  So every stage
reads a remote's checkpoints as it reads a local store, through the one ``get`` it already uses,
and reads only what it touches.

Pending rows are written to the store when the calling thread's outermost view closes, not at
once: a write while this thread holds a read transaction could wait forever for that very
reader if the LMDB map had to grow.  Until then (and while another thread writes them) they are
answered from memory.  Listings (``items``, ``count``) and ``has_many`` see only what is in the
store or pending: nothing is filled for them.

A miss looks at the store as it is now before it asks the filler, so a view may see a row of a
served table written after it opened: fit only for content-addressed tables, whose rows never
change once written (what the view sees is what it would have read).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager

from snapstore.storage.backend import Backend, ReadView, WriteBatch


class Pending(WriteBatch):
    """Rows filled but not yet in the store.  Its ``get`` also sees the batches another thread
    is writing (``flushing``), then the store as it is now (a fresh view)."""

    def __init__(self, backend: Backend, flushing: list[Pending]) -> None:
        super().__init__(backend.read)
        self._flushing = flushing

    def peek(self, table: str, key: bytes) -> tuple[bool, bytes | None]:
        """``(whether this batch decides the row, its value)``; no store read."""
        ops = self._ops.get(table)
        if ops is None or key not in ops:
            return False, None
        value = ops[key]
        return True, value if isinstance(value, bytes) else None

    def get(self, table: str, key: bytes) -> bytes | None:
        for batch in (self, *self._flushing):
            found, value = batch.peek(table, key)
            if found:
                return value
        return super().get(table, key)


#: ``fill(pending, table, key)``: put the row ``key`` of ``table`` (and whatever else it read
#: that is worth keeping) into ``pending``, or nothing when there is no such row.
Fill = Callable[[Pending, str, bytes], None]
Lock = Callable[[], AbstractContextManager[None]]


class _View:
    def __init__(self, view: ReadView, owner: ReadThroughBackend) -> None:
        self._view = view
        self._owner = owner

    def get(self, table: str, key: bytes) -> bytes | None:
        value = self._view.get(table, key)
        if value is None and table in self._owner.tables:
            return self._owner.miss(table, key)
        return value

    def items(self, table: str, *, reverse: bool = False, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        return self._view.items(table, reverse=reverse, prefix=prefix)

    def count(self, table: str) -> int:
        return self._view.count(table)


class ReadThroughBackend:
    """``inner`` with the misses of ``tables`` filled by ``fill``; ``lock`` is the store's
    writer lock, held while filled rows are written."""

    def __init__(self, inner: Backend, fill: Fill, tables: Iterable[str], lock: Lock) -> None:
        self.inner = inner
        self.fill = fill
        self.tables = frozenset(tables)
        self.lock = lock
        self._flushing: list[Pending] = []
        self._pending = Pending(inner, self._flushing)
        self._fill_lock = threading.RLock()
        self._depth = threading.local()

    @property
    def stamp(self) -> Callable[[WriteBatch], None] | None:
        return self.inner.stamp

    @stamp.setter
    def stamp(self, value: Callable[[WriteBatch], None] | None) -> None:
        self.inner.stamp = value

    @contextmanager
    def read(self) -> Iterator[ReadView]:
        """A view of the store whose ``get`` fills what is missing."""
        depth = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        try:
            with self.inner.read() as view:
                yield _View(view, self)
        finally:
            self._depth.n = depth
        if depth == 0:
            self.flush()

    def miss(self, table: str, key: bytes) -> bytes | None:
        """The row a view lacked: pending, written since the view opened, or filled now."""
        with self._fill_lock:
            value = self._pending.get(table, key)
            if value is None:
                self.fill(self._pending, table, key)
                value = self._pending.get(table, key)
            return value

    def flush(self) -> None:
        """Write the filled rows to the store (the caller holds no view of it)."""
        with self._fill_lock:
            batch = self._pending
            if not len(batch):
                return
            self._pending = Pending(self.inner, self._flushing)
            self._flushing.append(batch)
        try:
            with self.lock(), self.inner.write() as out:
                for table, key, value, only_new in batch.operations():
                    if value is None:
                        out.delete(table, key)
                    elif only_new:
                        out.put_new(table, key, value)
                    else:
                        out.put(table, key, value)
        finally:
            with self._fill_lock:
                self._flushing.remove(batch)

    def write(self) -> AbstractContextManager[WriteBatch]:
        return self.inner.write()

    def has_many(self, table: str, keys: Iterable[bytes]) -> list[bool]:
        keys = list(keys)
        have = self.inner.has_many(table, keys)
        with self._fill_lock:
            return [h or self._pending.peek(table, k)[1] is not None for h, k in zip(have, keys)]

    def value_sizes(self, table: str) -> Iterator[tuple[bytes, int, bytes]]:
        return self.inner.value_sizes(table)

    def table_pages(self, table: str) -> int:
        return self.inner.table_pages(table)

    def sync(self) -> None:
        self.inner.sync()

    def barrier(self) -> None:
        self.inner.barrier()

    def disk_size(self) -> int:
        return self.inner.disk_size()

    def release_memory(self, trim_heap: bool = False) -> None:
        self.inner.release_memory(trim_heap)

    def compact(self) -> tuple[int, int] | None:
        return self.inner.compact()

    def refresh(self) -> bool:
        return self.inner.refresh()

    def close(self) -> None:
        """Write what is pending, then release the store."""
        try:
            self.flush()
        finally:
            self.inner.close()
