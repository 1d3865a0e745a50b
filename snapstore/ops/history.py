"""Per-file history: the checkpoints in which one path changed, oldest first.

Consecutive checkpoints are compared through their manifests with
``diff.manifest_difference``, which skips the manifest chunks both share undecoded, so the cost
grows with what changed, not with the size of the tree times the number of checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from snapstore.ops import diff, textdiff
from snapstore.records import manifest
from snapstore.records.checkpoint import Checkpoint
from snapstore.records.manifest import Entry
from snapstore.storage import objects
from snapstore.storage.backend import ReadView

Getter = Callable[[str, bytes], "bytes | None"]


class _Reader(Protocol):
    def read(self) -> AbstractContextManager[ReadView]: ...


class _HasBackend(Protocol):
    """What file_history needs of the Store: a backend to read from."""

    @property
    def backend(self) -> _Reader: ...


@dataclass
class Version:
    """One change of a path: the checkpoint, what happened, and the entry after it (None when
    the path was deleted there)."""

    checkpoint: Checkpoint
    status: str  # A, M, D, T, X (as in diff)
    entry: Entry | None
    added: int = 0
    removed: int = 0
    binary: bool = False
    #: The size (bytes) of a version too large to count lines of (textdiff.MAX_COUNT_BYTES).
    not_counted: int = 0

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {
            "checkpoint": self.checkpoint.to_json(),
            "status": self.status,
            "kind": manifest.KIND_NAMES[e.kind] if e else None,
            "size": e.size if e else None,
            "content": e.ref.hex() if e is not None and e.is_file else None,
            "added": self.added,
            "removed": self.removed,
            "binary": self.binary,
            "not_counted": self.not_counted or None,
        }


def file_history(store: _HasBackend, rel: bytes, checkpoints: list[Checkpoint]) -> list[Version]:
    """Versions of ``rel`` over ``checkpoints`` (oldest first)."""
    out: list[Version] = []
    with store.backend.read() as view:
        get = view.get

        def load(e: Entry) -> bytes:
            return objects.read_stream(get, e.ref)

        prev_mid: bytes | None = None
        prev_entry: Entry | None = None
        for cp in checkpoints:
            if cp.manifest == prev_mid:
                continue
            if prev_mid is None:
                entry = entry_at(get, cp.manifest, rel)
            else:
                old, new = diff.manifest_difference(get, prev_mid, cp.manifest)
                entry = new.get(rel) if (rel in old or rel in new) else prev_entry
            prev_mid = cp.manifest
            before = {rel: prev_entry} if prev_entry is not None else {}
            after = {rel: entry} if entry is not None else {}
            for change in diff.with_loaders(diff.compare(before, after), load, load):
                n = textdiff.count(change)
                out.append(Version(cp, change.status, entry, *n))
            prev_entry = entry
    return out


def newest_versions(
    get: Getter, rel: bytes, newest_first: Iterable[Checkpoint], limit: int
) -> list[Version]:
    """The newest ``limit`` versions of ``rel`` (oldest first), walking history backwards.

    Costs what it reads: it stops at the checkpoint before the oldest version it returns, so
    ``log PATH --limit N`` of a path edited recently reads a few records at any history length.
    The same versions as the last ``limit`` of :func:`file_history` over the same checkpoints.
    """
    found: list[Version] = []

    def load(e: Entry) -> bytes:
        return objects.read_stream(get, e.ref)

    def record(cp: Checkpoint, before: Entry | None, after: Entry | None) -> None:
        old = {rel: before} if before is not None else {}
        new = {rel: after} if after is not None else {}
        for change in diff.with_loaders(diff.compare(old, new), load, load):
            found.append(Version(cp, change.status, after, *textdiff.count(change)))

    newer: Checkpoint | None = None
    for cp in newest_first:
        if len(found) >= limit:
            break
        if newer is None or cp.manifest == newer.manifest:
            newer = cp  # a run of equal manifests: the change belongs to its oldest checkpoint
            continue
        old, new = diff.manifest_difference(get, cp.manifest, newer.manifest)
        if rel in old or rel in new:
            record(newer, old.get(rel), new.get(rel))
        newer = cp
    else:
        if newer is not None and len(found) < limit:  # the oldest checkpoint: present there is "A"
            first = entry_at(get, newer.manifest, rel)
            if first is not None:
                record(newer, None, first)
    found.reverse()
    return found


def entry_at(get: Getter, mid: bytes, rel: bytes) -> Entry | None:
    """The entry of ``rel`` in manifest ``mid`` (None when absent), decoding only up to it."""
    for e in manifest.iter_entries(get, mid):
        if e.path == rel:
            return e
        if e.path > rel:
            return None
    return None

