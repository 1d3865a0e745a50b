"""What every part of the Store shares: its attributes, and loading and resolving records."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snapstore.ops.context import StageContext
from snapstore.records import manifest
from snapstore.records.checkpoint import Checkpoint, load_all
from snapstore.records.manifest import Entry

if TYPE_CHECKING:
    pass

from snapstore.hooks import HookRegistry
from snapstore.storage.backend import Backend


class StoreBase:
    """The Store's state (set by :class:`snapstore.store.Store`) and record lookup."""

    backend: Backend
    #: Absolute path of the working tree, and the same as bytes.
    root: str
    root_bytes: bytes
    #: The store directory (None for an in-memory store).
    store_dir: str | None
    compression_level: int
    #: Tree-relative paths never snapshotted or restored (the store itself when inside).
    excluded: frozenset[bytes]
    #: What the stages are given instead of the Store.
    context: StageContext
    hooks: HookRegistry
    _lock: Any

    def checkpoints(self, *, task: str | None = None, include_safety: bool = False) -> list[Checkpoint]:
        """Checkpoints newest first, as ``list`` shows them (safety ones only if asked)."""
        all_, _ = self._load()
        rows = list(reversed(all_))
        if not include_safety:
            rows = [c for c in rows if not c.is_safety]
        if task is not None:
            rows = [c for c in rows if c.task == task]
        return rows

    def resolve(self, ref: str, *, task: str | None = None) -> Checkpoint:
        """The checkpoint ``ref`` names (see :mod:`snapstore.records.refs`).

        Reads only the records the reference reaches (``latest~N`` reads N+1 of them, a tag or
        an id one), so resolving costs the same at 10 and at 10,000 checkpoints.
        """
        from snapstore.records.history import History

        with self.backend.read() as view:
            history = History(view)
            cp = history.resolve(ref, task)
            tags = history.tags_of({cp.id})
        return cp._replace(tags=tags.get(cp.id, ()))

    def _load(self) -> tuple[list[Checkpoint], dict[str, str]]:
        with self.backend.read() as view:
            all_ = load_all(view)
            tags = {k.decode("utf-8", "replace"): v.hex() for k, v in view.items("tags")}
        by_id: dict[str, list[str]] = {}
        for name, cid in tags.items():
            by_id.setdefault(cid, []).append(name)
        all_ = [c._replace(tags=tuple(sorted(by_id.get(c.id, ())))) for c in all_]
        return all_, tags

    def _manifest_dict(self, mid: bytes) -> dict[bytes, Entry]:
        with self.backend.read() as view:
            return manifest.load(view.get, mid)
