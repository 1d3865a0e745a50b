"""The in-memory backend: the semantics of the LMDB one, with no disk (for tests).

A view copies the tables when it opens, so like an LMDB read transaction it never sees later
writes; a batch is applied under one lock, so it is atomic for every thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from snapstore.storage.backend import TABLES, ReadView, WriteBatch


class _MemoryView:
    def __init__(self, tables: dict[str, dict[bytes, bytes]]) -> None:
        # Copy-on-read: a view must not change under its reader, like an LMDB read transaction.
        self._tables = {name: dict(t) for name, t in tables.items()}

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._tables[table].get(key)

    def items(
        self, table: str, *, reverse: bool = False, prefix: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = sorted(k for k in self._tables[table] if k.startswith(prefix))
        if reverse:
            keys.reverse()
        for key in keys:
            yield key, self._tables[table][key]

    def count(self, table: str) -> int:
        return len(self._tables[table])


class MemoryBackend:
    """An in-memory :class:`~snapstore.storage.backend.Backend`."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[bytes, bytes]] = {name: {} for name in TABLES}
        self._lock = threading.Lock()
        self.stamp: Callable[[WriteBatch], None] | None = None

    @contextmanager
    def read(self) -> Iterator[ReadView]:
        """A snapshot of every table."""
        with self._lock:
            view = _MemoryView(self.tables)
        yield view

    def has_many(self, table: str, keys: Iterable[bytes]) -> list[bool]:
        """For each key, whether ``table`` holds it."""
        with self._lock:
            t = self.tables[table]
            return [k in t for k in keys]

    def value_sizes(self, table: str) -> Iterator[tuple[bytes, int, bytes]]:
        """``(key, value length, first 32 bytes)`` of every record, in key order."""
        with self._lock:
            rows = [(k, len(v), v[:32]) for k, v in sorted(self.tables[table].items())]
        yield from rows

    @contextmanager
    def write(self) -> Iterator[WriteBatch]:
        """A batch applied atomically on clean exit."""
        batch = WriteBatch(self.read)
        yield batch
        if len(batch) and self.stamp is not None:
            self.stamp(batch)
        with self._lock:
            inserted = 0
            for table, key, value, only_new in batch.operations():
                t = self.tables[table]
                if value is None:
                    t.pop(key, None)
                elif only_new:
                    if key not in t:
                        t[key] = value
                        inserted += len(value)
                else:
                    t[key] = value
            batch.inserted_bytes = inserted

    def sync(self) -> None:
        """Nothing to flush."""

    def barrier(self) -> None:
        """Nothing to flush."""

    def table_pages(self, table: str) -> int:
        """The bytes of ``table``'s keys and values (memory has no pages)."""
        with self._lock:
            return sum(len(k) + len(v) for k, v in self.tables[table].items())

    def disk_size(self) -> int:
        """The bytes of every key and value."""
        with self._lock:
            return sum(len(k) + len(v) for t in self.tables.values() for k, v in t.items())

    def release_memory(self, trim_heap: bool = False) -> None:
        """Nothing is mapped."""

    def compact(self) -> tuple[int, int] | None:
        """Nothing to compact: memory holds no free pages."""
        return None

    def refresh(self) -> bool:
        """No other process can replace memory."""
        return False

    def close(self) -> None:
        """Nothing to release."""
