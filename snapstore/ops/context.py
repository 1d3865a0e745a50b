"""What a pipeline stage is given: the narrow context, not the Store.

A stage (snapshot, restore, diff, gc, verify, ...) needs the backend, the tree's root, the paths
it must never touch and the compression level; some keep state across calls of one Store (the
manifest memo).  The Store builds one :class:`StageContext` and hands it to every stage, so a
stage cannot reach into the facade's private members and a test can build one without a Store.
"""

from __future__ import annotations

import os
from typing import Any

from snapstore.storage.backend import Backend


class StageContext:
    """The backend, the tree and the settings a stage works with."""

    # (A plain class, not a dataclass: importing dataclasses costs every CLI process ~15 ms.)
    __slots__ = ("backend", "root", "excluded", "level", "store_dir", "delta_depth", "memo")

    def __init__(
        self,
        backend: Backend,
        root: str,
        excluded: frozenset[bytes] = frozenset(),
        level: int = 3,
        store_dir: str | None = None,
        delta_depth: int = 10,
        memo: dict[str, Any] | None = None,
    ) -> None:
        self.backend = backend
        #: Absolute path of the working tree.
        self.root = root
        #: Tree-relative paths (``/``-separated bytes) never read or written (the store).
        self.excluded = excluded
        #: zstd level for new chunks.
        self.level = level
        #: The store directory, or None for an in-memory store.
        self.store_dir = store_dir
        #: Longest delta chain for new chunks (format 2; 0 turns deltas off).
        self.delta_depth = delta_depth
        #: State a stage keeps across calls on one Store (e.g. the last manifest written).
        self.memo: dict[str, Any] = memo if memo is not None else {}

    @property
    def root_bytes(self) -> bytes:
        return os.fsencode(self.root)
