"""Checkpoint records: what a checkpoint is, how it is stored, and how it is listed.

A record is a msgpack map (keys below); its id is the BLAKE3-256 of the packed record, so a
record cannot be altered without changing its id.  It is written last, in the same LMDB
transaction as its log entry and tags: a checkpoint is either wholly there or not at all.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import msgpack

from snapstore.errors import CorruptError
from snapstore.records import schema
from snapstore.storage.backend import ReadView as View
from snapstore.storage.backend import WriteBatch
from snapstore.storage.objects import chunk_id

USER = "checkpoint"
SAFETY = "safety"  # recorded by restore before it changes the tree
KINDS = (USER, SAFETY)
#: The attribution labels a checkpoint's metadata ``actor`` may hold (see :attr:`Checkpoint.actor`).
ACTORS = ("agent", "user", "unknown")

SHORT = 12  # hex digits shown for an id


def seq_key(seq: int) -> bytes:
    return struct.pack(">Q", seq)


def key_seq(key: bytes) -> int:
    seq: int = struct.unpack(">Q", key)[0]
    return seq


#: meta key set once the ``tasks`` index lists every checkpoint that has a task.
TASK_INDEX_META = b"tasks-index"

#: Task names longer than this are indexed by their hash (LMDB keys are at most 511 bytes).
_TASK_KEY_MAX = 400


def task_prefix(task: str) -> bytes:
    """The key prefix of ``task``'s rows in the ``tasks`` index."""
    name = task.encode("utf-8", "surrogateescape")
    if len(name) > _TASK_KEY_MAX:
        name = b"\xff" + chunk_id(name)
    return struct.pack(">H", len(name)) + name


def task_key(task: str, seq: int) -> bytes:
    """The ``tasks`` index key of checkpoint number ``seq`` of ``task``."""
    return task_prefix(task) + seq_key(seq)


#: meta key set while the ``paths`` index lists every change of every checkpoint
#: (:mod:`snapstore.ops.pathlog`).
PATHS_INDEX_META = b"paths-index"


def path_prefix(path: bytes) -> bytes:
    """The key prefix of ``path``'s rows in the ``paths`` index."""
    return chunk_id(path)[:16]


def put_path_rows(batch: WriteBatch, seq: int, cp_id: bytes, paths: list[bytes]) -> None:
    """Index checkpoint number ``seq`` as one that changed each of ``paths``."""
    for path in paths:
        batch.put("paths", path_prefix(path) + seq_key(seq), cp_id)


def write_rows(
    batch: WriteBatch, cp_id: bytes, packed: bytes, seq: int, task: str | None, tags: list[str]
) -> None:
    """Put a new checkpoint's record, log entry, task index row and tags into ``batch``.

    The one place that writes them, so they always go into the same transaction.
    """
    batch.put("checkpoints", cp_id, packed)
    batch.put("log", seq_key(seq), cp_id)
    if task is not None:
        batch.put("tasks", task_key(task, seq), cp_id)
    for tag in tags:
        batch.put("tags", tag.encode(), cp_id)


def backfill_task_index(view: View, batch: WriteBatch) -> None:
    """Index every logged checkpoint's task (a store made before the index; run once)."""
    for key, cid in view.items("log"):
        packed = view.get("checkpoints", cid)
        if packed is None:
            continue
        try:
            task = parse_record(cid, packed).task
        except CorruptError:
            continue
        if task is not None:
            batch.put("tasks", task_key(task, key_seq(key)), cid)
    batch.put("meta", TASK_INDEX_META, b"1")


def next_seq(last_key: bytes | None) -> int:
    """The sequence number after the table's last key (``log``, ``oplog``): 1 for an empty one.

    The one rule for appending to a sequence-keyed table; callers pass the last key they read
    under the writer lock.
    """
    return key_seq(last_key) + 1 if last_key is not None else 1


class Checkpoint(NamedTuple):
    """One checkpoint: a manifest of the tree plus the agent's state at that moment.

    Immutable; ``cp._replace(tags=...)`` gives a changed copy.  (A NamedTuple, not a frozen
    dataclass: importing dataclasses costs every CLI process ~15 ms.)
    """

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

    @property
    def actor(self) -> str | None:
        """Who made the checkpoint's changes, from metadata ``actor``: ``"agent"``, ``"user"``,
        ``"unknown"`` (no event vouches for either), or None when it has no such label."""
        actor = self.metadata.get("actor")
        return actor if actor in ACTORS else None

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
            "actor": self.actor,
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
    """Decode and check a stored record: its hash, then every field against records.schema.

    A record that fails either check raises CorruptError ("damaged"); callers that list
    checkpoints leave it out, like a record whose hash does not match.
    """
    if chunk_id(packed) != cid:
        raise CorruptError(f"checkpoint {cid.hex()} is corrupt (its record does not match its id)")
    try:
        r = msgpack.unpackb(packed, raw=False)
        if not isinstance(r, dict) or r.get("v") != 1:
            raise ValueError("unknown record version")
        parent = schema.check_optional_id(r["parent"], "parent")
        kind = r["kind"]
        if kind not in KINDS:
            raise ValueError("unknown kind")
        return Checkpoint(
            id=cid.hex(),
            parent=parent.hex() if parent else None,
            time_ns=schema.check_time(r["time_ns"]),
            message=schema.check_text(r["message"], "message"),
            task=schema.check_optional_text(r["task"], "task"),
            tags=tuple(schema.check_texts(r["tags"], "tags")),
            kind=kind,
            manifest=schema.check_id(r["manifest"], "manifest"),
            conversation=schema.check_optional_id(r["conversation"], "conversation"),
            metadata=schema.check_json_map(r["metadata"], "metadata"),
            stats=schema.check_stats(r["stats"]),
            seq=seq,
        )
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"checkpoint {cid.hex()} has a damaged record ({exc})") from exc


def references(cid: bytes, packed: bytes) -> tuple[bytes, bytes | None]:
    """``(manifest id, conversation id or None)`` of a record whose hash matches, even when
    its other values are damaged: what ``gc`` must keep for it.

    CorruptError when the hash does not match or either reference is itself unreadable (then
    what the record reaches cannot be known).
    """
    if chunk_id(packed) != cid:
        raise CorruptError(f"checkpoint {cid.hex()} is corrupt (its record does not match its id)")
    try:
        r = msgpack.unpackb(packed, raw=False)
        if not isinstance(r, dict):
            raise ValueError("not a map")
        return (
            schema.check_id(r["manifest"], "manifest"),
            schema.check_optional_id(r.get("conversation"), "conversation"),
        )
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"checkpoint {cid.hex()} has a damaged record ({exc})") from exc


def load_log(view: View) -> tuple[list[Checkpoint], dict[str, str]]:
    """Every readable checkpoint in creation order (oldest first), and the damaged ones.

    The second value maps the id (hex) of each checkpoint the log names whose record is missing
    or damaged to the reason.  One bad record must not make every other checkpoint unreachable.
    """
    out = []
    damaged: dict[str, str] = {}
    for key, cid in view.items("log"):
        if len(cid) != schema.ID_BYTES:
            damaged[cid.hex()] = f"log entry {key_seq(key)} is damaged (not a checkpoint id)"
            continue
        packed = view.get("checkpoints", cid)
        if packed is None:
            damaged[cid.hex()] = f"checkpoint {cid.hex()} is missing"
            continue
        try:
            out.append(parse_record(cid, packed, key_seq(key)))
        except CorruptError as exc:
            damaged[cid.hex()] = str(exc)
    return out, damaged


def load_all(view: View) -> list[Checkpoint]:
    """Every readable checkpoint in creation order (oldest first); damaged ones left out
    (``verify`` reports them)."""
    return load_log(view)[0]


def damage_of(view: View, cid: bytes) -> str | None:
    """Why checkpoint ``cid`` cannot be read, or None when it reads or is not there at all
    (a deleted checkpoint is not a damaged one)."""
    if len(cid) != schema.ID_BYTES:
        return f"{cid.hex() or 'an empty value'} is not a checkpoint id (the reference is damaged)"
    if view.get("checkpoints", cid) is None:
        return None
    try:
        load_one(view, cid)
    except CorruptError as exc:
        return str(exc)
    return None


def load_one(view: View, cid: bytes) -> Checkpoint:
    """The checkpoint ``cid``; CorruptError when it is missing or damaged."""
    if len(cid) != schema.ID_BYTES:
        raise CorruptError(f"{cid.hex() or 'an empty value'} is not a checkpoint id")
    packed = view.get("checkpoints", cid)
    if packed is None:
        raise CorruptError(f"checkpoint {cid.hex()} is missing")
    return parse_record(cid, packed)


#: Parent links followed to decide whether a ref move is a fast-forward.
ANCESTRY_LIMIT = 100_000


def descends(view: View, head: bytes, old: bytes) -> bool:
    """Whether checkpoint ``old`` is ``head`` or one of its ancestors in this store (a damaged
    or missing record ends the walk: not known to descend)."""
    cur: bytes | None = head
    for _ in range(ANCESTRY_LIMIT):
        if cur is None:
            return False
        if cur == old:
            return True
        packed = view.get("checkpoints", cur)
        if packed is None:
            return False
        try:
            parent = parse_record(cur, packed).parent
        except CorruptError:
            return False
        cur = bytes.fromhex(parent) if parent else None
    return False
