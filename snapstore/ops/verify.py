"""Verify: read everything, re-hash everything, resolve every reference, report every problem.

Like ``restic check --read-data``: each stored chunk is decompressed and its BLAKE3 compared to
its key; each stream's index tree is walked and its sizes checked; each checkpoint's record,
manifest, conversation and every file entry's content are resolved.  A problem does not stop the
run: all of them are collected as :class:`Problem` records, with the files and checkpoints they
damage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from snapstore.errors import CorruptError, UnsafePathError
from snapstore.ops.restore import journal
from snapstore.ops.restore.safety import check_manifest
from snapstore.records import manifest
from snapstore.records.checkpoint import Checkpoint, key_seq, parse_record, task_prefix
from snapstore.records.oplog import Operation
from snapstore.storage import entries, objects
from snapstore.storage.backend import JOURNAL_KEY, Backend, ReadView
from snapstore.storage.objects import Getter
from snapstore.tree.paths import display

if TYPE_CHECKING:
    from snapstore.records.conversation_check import Checker


@dataclass
class Problem:
    """One thing wrong with the store."""

    kind: str  # chunk | pack | tasks | stream | manifest | conversation | checkpoint | file | log | tag | oplog | journal
    id: str  # the object's id (hex) or key
    message: str
    checkpoint: str | None = None
    path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        where = ""
        if self.checkpoint:
            where += f" in checkpoint {self.checkpoint[:12]}"
        if self.path:
            where = f" {self.path}" + where
        return f"{self.kind}{where}: {self.message}"


@dataclass
class VerifyReport:
    """What verify read and what it found."""

    chunks: int = 0
    packs: int = 0
    streams: int = 0
    checkpoints: int = 0
    files: int = 0
    bytes_read: int = 0
    problems: list[Problem] = field(default_factory=list)
    #: Chunks a stream names that the store does not hold at all.
    missing: set[bytes] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "chunks": self.chunks,
            "packs": self.packs,
            "streams": self.streams,
            "checkpoints": self.checkpoints,
            "files": self.files,
            "bytes_read": self.bytes_read,
            "problems": [p.to_json() for p in self.problems],
            "missing_chunks": sorted(c.hex() for c in self.missing),
        }


Progress = Callable[[int, int], None]


def run(
    backend: Backend, progress: Progress | None = None, excluded: frozenset[bytes] = frozenset()
) -> VerifyReport:
    """Read and check everything in the store; every problem found is in the report.

    ``excluded``: the tree-relative paths of the store itself (no manifest may name them).
    """
    report = VerifyReport()
    with backend.read() as view:
        get = view.get
        sizes = _check_chunks(view, report, progress)
        stream_ok: dict[bytes, str | None] = {}
        walked: dict[bytes, int] = {}

        def check_stream(sid: bytes) -> str | None:
            """None when stream ``sid`` is whole, else what is wrong with it."""
            if sid in stream_ok:
                return stream_ok[sid]
            error = _stream_problem(get, sid, sizes, walked, report.missing)
            stream_ok[sid] = error
            return error

        def length(sid: bytes) -> int | None:
            """The size of a whole stream (its record's, or its one chunk's)."""
            size = objects.stream_size(get, sid)
            return sizes.get(sid) if size is None else size

        for sid, _ in view.items("streams"):
            report.streams += 1
            error = check_stream(sid)
            if error:
                report.problems.append(Problem("stream", sid.hex(), error))

        by_id = {}
        conversations: dict[bytes, list[str]] = {}
        for cid, packed in view.items("checkpoints"):
            report.checkpoints += 1
            try:
                cp = parse_record(cid, packed)
            except CorruptError as exc:
                report.problems.append(Problem("checkpoint", cid.hex(), str(exc)))
                continue
            by_id[cp.id] = cp
            _check_checkpoint(get, cp, check_stream, length, report, excluded, conversations)
        _check_conversations(get, conversations, report)

        for key, cid in view.items("log"):
            if cid.hex() not in by_id:
                report.problems.append(
                    Problem("log", str(key_seq(key)), f"names missing checkpoint {cid.hex()}")
                )
        for name, cid in view.items("tags"):
            if cid.hex() not in by_id:
                report.problems.append(
                    Problem("tag", name.decode("utf-8", "replace"), f"names missing checkpoint {cid.hex()}")
                )
        for key, cid in view.items("tasks"):
            named = by_id.get(cid.hex())
            if named is None or named.task is None or not key.startswith(task_prefix(named.task)):
                report.problems.append(
                    Problem("tasks", key.hex(), f"task index row names {cid.hex()}, which is not a checkpoint of that task")
                )
        logged = {key_seq(key): cid for key, cid in view.items("log")}
        for key, cid in view.items("paths"):
            if len(key) != 24 or logged.get(key_seq(key[16:])) != cid:
                report.problems.append(
                    Problem("paths", key.hex(), f"path index row names {cid.hex()}, which is not the checkpoint logged there")
                )
        _check_oplog(view, report)
        _check_journal(view, report)
        # A missing parent is not a problem: `prune` and `delete` remove checkpoints, and the
        # parent link is history only (nothing is read through it).
    return report


def _check_chunks(view: ReadView, report: VerifyReport, progress: Progress | None) -> dict[bytes, int]:
    """Re-hash every chunk; returns the plain size of each good one.

    Format-1 values are decoded one by one.  Format-2 entries are grouped by pack, so each pack
    is read once and each solid frame decompressed once, bypassing the frame cache (it could
    hold a frame read before the store was damaged).
    """
    total = view.count("chunks")
    sizes: dict[bytes, int] = {}
    by_pack: dict[bytes, list[tuple[bytes, entries.PackEntry]]] = {}
    for i, (cid, value) in enumerate(view.items("chunks")):
        report.chunks += 1
        if progress and (i & 255) == 0:
            progress(i, total)
        try:
            if entries.is_entry(value):
                e = entries.parse(cid, value)
                by_pack.setdefault(e.pack, []).append((cid, e))
                continue
            report.bytes_read += len(value)
            sizes[cid] = len(objects.decode_chunk(cid, value))
        except CorruptError as exc:
            report.problems.append(Problem("chunk", cid.hex(), str(exc)))
    entries.clear_cache()
    for pid, members in by_pack.items():
        pack = view.get("packs", pid)
        if pack is not None:
            report.packs += 1
            report.bytes_read += len(pack)
            if objects.pack_id(pack) != pid:
                report.problems.append(
                    Problem("pack", pid.hex(), "is damaged (its bytes do not match its id)")
                )
        for cid, data in _pack_members(view.get, cid_entries=members, pack=pack):
            if isinstance(data, CorruptError):
                report.problems.append(Problem("chunk", cid.hex(), str(data)))
            else:
                sizes[cid] = len(data)
    entries.clear_cache()
    if progress:
        progress(total, total)
    return sizes


def _pack_members(
    get: Getter, *, cid_entries: list[tuple[bytes, entries.PackEntry]], pack: bytes | None
) -> Iterator[tuple[bytes, bytes | CorruptError]]:
    """Each chunk of one pack, read and re-hashed, or the reason it cannot be."""
    frames: dict[tuple[int, int], bytes | CorruptError] = {}
    for cid, e in sorted(cid_entries, key=lambda ce: (ce[1].frame_off, ce[1].offset)):
        try:
            if e.codec == entries.CODEC_DELTA:
                # Through the store: the base may live in any pack, and its chain is checked.
                yield cid, objects.load_chunk(get, cid, max_size=e.size)
                continue
            key = (e.frame_off, e.frame_len)
            first = key not in frames
            if first:
                try:
                    frame = entries.frame_bytes(cid, e, pack)
                    frames[key] = entries.inflate(cid, frame, entries.MAX_FRAME_BYTES)
                except CorruptError as exc:
                    frames[key] = exc
            plain = frames[key]
            if isinstance(plain, CorruptError):
                # (each chunk of a damaged frame is its own line, named by its own id)
                raise plain if first else CorruptError(f"chunk {cid.hex()} shares a damaged frame: {plain}")
            data = entries.slice_chunk(cid, e, plain)
            if objects.chunk_id(data) != cid:
                raise CorruptError(f"chunk {cid.hex()} is corrupt (its content does not match its hash)")
            yield cid, data
        except CorruptError as exc:
            yield cid, exc


def _stream_problem(
    get: Getter, sid: bytes, sizes: dict[bytes, int], walked: dict[bytes, int], missing: set[bytes]
) -> str | None:
    """Resolve a stream through good chunks only (``sizes`` holds the verified ones); a chunk
    the store does not hold goes to ``missing`` too.

    ``walked`` is shared by every stream of the run: an index node shared by many streams (or
    repeated inside one, as in a hostile DAG) is checked once.
    """
    index: bytes | None = None  # (the walk loads an index node right after yielding it)
    try:
        for cid, size, height in objects.walk_stream(get, sid, walked=walked):
            if height:
                index = cid
                continue
            if cid not in sizes:
                if get("chunks", cid) is None:
                    missing.add(cid)
                    return f"chunk {cid.hex()} is missing"
                return f"chunk {cid.hex()} is damaged"
            if size >= 0 and sizes[cid] != size:
                return f"chunk {cid.hex()} has {sizes[cid]} bytes, its index says {size}"
    except CorruptError as exc:
        if index is not None and get("chunks", index) is None:
            missing.add(index)  # (an index node the store lacks: repair can store it again)
        return str(exc)
    return None


def _check_checkpoint(
    get: Getter,
    cp: Checkpoint,
    check_stream: Callable[[bytes], str | None],
    length: Callable[[bytes], int | None],
    report: VerifyReport,
    excluded: frozenset[bytes],
    conversations: dict[bytes, list[str]],
) -> None:
    """Check ``cp``'s manifest and files; its conversation goes into ``conversations`` (id ->
    the checkpoints that hold it), checked after all of them (:func:`_check_conversations`)."""
    error = check_stream(cp.manifest)
    if error:
        report.problems.append(Problem("manifest", cp.manifest.hex(), error, checkpoint=cp.id))
        return
    try:
        entries = list(manifest.iter_entries_of_chunks(cp.manifest, manifest.named_chunks(get, cp.manifest)))
    except CorruptError as exc:
        report.problems.append(Problem("manifest", cp.manifest.hex(), str(exc), checkpoint=cp.id))
        return
    try:
        # The rules every restore applies before its first write (absolute paths, '..', empty
        # parts, NUL, '.git', a path below a file or symlink of the same manifest, the store).
        check_manifest({e.path: e for e in entries}, excluded)
    except UnsafePathError as exc:
        report.problems.append(Problem("manifest", cp.manifest.hex(), str(exc), checkpoint=cp.id))
    for e in entries:
        if not e.is_file:
            continue
        report.files += 1
        error = check_stream(e.ref)
        if error is None and length(e.ref) not in (None, e.size):
            # A stream can describe far more bytes than it stores (a repeated index node):
            # the entry's own size is what a restore of it may write.
            error = f"its stream holds {length(e.ref)} bytes, the entry says {e.size}"
        if error:
            report.problems.append(
                Problem("file", e.ref.hex(), error, checkpoint=cp.id, path=display(e.path))
            )
    if cp.conversation is not None:
        conversations.setdefault(cp.conversation, []).append(cp.id)


def _check_conversations(
    get: Getter, conversations: dict[bytes, list[str]], report: VerifyReport, checker: Checker | None = None
) -> None:
    """Each conversation against its id, by growing length, so that each check reads only what
    its conversation added to one checked before it (a session's checkpoints share a prefix)."""
    from snapstore.records.conversation_check import Checker, order

    checker = checker or Checker(get)
    for cid in order(get, conversations):
        try:
            checker.check(cid)
        except CorruptError as exc:
            for cp_id in conversations[cid]:
                report.problems.append(Problem("conversation", cid.hex(), str(exc), checkpoint=cp_id))


_OP_KINDS = ("restore", "undo")


def _check_oplog(view: ReadView, report: VerifyReport) -> None:
    """Each operation-log entry must parse as ``undo``/``oplog``/``prune`` read it."""
    for key, value in view.items("oplog"):
        where = str(key_seq(key)) if len(key) == 8 else key.hex()
        try:
            op = Operation.parse(key, value)
            fields = msgpack.unpackb(value, raw=False)
            for name in ("target", "before"):
                if not isinstance(fields.get(name), bytes) or len(fields[name]) != 32:
                    raise CorruptError(f"operation log entry {where} has no valid {name!r} id")
            if op.kind not in _OP_KINDS:
                raise CorruptError(f"operation log entry {where} has an unknown kind {op.kind!r}")
            if not 0 <= op.time_ns < 1 << 63 or not 0 <= op.changed < 1 << 63:
                raise CorruptError(f"operation log entry {where} has an impossible time or count")
        except CorruptError as exc:
            report.problems.append(Problem("oplog", where, str(exc)))
        except (ValueError, TypeError, AttributeError, KeyError, msgpack.UnpackException) as exc:
            report.problems.append(Problem("oplog", where, f"operation log entry is damaged ({exc!r})"))


def _check_journal(view: ReadView, report: VerifyReport) -> None:
    """A pending restore journal must parse as crash recovery reads it."""
    value = view.get("journal", JOURNAL_KEY)
    if value is None:
        return
    try:
        journal.parse(value)  # exactly what recovery reads: every field validated
    except CorruptError as exc:
        report.problems.append(Problem("journal", JOURNAL_KEY.decode(), str(exc)))


def checkpoint_problems(
    view: ReadView, cid: bytes, packed: bytes, excluded: frozenset[bytes], checker: Checker | None = None
) -> list[Problem]:
    """What :func:`run` reports of checkpoint ``cid`` alone: its record, its manifest (the
    path rules every restore applies), every file's stream and size, its conversation.

    For a record that comes from outside (a fetch keeps it only if this is empty).  ``checker``
    (one per ``view``) carries what earlier calls checked of their conversations.  Its chunks
    are taken as sound where they are stored: whoever stored them checked each against its id.
    """
    report = VerifyReport()
    try:
        cp = parse_record(cid, packed)
    except CorruptError as exc:
        return [Problem("checkpoint", cid.hex(), str(exc))]
    sizes = _StoredSizes(view.get)
    walked: dict[bytes, int] = {}

    def check_stream(sid: bytes) -> str | None:
        return _stream_problem(view.get, sid, sizes, walked, report.missing)  # type: ignore[arg-type]

    def length(sid: bytes) -> int | None:
        size = objects.stream_size(view.get, sid)
        return sizes.get(sid) if size is None else size

    conversations: dict[bytes, list[str]] = {}
    _check_checkpoint(view.get, cp, check_stream, length, report, excluded, conversations)
    _check_conversations(view.get, conversations, report, checker)
    return report.problems


class _StoredSizes:
    """The plain size of each stored chunk, read from its entry (or its value) on demand: the
    ``sizes`` of :func:`_stream_problem` without re-reading every chunk."""

    def __init__(self, get: Getter) -> None:
        self._get = get
        self._known: dict[bytes, int | None] = {}

    def get(self, cid: bytes, default: int | None = None) -> int | None:
        if cid not in self._known:
            value = self._get("chunks", cid)
            try:
                if value is None:
                    self._known[cid] = None
                elif entries.is_entry(value):
                    self._known[cid] = entries.parse(cid, value).size
                else:
                    self._known[cid] = len(objects.decode_chunk(cid, value))
            except CorruptError:
                self._known[cid] = None
        size = self._known[cid]
        return default if size is None else size

    def __contains__(self, cid: object) -> bool:
        return isinstance(cid, bytes) and self.get(cid) is not None

    def __getitem__(self, cid: bytes) -> int:
        size = self.get(cid)
        if size is None:
            raise KeyError(cid)
        return size
