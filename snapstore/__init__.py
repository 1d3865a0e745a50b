"""snapstore: a content-addressed checkpoint store for AI coding agents, without git.

    from snapstore import Store
    store = Store.open("myproject")          # Store.init("myproject") creates one
    cp = store.snapshot("edit app.py", metadata={"tool": "write_file"}, conversation=messages)
    data = store.read_bytes(cp.id, "src/app.py")

Every name in ``__all__`` is importable from here; the modules behind them are imported only
when a name is first used, so ``snapstore --help`` does not load lmdb, zstandard and friends.
"""

from __future__ import annotations

# No `typing` import at run time: this module is imported by the console script's thin client,
# where every millisecond of start-up counts (mypy treats TYPE_CHECKING as true: pyproject).
TYPE_CHECKING = False

__version__ = "0.1.0"

if TYPE_CHECKING:
    from typing import Any

    from snapstore.errors import (
        ConflictError,
        CorruptError,
        FormatVersionError,
        HookError,
        InternalError,
        Interrupted,
        LockedError,
        RefError,
        SnapstoreError,
        StoreExistsError,
        StoreNotFoundError,
        TreeIOError,
        UnsafePathError,
        UsageError,
    )
    from snapstore.facade.going_back import Rewind
    from snapstore.ops.diff import Change
    from snapstore.ops.edit import EditReport
    from snapstore.ops.gc import GcReport
    from snapstore.ops.history import Version
    from snapstore.ops.renames import Renamed
    from snapstore.ops.restore import RestoreReport
    from snapstore.ops.restore.recovery import RecoverReport
    from snapstore.ops.retention import PruneReport
    from snapstore.ops.stats import StoreStats
    from snapstore.ops.textdiff import LineCounts
    from snapstore.ops.upgrade import UpgradeReport
    from snapstore.ops.verify import Problem, VerifyReport
    from snapstore.records.checkpoint import Checkpoint
    from snapstore.records.manifest import Entry
    from snapstore.records.oplog import Operation
    from snapstore.store import Store

_LAZY = {
    "Store": "snapstore.store",
    "Rewind": "snapstore.facade.going_back",
    "Checkpoint": "snapstore.records.checkpoint",
    "Entry": "snapstore.records.manifest",
    "Operation": "snapstore.records.oplog",
    "Change": "snapstore.ops.diff",
    "GcReport": "snapstore.ops.gc",
    "UpgradeReport": "snapstore.ops.upgrade",
    "Version": "snapstore.ops.history",
    "RestoreReport": "snapstore.ops.restore",
    "PruneReport": "snapstore.ops.retention",
    "StoreStats": "snapstore.ops.stats",
    "Problem": "snapstore.ops.verify",
    "RecoverReport": "snapstore.ops.restore.recovery",
    "LineCounts": "snapstore.ops.textdiff",
    "Renamed": "snapstore.ops.renames",
    "EditReport": "snapstore.ops.edit",
    "VerifyReport": "snapstore.ops.verify",
}
_ERRORS = (
    "SnapstoreError",
    "UsageError",
    "StoreNotFoundError",
    "StoreExistsError",
    "RefError",
    "LockedError",
    "CorruptError",
    "FormatVersionError",
    "TreeIOError",
    "ConflictError",
    "UnsafePathError",
    "HookError",
    "InternalError",
    "Interrupted",
)
_LAZY.update({name: "snapstore.errors" for name in _ERRORS})

__all__ = [
    "Change",
    "Checkpoint",
    "ConflictError",
    "CorruptError",
    "EditReport",
    "Entry",
    "FormatVersionError",
    "GcReport",
    "UpgradeReport",
    "HookError",
    "InternalError",
    "Interrupted",
    "LineCounts",
    "LockedError",
    "Operation",
    "Problem",
    "PruneReport",
    "RecoverReport",
    "RefError",
    "Renamed",
    "RestoreReport",
    "Rewind",
    "SnapstoreError",
    "Store",
    "StoreExistsError",
    "StoreNotFoundError",
    "StoreStats",
    "TreeIOError",
    "UnsafePathError",
    "UsageError",
    "VerifyReport",
    "Version",
    "__version__",
]


def __getattr__(name: str) -> Any:
    # Lazy so that the CLI's start-up does not import lmdb, zstandard and friends for --help.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'snapstore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
