"""Taking a snapshot: walk, read what changed, store new chunks, write the checkpoint last.

Data flow (see docs/packages/ops-snapshot.md); :func:`take` (:mod:`.pipeline`) runs one module per
phase::

    walk: the store's keys and parent; scan.walk ──> stat cache ──hit──> entry reuses its stream
          (with a watcher: the tree state kept since the last snapshot, patched: .incremental)
                       │miss
                       v
    read: readers (a pool, or this thread for one batch) ──> write: sinks, dedup, writer thread
                       │ (all chunks committed)
                       v
    encode: manifest + conversation;   counts: what changed against the parent
                       v
    commit: checkpoint + log + tags + stat cache + paths index in ONE transaction, then fsync.

(:func:`take_later` stops after the reads; the rest runs when its caller says: the record of
the tree a restore left, written after the service's answer.)

A snapshot killed at any moment leaves at most unreferenced chunks (garbage for gc), never a
checkpoint that points at something missing.  The stage is given a
:class:`~snapstore.ops.context.StageContext`, not the Store; it returns the checkpoint's id and
packed record (the Store turns them into a Checkpoint) with a :class:`.result.SnapshotResult`.

The public names are imported on first use: a diff or a dry-run restore imports
:mod:`.current_tree` (the tree's entries now, from the watcher's state) and :mod:`.incremental`
alone, not the whole stage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from snapstore.ops.snapshot.pipeline import take, take_later
    from snapstore.ops.snapshot.read import FileChanged, FileGone
    from snapstore.ops.snapshot.result import SnapshotResult

__all__ = ["FileChanged", "FileGone", "SnapshotResult", "take", "take_later"]

_HOME = {"take": "pipeline", "take_later": "pipeline", "FileChanged": "read", "FileGone": "read", "SnapshotResult": "result"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # (found directly from now on)
    return value
