"""Per-file history: the checkpoints in which one path changed, oldest first.

Consecutive checkpoints are compared through their manifests with
``diff.manifest_difference``, which skips the manifest chunks both share undecoded, so the cost
grows with what changed, not with the size of the tree times the number of checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

from snapstore.ops import diff, textdiff
from snapstore.records import manifest
from snapstore.records.checkpoint import Checkpoint
from snapstore.records.manifest import Entry
from snapstore.storage import objects


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

    def to_json(self) -> dict:
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
        }


def file_history(store, rel: bytes, checkpoints: list[Checkpoint]) -> list[Version]:
    """Versions of ``rel`` over ``checkpoints`` (oldest first)."""
    out: list[Version] = []
    with store.backend.read() as view:
        get = view.get
        prev_mid: bytes | None = None
        prev_entry: Entry | None = None
        for cp in checkpoints:
            if cp.manifest == prev_mid:
                continue
            if prev_mid is None:
                entry = _lookup(get, cp.manifest, rel)
            else:
                old, new = diff.manifest_difference(get, prev_mid, cp.manifest)
                entry = new.get(rel) if (rel in old or rel in new) else prev_entry
            prev_mid = cp.manifest
            before = {rel: prev_entry} if prev_entry is not None else {}
            after = {rel: entry} if entry is not None else {}
            for change in diff.compare(before, after):
                loader = lambda e, g=get: objects.read_stream(g, e.ref)  # noqa: E731
                change = diff.with_loaders([change], loader, loader)[0]
                added, removed, binary = textdiff.line_counts(change)
                out.append(Version(cp, change.status, entry, added, removed, binary))
            prev_entry = entry
    return out


def _lookup(get, mid: bytes, rel: bytes) -> Entry | None:
    for e in manifest.iter_entries(get, mid):
        if e.path == rel:
            return e
        if e.path > rel:
            return None
    return None

