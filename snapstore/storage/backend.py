"""The key-value layer under the store: a narrow protocol, and an in-memory implementation.

Everything snapstore keeps is a key-value pair in one of a few named tables (see
docs/format.md).  The store talks to a :class:`Backend`; ``lmdb_store.LmdbBackend`` is the real
one, :class:`MemoryBackend` serves tests that want no disk.  Both run through the same tests.

Writes are collected in a :class:`WriteBatch` and applied in one atomic transaction when the
``with backend.write() as batch`` block exits without an exception; an exception discards the
whole batch.  Keeping the batch in Python until commit keeps the real write transaction short
(other processes' writers wait less) and lets the LMDB backend retry it after growing the map.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

TABLES = (
    "meta",  # format version, tree root, chunker parameters
    "chunks",  # chunk id -> flag byte + payload
    "streams",  # stream id -> [size, height, root id] for streams of more than one chunk
    "checkpoints",  # checkpoint id -> record
    "log",  # 8-byte big-endian sequence -> checkpoint id (creation order)
    "tags",  # tag name -> checkpoint id
    "statcache",  # path -> stat fields + stream id (an optimisation only)
    "conversations",  # conversation id -> {base, count, depth, total, chunks}
    "journal",  # restore in progress (crash recovery)
    "oplog",  # 8-byte sequence -> restore/undo operation record
)

#: The key of the journal entry of a restore in progress (table ``journal``).
JOURNAL_KEY = b"current"

_DELETED = object()


class ReadView(Protocol):
    """A consistent read-only view of all tables (one LMDB read transaction)."""

    def get(self, table: str, key: bytes) -> bytes | None: ...

    def items(
        self, table: str, *, reverse: bool = False, prefix: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def count(self, table: str) -> int: ...


class WriteBatch:
    """Puts and deletes to apply atomically; reads see the batch's own writes first."""

    def __init__(self, view_factory):
        self._ops: dict[str, dict[bytes, object]] = {}
        self._new: dict[str, set[bytes]] = {}
        self._view_factory = view_factory
        self.pending_bytes = 0
        #: After commit: bytes of values newly inserted by :meth:`put_new`.
        self.inserted_bytes = 0

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value`` (replacing any value)."""
        self._ops.setdefault(table, {})[key] = value
        self._new.get(table, set()).discard(key)
        self.pending_bytes += len(key) + len(value)

    def put_new(self, table: str, key: bytes, value: bytes) -> None:
        """Set ``key`` only if it has no value yet (content-addressed objects are immutable)."""
        ops = self._ops.setdefault(table, {})
        if key in ops:
            return
        ops[key] = value
        self._new.setdefault(table, set()).add(key)
        self.pending_bytes += len(key) + len(value)

    def delete(self, table: str, key: bytes) -> None:
        self._ops.setdefault(table, {})[key] = _DELETED
        self._new.get(table, set()).discard(key)

    def get(self, table: str, key: bytes) -> bytes | None:
        ops = self._ops.get(table)
        if ops is not None and key in ops:
            value = ops[key]
            return None if value is _DELETED else value  # type: ignore[return-value]
        with self._view_factory() as view:
            return view.get(table, key)

    def __len__(self) -> int:
        return sum(len(ops) for ops in self._ops.values())

    def operations(self) -> Iterator[tuple[str, bytes, bytes | None, bool]]:
        """Yield ``(table, key, value or None for delete, only_if_new)``."""
        for table, ops in self._ops.items():
            new = self._new.get(table, ())
            for key, value in ops.items():
                yield table, key, (None if value is _DELETED else value), key in new  # type: ignore[misc]


class Backend(Protocol):
    """What the store needs from a key-value engine."""

    def read(self): ...  # context manager yielding a ReadView

    def has_many(self, table: str, keys: Iterable[bytes]) -> list[bool]: ...

    def write(self): ...  # context manager yielding a WriteBatch, applied on clean exit

    def sync(self) -> None: ...

    def disk_size(self) -> int: ...

    def close(self) -> None: ...


class _MemoryView:
    def __init__(self, tables: dict[str, dict[bytes, bytes]]):
        # Copy-on-read: a view must not change under its reader, like an LMDB read transaction.
        self._tables = {name: dict(t) for name, t in tables.items()}

    def get(self, table: str, key: bytes) -> bytes | None:
        return self._tables[table].get(key)

    def items(self, table: str, *, reverse: bool = False, prefix: bytes = b""):
        keys = sorted(k for k in self._tables[table] if k.startswith(prefix))
        if reverse:
            keys.reverse()
        for key in keys:
            yield key, self._tables[table][key]

    def count(self, table: str) -> int:
        return len(self._tables[table])


class MemoryBackend:
    """An in-memory backend with the same semantics as the LMDB one (for tests)."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[bytes, bytes]] = {name: {} for name in TABLES}
        self._lock = threading.Lock()

    @contextmanager
    def read(self):
        with self._lock:
            view = _MemoryView(self.tables)
        yield view

    def has_many(self, table: str, keys: Iterable[bytes]) -> list[bool]:
        with self._lock:
            t = self.tables[table]
            return [k in t for k in keys]

    @contextmanager
    def write(self):
        batch = WriteBatch(self.read)
        yield batch
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
        pass

    def disk_size(self) -> int:
        return sum(len(k) + len(v) for t in self.tables.values() for k, v in t.items())

    def close(self) -> None:
        pass
