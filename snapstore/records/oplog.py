"""The operation log: every restore and undo, so that ``undo`` knows what to put back."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

import msgpack

from snapstore.errors import CorruptError
from snapstore.records import schema
from snapstore.records.checkpoint import key_seq

KINDS = ("restore", "undo")


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
        """Decode and check one oplog entry; CorruptError ("damaged") when a field is bad."""
        try:
            r = msgpack.unpackb(value, raw=False)
            if not isinstance(r, dict):
                raise ValueError("not a map")
            kind = r["kind"]
            if kind not in KINDS:
                raise ValueError("unknown kind")
            paths = r.get("paths")
            if paths is not None and not (
                isinstance(paths, list) and all(isinstance(p, bytes) and p for p in paths)
            ):
                raise ValueError("bad paths")
            return cls(
                seq=key_seq(key),
                kind=kind,
                target=schema.check_id(r["target"], "target").hex(),
                before=schema.check_id(r["before"], "before").hex(),
                paths=[os.fsdecode(p) for p in paths] if paths else None,
                time_ns=schema.check_time(r["time_ns"]),
                changed=schema.check_count(r.get("changed", 0), "changed"),
            )
        except (KeyError, ValueError, TypeError, struct.error, msgpack.UnpackException) as exc:
            where = key_seq(key) if len(key) == 8 else key.hex()
            raise CorruptError(f"operation log entry {where} is damaged ({exc})") from exc

    def to_json(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "target": self.target,
            "before": self.before,
            "paths": self.paths,
            "time_ns": self.time_ns,
            "changed": self.changed,
        }
