"""The operation log: every restore and undo, so that ``undo`` knows what to put back."""

from __future__ import annotations

import os
from dataclasses import dataclass

import msgpack

from snapstore.errors import CorruptError
from snapstore.records.checkpoint import key_seq


@dataclass(frozen=True)
class Operation:
    """One finished restore or undo."""

    seq: int
    kind: str  # "restore" | "undo"
    target: str  # the checkpoint the tree was made equal to
    before: str  # the checkpoint holding the tree as it was just before (what undo restores)
    paths: list[str] | None  # the paths it covered; None for the whole tree
    time_ns: int
    changed: int

    @classmethod
    def parse(cls, key: bytes, value: bytes) -> Operation:
        try:
            r = msgpack.unpackb(value, raw=False)
            paths = r.get("paths")
            return cls(
                seq=key_seq(key),
                kind=str(r["kind"]),
                target=bytes(r["target"]).hex(),
                before=bytes(r["before"]).hex(),
                paths=[os.fsdecode(p) for p in paths] if paths else None,
                time_ns=int(r["time_ns"]),
                changed=int(r.get("changed", 0)),
            )
        except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
            raise CorruptError(f"operation log entry {key_seq(key)} is damaged ({exc})") from exc

    def to_json(self) -> dict:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "target": self.target,
            "before": self.before,
            "paths": self.paths,
            "time_ns": self.time_ns,
            "changed": self.changed,
        }
