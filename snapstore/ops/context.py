"""What a pipeline stage is given: the narrow context, not the Store.

A stage (snapshot, restore, diff, gc, verify, ...) needs the backend, the tree's root, the paths
it must never touch and the compression level; some keep state across calls of one Store (the
manifest memo).  The Store builds one :class:`StageContext` and hands it to every stage, so a
stage cannot reach into the facade's private members and a test can build one without a Store.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from snapstore.storage.backend import Backend


@dataclass
class StageContext:
    """The backend, the tree and the settings a stage works with."""

    backend: Backend
    #: Absolute path of the working tree.
    root: str
    #: Tree-relative paths (``/``-separated bytes) that are never read or written (the store).
    excluded: frozenset[bytes] = frozenset()
    #: zstd level for new chunks.
    level: int = 3
    #: The store directory, or None for an in-memory store.
    store_dir: str | None = None
    #: Longest delta chain for new chunks (format 2; 0 turns deltas off).
    delta_depth: int = 10
    #: State a stage keeps across calls on one Store (e.g. the last manifest written).
    memo: dict[str, Any] = field(default_factory=dict)

    @property
    def root_bytes(self) -> bytes:
        return os.fsencode(self.root)
