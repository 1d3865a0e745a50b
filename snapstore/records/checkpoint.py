"""Checkpoint records: what a checkpoint is, how it is stored, and how it is listed.

A record is a msgpack map (keys below); its id is the BLAKE3-256 of the packed record, so a
record cannot be altered without changing its id.  It is written last, in the same LMDB
transaction as its log entry and tags: a checkpoint is either wholly there or not at all.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from snapstore.errors import CorruptError
from snapstore.storage.objects import chunk_id

USER = "checkpoint"
SAFETY = "safety"  # recorded by restore before it changes the tree

SHORT = 12  # hex digits shown for an id


def seq_key(seq: int) -> bytes:
    return struct.pack(">Q", seq)


def key_seq(key: bytes) -> int:
    return struct.unpack(">Q", key)[0]


def next_seq(last_key: bytes | None) -> int:
    """The sequence number after the table's last key (``log``, ``oplog``): 1 for an empty one.

    The one rule for appending to a sequence-keyed table; callers pass the last key they read
    under the writer lock.
    """
    return key_seq(last_key) + 1 if last_key is not None else 1


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint: a manifest of the tree plus the agent's state at that moment."""

    id: str
    parent: str | None
    time_ns: int
    message: str
    task: str | None
    tags: tuple[str, ...]
    kind: str
    manifest: bytes
    conversation: bytes | None
    metadata: dict[str, Any]
    stats: dict[str, Any]
    seq: int = 0
    #: Set on the checkpoint a snapshot returns: what the scan skipped, and whether
    #: ``skip_unchanged`` returned the parent instead of recording a new checkpoint.
    warnings: tuple[str, ...] = ()
    reused: bool = False

    @property
    def short_id(self) -> str:
        return self.id[:SHORT]

    @property
    def time(self) -> float:
        """Seconds since the epoch."""
        return self.time_ns / 1e9

    @property
    def is_safety(self) -> bool:
        return self.kind == SAFETY

    def iso_time(self) -> str:
        import datetime as _dt

        return _dt.datetime.fromtimestamp(self.time, _dt.timezone.utc).isoformat(
            timespec="milliseconds"
        )

    def to_json(self) -> dict[str, Any]:
        """The stable JSON form (documented in docs/cli.md)."""
        return {
            "id": self.id,
            "short_id": self.short_id,
            "parent": self.parent,
            "time": self.iso_time(),
            "timestamp": self.time,
            "message": self.message,
            "task": self.task,
            "tags": list(self.tags),
            "kind": self.kind,
            "metadata": self.metadata,
            "stats": self.stats,
            "has_conversation": self.conversation is not None,
        }


def build_record(
    *,
    parent: str | None,
    time_ns: int,
    message: str,
    task: str | None,
    tags: list[str],
    kind: str,
    manifest: bytes,
    conversation: bytes | None,
    metadata: dict[str, Any],
    stats: dict[str, Any],
) -> tuple[bytes, bytes]:
    """Pack a record; returns ``(id, packed)``."""
    record = {
        "v": 1,
        "parent": bytes.fromhex(parent) if parent else None,
        "time_ns": time_ns,
        "message": message,
        "task": task,
        "tags": list(tags),
        "kind": kind,
        "manifest": manifest,
        "conversation": conversation,
        "metadata": metadata,
        "stats": stats,
    }
    packed = msgpack.packb(record, use_bin_type=True)
    return chunk_id(packed), packed


def parse_record(cid: bytes, packed: bytes, seq: int = 0) -> Checkpoint:
    """Decode and check a stored record (its hash and its field types)."""
    if chunk_id(packed) != cid:
        raise CorruptError(f"checkpoint {cid.hex()} is corrupt (its record does not match its id)")
    try:
        r = msgpack.unpackb(packed, raw=False)
        if not isinstance(r, dict) or r.get("v") != 1:
            raise ValueError("unknown record version")
        parent = r["parent"]
        manifest = r["manifest"]
        conversation = r["conversation"]
        if not isinstance(manifest, bytes) or len(manifest) != 32:
            raise ValueError("bad manifest id")
        if conversation is not None and (not isinstance(conversation, bytes) or len(conversation) != 32):
            raise ValueError("bad conversation id")
        if parent is not None and (not isinstance(parent, bytes) or len(parent) != 32):
            raise ValueError("bad parent id")
        tags = r["tags"]
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ValueError("bad tags")
        metadata = r["metadata"] if isinstance(r["metadata"], dict) else {}
        stats = r["stats"] if isinstance(r["stats"], dict) else {}
        return Checkpoint(
            id=cid.hex(),
            parent=parent.hex() if parent else None,
            time_ns=int(r["time_ns"]),
            message=str(r["message"]),
            task=r["task"] if isinstance(r["task"], str) else None,
            tags=tuple(tags),
            kind=str(r["kind"]),
            manifest=manifest,
            conversation=conversation,
            metadata=metadata,
            stats=stats,
            seq=seq,
        )
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"checkpoint {cid.hex()} has a damaged record ({exc})") from exc


def load_all(view) -> list[Checkpoint]:
    """Every readable checkpoint in creation order (oldest first).

    A missing or damaged record is left out (``verify`` reports it): one bad record must not
    make every other checkpoint unreachable.
    """
    out = []
    for key, cid in view.items("log"):
        packed = view.get("checkpoints", cid)
        if packed is None:
            continue
        try:
            out.append(parse_record(cid, packed, key_seq(key)))
        except CorruptError:
            continue
    return out


def load_one(view, cid: bytes) -> Checkpoint:
    packed = view.get("checkpoints", cid)
    if packed is None:
        raise CorruptError(f"checkpoint {cid.hex()} is missing")
    return parse_record(cid, packed)
