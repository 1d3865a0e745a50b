"""The key-value layer under the store: the narrow protocol every stage goes through.

Everything snapstore keeps is a key-value pair in one of a few named tables (see
docs/format.md).  Stages talk to a :class:`Backend`; :class:`~snapstore.storage.lmdb_backend.
LmdbBackend` is the real one, :class:`~snapstore.storage.memory.MemoryBackend` serves tests that
want no disk.  Both run through the one suite in tests/test_backend.py.

Writes are collected in a :class:`WriteBatch` and applied in one atomic transaction when the
``with backend.write() as batch`` block exits without an exception; an exception discards the
whole batch.  Keeping the batch in Python until commit keeps the real write transaction short
(other processes' writers wait less) and lets the LMDB backend retry it after growing the map.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Protocol

TABLES = (
    "meta",  # format version, tree root, chunker parameters
    "chunks",  # chunk id -> flag byte + payload (format 1) or a pack entry (format 2)
    "packs",  # pack id (16 bytes) -> concatenated frames (format 2)
    "streams",  # stream id -> [size, height, root id] for streams of more than one chunk
    "checkpoints",  # checkpoint id -> record
    "log",  # 8-byte big-endian sequence -> checkpoint id (creation order)
    "tags",  # tag name -> checkpoint id
    "tasks",  # task name (length-prefixed) + 8-byte sequence -> checkpoint id
    "paths",  # BLAKE3(path)[:16] + 8-byte sequence -> id of a checkpoint that changed the path
    "statcache",  # path -> stat fields + stream id (an optimisation only)
    "conversations",  # conversation id -> {base, count, depth, total, chunks}
    "journal",  # restore in progress (crash recovery)
    "oplog",  # 8-byte sequence -> restore/undo operation record
    "requests",  # service request id -> what the request did (records.requests)
    "remotes",  # remotes: their settings and what is known to be on them (snapstore.remote.state)
)

#: Tables keyed by the hash of what the value holds (a pack's bytes, a chunk's or a stream's or a
#: conversation's content): the same id written again can be the same bytes rebuilt.
CONTENT_TABLES = frozenset({"chunks", "packs", "streams", "conversations"})

#: The key of the journal entry of a restore in progress (table ``journal``).
JOURNAL_KEY = b"current"

#: Prefix of the store's configuration keys in the meta table (ops.retention owns the keys).
CONFIG_PREFIX = b"config:"


class _Deleted:
    """The marker of a pending delete in a :class:`WriteBatch`."""


_DELETED = _Deleted()


class ReadView(Protocol):
    """A consistent read-only view of all tables (one LMDB read transaction)."""

    def get(self, table: str, key: bytes) -> bytes | None:
        """The value of ``key`` in ``table``, or None."""
        ...

    def items(
        self, table: str, *, reverse: bool = False, prefix: bytes = b""
    ) -> Iterator[tuple[bytes, bytes]]:
        """Key-value pairs of ``table`` in key order (or reversed), optionally under ``prefix``."""
        ...

    def count(self, table: str) -> int:
        """The number of records in ``table``."""
        ...


class WriteBatch:
    """Puts and deletes to apply atomically; reads see the batch's own writes first."""

    def __init__(self, view_factory: Callable[[], AbstractContextManager[ReadView]]) -> None:
        self._ops: dict[str, dict[bytes, bytes | _Deleted]] = {}
        self._new: dict[str, set[bytes]] = {}
        self._view_factory = view_factory
        #: After commit: bytes of values newly inserted by :meth:`put_new`.
        self.inserted_bytes = 0

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value`` (replacing any value)."""
        self._ops.setdefault(table, {})[key] = value
        self._new.get(table, set()).discard(key)

    def put_new(self, table: str, key: bytes, value: bytes) -> None:
        """Set ``key`` only if it has no value yet (content-addressed objects are immutable)."""
        ops = self._ops.setdefault(table, {})
        if key in ops:
            return
        ops[key] = value
        self._new.setdefault(table, set()).add(key)

    def delete(self, table: str, key: bytes) -> None:
        """Remove ``key`` (nothing happens if it has no value).

        In a :data:`CONTENT_TABLES` table a key this batch has written is kept: its id is its
        content, so what is written is exactly what the delete meant to remove rebuilt (a
        repaired pack byte-identical to the damaged one; ``verify --repair`` lost sound files
        when the delete won).  A delete never removes what the same batch stores.
        """
        ops = self._ops.setdefault(table, {})
        if table in CONTENT_TABLES and key in ops and not isinstance(ops[key], _Deleted):
            return
        ops[key] = _DELETED
        self._new.get(table, set()).discard(key)

    def get(self, table: str, key: bytes) -> bytes | None:
        """The value ``key`` will have after this batch (pending writes first, then the store)."""
        ops = self._ops.get(table)
        if ops is not None and key in ops:
            value = ops[key]
            return None if isinstance(value, _Deleted) else value
        with self._view_factory() as view:
            return view.get(table, key)

    def reading(self) -> AbstractContextManager[ReadView]:
        """A read view of the store as it is before this batch."""
        return self._view_factory()

    def __len__(self) -> int:
        return sum(len(ops) for ops in self._ops.values())

    def operations(self) -> Iterator[tuple[str, bytes, bytes | None, bool]]:
        """Yield ``(table, key, value or None for delete, only_if_new)``."""
        for table, ops in self._ops.items():
            new = self._new.get(table, set())
            for key, value in ops.items():
                yield table, key, (None if isinstance(value, _Deleted) else value), key in new


class Backend(Protocol):
    """What the stages need from a key-value engine (both backends implement all of it)."""

    #: Called with every non-empty batch just before it is applied, in its transaction (the
    #: service stamps the request it runs: records.requests.stamp); None almost always.
    stamp: Callable[[WriteBatch], None] | None

    def read(self) -> AbstractContextManager[ReadView]:
        """A consistent view of every table for the duration of the ``with`` block."""
        ...

    def write(self) -> AbstractContextManager[WriteBatch]:
        """A batch applied atomically when the ``with`` block exits cleanly, else discarded."""
        ...

    def has_many(self, table: str, keys: Iterable[bytes]) -> list[bool]:
        """For each key, whether ``table`` holds it (one read transaction)."""
        ...

    def value_sizes(self, table: str) -> Iterator[tuple[bytes, int, bytes]]:
        """``(key, stored value length, first 32 bytes)`` of every record, without copying values."""
        ...

    def table_pages(self, table: str) -> int:
        """Bytes of the pages ``table`` takes in the store file (its keys and values for memory)."""
        ...

    def sync(self) -> None:
        """An operation's writes are done: make them durable as the store's durability setting
        says (see :mod:`snapstore.storage.lmdb_durability`)."""
        ...

    def barrier(self) -> None:
        """Make every committed write durable now, whatever the durability setting."""
        ...

    def disk_size(self) -> int:
        """Bytes the store takes on disk (its data file; an estimate for memory)."""
        ...

    def release_memory(self, trim_heap: bool = False) -> None:
        """Drop mappings the process no longer needs (an optimisation; may do nothing)."""
        ...

    def compact(self) -> tuple[int, int] | None:
        """Rewrite the store without free space: ``(size before, after)``, None if nothing to do.

        The caller holds the store's writer lock.
        """
        ...

    def refresh(self) -> bool:
        """Pick up a store file replaced by another process's compaction; True if it did.

        Called right after the writer lock is taken, so no write reaches a replaced file.
        """
        ...

    def close(self) -> None:
        """Release the backend (idempotent)."""
        ...
