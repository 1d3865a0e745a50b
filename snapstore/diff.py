"""Comparing two manifests: what was added, modified, deleted, or changed kind or mode."""

from __future__ import annotations

from dataclasses import dataclass

from .manifest import DIR, EXEC, FILE, KIND_NAMES, UNREADABLE, Entry
from .paths import display, to_json

ADDED = "A"
MODIFIED = "M"
DELETED = "D"
TYPE_CHANGED = "T"
MODE_CHANGED = "X"  # exec bit flipped, content unchanged


@dataclass(frozen=True)
class Change:
    """One path that differs; ``old``/``new`` are the entries on each side (None if absent)."""

    status: str
    path: bytes
    old: Entry | None
    new: Entry | None

    @property
    def display_path(self) -> str:
        return display(self.path)

    def to_json(self) -> dict:
        def side(e: Entry | None):
            if e is None:
                return None
            return {
                "kind": KIND_NAMES[e.kind],
                "size": e.size,
                "mode": e.mode,
                "content": e.ref.hex() if e.is_file else None,
                "target": to_json(e.ref) if e.kind not in (FILE, EXEC, DIR, UNREADABLE) else None,
            }

        return {"status": self.status, "path": to_json(self.path), "old": side(self.old), "new": side(self.new)}


def compare(old: dict[bytes, Entry], new: dict[bytes, Entry]) -> list[Change]:
    """Changes from ``old`` to ``new``, sorted by path.  Unreadable entries never differ."""
    changes = []
    for path in sorted(old.keys() | new.keys()):
        a, b = old.get(path), new.get(path)
        if a is not None and b is not None:
            if a.kind == UNREADABLE or b.kind == UNREADABLE:
                continue
            if a.kind == b.kind:
                if a.ref != b.ref:
                    changes.append(Change(MODIFIED, path, a, b))
            elif a.is_file and b.is_file:
                status = MODE_CHANGED if a.ref == b.ref else MODIFIED
                changes.append(Change(status, path, a, b))
            else:
                changes.append(Change(TYPE_CHANGED, path, a, b))
        elif a is None:
            changes.append(Change(ADDED, path, None, b))
        else:
            changes.append(Change(DELETED, path, a, None))
    return changes
