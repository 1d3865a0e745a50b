"""snapstore: a content-addressed checkpoint store for AI coding agents, without git.

    from snapstore import Store
    store = Store.open("myproject")          # Store.init("myproject") creates one
    cp = store.snapshot("edit app.py", metadata={"tool": "write_file"}, conversation=messages)
    data = store.read_bytes(cp.id, "src/app.py")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["Store", "Checkpoint", "Entry", "Change", "SnapstoreError", "__version__"]

if TYPE_CHECKING:
    from .checkpoint import Checkpoint
    from .diff import Change
    from .errors import SnapstoreError
    from .manifest import Entry
    from .store import Store

_LAZY = {
    "Store": ".store",
    "Checkpoint": ".checkpoint",
    "Entry": ".manifest",
    "Change": ".diff",
    "SnapstoreError": ".errors",
}


def __getattr__(name: str) -> Any:
    # Lazy so that the CLI's start-up does not import lmdb, zstandard and friends for --help.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'snapstore' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)
