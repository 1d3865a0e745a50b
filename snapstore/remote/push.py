"""Push: publish checkpoints on a remote, wholly or not at all, without a lock.

1. The closure of the checkpoints pushed (:mod:`snapstore.remote.closure`), less what this
   store knows the remote holds (``remotes`` rows written by earlier pushes and fetches).
2. **Fresh packs** of exactly those chunks and records, never local packs copied verbatim
   (they may hold chunks of pruned or never-pushed checkpoints).  Each is written create-only
   under its BLAKE3-256; 412 means it is already there.  A push whose new data compresses to
   at most :data:`layout.INLINE_MAX` sends it inside its bundle instead (no pack request).
3. The **bundle**, create-only under a key of its own (namespace, time, writer, hash): the
   commit point.  It names every object the checkpoints need, so a reader never lists packs.
   A crash before it leaves only unreferenced packs; after it, everything is published.
4. The shared **ref** of the namespace, by compare-and-swap (:mod:`snapstore.remote.refs`).

An incremental push of one checkpoint is 1 PUT (bundle, data inline) plus 1-2 for its ref.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from snapstore.errors import CorruptError, RemoteError
from snapstore.remote import closure, layout, refs, state
from snapstore.remote.state import RemoteConfig
from snapstore.remote.transport import Transport
from snapstore.storage import objects, packs
from snapstore.storage.backend import Backend

Progress = Callable[[int, int], None]  # (done, total): plain bytes uploaded, of the push's new data
Lock = Callable[[], AbstractContextManager[None]]

#: Plain bytes read from the store and compressed per step (bounds a push's memory).
READ_STEP = 32 << 20
#: Longest time from a push's first pack upload to its bundle: past it the push stops (its packs
#: may already be gc candidates, see :mod:`snapstore.remote.gc`, whose grace is longer).
PUSH_WINDOW = 6 * 3600
#: Seconds a remote object this store wrote, read or HEADed counts as still there: a push
#: HEADs every object it reuses that was not seen for longer, before its bundle names it
#: (``remote verify`` marks what it finds missing at once).
CONFIRM_AGE = 3600
#: Most bundles (with inline data) a push lets its checkpoints need before gathering their
#: data into one pack: bounds the objects a clone reads whatever the length of the history.
MAX_SPREAD = 24


class PushReport:
    """What a push did (``to_json`` for ``--json``: no credential, no endpoint secret)."""

    def __init__(self, remote: str, ref: str) -> None:
        self.remote = remote
        self.ref = ref
        self.checkpoints: list[str] = []
        self.bundle = ""
        self.packs = 0  # packs uploaded
        self.inline = False
        self.chunks_new = 0
        self.chunks_known = 0
        self.bytes_new = 0  # plain bytes of the new chunks
        self.bytes_sent = 0  # stored bytes of packs and bundle
        self.ref_outcome = ""  # moved, current, diverged, skipped
        self.ref_checkpoint: str | None = None  # what the remote ref names now
        self.ref_rounds = 0
        self.requests = 0  # requests this push made (set by the caller, who counts them)
        self.gathered = False  # inline data of earlier bundles gathered into a pack (MAX_SPREAD)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _frames_of(get: Callable[[str, bytes], bytes | None], ids: list[bytes], level: int,
               progress: Callable[[int], None]) -> Iterator[tuple[bytes, list[tuple[bytes, int, int]], int]]:
    """``(zstd frame, members, plain bytes)`` for the chunks ``ids``, read a step at a time."""
    group: list[tuple[bytes, bytes]] = []
    size = 0

    def flush() -> Iterator[tuple[bytes, list[tuple[bytes, int, int]], int]]:
        for f in packs.solid_frames(group, level):
            progress(len(f.members))
            yield f.data, f.members, sum(s for _, _, s in f.members)

    for cid in ids:
        data = objects.load_chunk(get, cid)
        group.append((cid, data))
        size += len(data)
        if size >= READ_STEP:
            yield from flush()
            group, size = [], 0
    if group:
        yield from flush()


class _Plan:
    """What a push needs: the closure walked (less the manifest chunks ``leaf_rows`` covers),
    and where the remote already holds each part of it."""

    def __init__(self, backend: Backend, cfg: RemoteConfig, records: list[tuple[bytes, bytes]],
                 leaf_rows: dict[bytes, list[str]]) -> None:
        with backend.read() as view:
            self.need = closure.of(view.get, records, skip_leaves=frozenset(leaf_rows), track=True)
        self.leaf_rows = leaf_rows
        self.chunks = state.known(backend, cfg.rid, state.KIND_CHUNK, self.need.chunks)
        self.streams = state.known(backend, cfg.rid, state.KIND_STREAM, self.need.streams)
        self.convs = state.known(backend, cfg.rid, state.KIND_CONV, self.need.conversations)

    def objects(self) -> set[str]:
        """Every remote object holding a part of the closure already there."""
        out = {k for d in (self.chunks, self.streams, self.convs) for k in d.values()}
        out.update(k for keys in self.leaf_rows.values() for k in keys)
        return out

    def spread(self) -> set[str]:
        """The bundles (data inline) among :meth:`objects`."""
        return {k for k in self.objects() if not k.startswith("packs/")}

    def drop(self, keys: set[str]) -> None:
        """Send again what these objects hold (it goes into this push's fresh pack)."""
        for d in (self.chunks, self.streams, self.convs):
            for oid in [oid for oid, k in d.items() if k in keys]:
                del d[oid]


class _Packer:
    """Frames in, packs out: each pack PUT create-only once it holds PACK_TARGET bytes; what
    is left at the end goes inline in the bundle when small enough (and nothing was packed)."""

    def __init__(self, transport: Transport, report: PushReport, uploaded: Callable[[int], None]) -> None:
        self.transport = transport
        self.report = report
        self.on_upload = uploaded  # plain bytes of each pack, once it is on the remote
        self.frames: list[tuple[bytes, list[tuple[bytes, int, int]]]] = []
        self.stored = 0
        self.placed: dict[bytes, str] = {}  # new chunk -> key of the pack it went to
        self.uploaded: list[str] = []
        self.records_at: str | None = None  # the pack holding the new records, if not inline
        self.started: float | None = None  # monotonic time of the first pack (no clock skew)

    def add(self, data: bytes, members: list[tuple[bytes, int, int]]) -> None:
        self.frames.append((data, members))
        self.stored += len(data)
        if self.stored >= layout.PACK_TARGET:
            self._upload([], [])

    def finish(self, streams: list[tuple[bytes, bytes]], convs: list[tuple[bytes, bytes]]) -> bytes | None:
        """Upload the last pack (with the new records), or return it to go inline."""
        if not (self.frames or streams or convs):
            return None
        body = layout.encode_pack(self.frames, streams, convs)
        if not self.uploaded and not self.report.gathered and len(body) <= layout.INLINE_MAX:
            return body
        self.records_at = self._upload(streams, convs, body)
        return None

    def _upload(self, streams: list[tuple[bytes, bytes]], convs: list[tuple[bytes, bytes]], body: bytes | None = None) -> str:
        body = body if body is not None else layout.encode_pack(self.frames, streams, convs)
        key = layout.pack_key(objects.chunk_id(body))
        if self.started is None:
            self.started = time.monotonic()
        self.transport.put_create(key, body)  # None: a retried request found it written
        self.report.packs += 1
        self.report.bytes_sent += len(body)
        for _, members in self.frames:
            for cid, _, _ in members:
                self.placed[cid] = key
        self.uploaded.append(key)
        self.on_upload(sum(s for _, members in self.frames for _, _, s in members))
        self.frames, self.stored = [], 0
        return key


def _plan(backend: Backend, cfg: RemoteConfig, records: list[tuple[bytes, bytes]], report: PushReport) -> _Plan:
    # Manifest chunks an earlier push recorded need no walk: their entries' closure is in the
    # objects listed (an incremental push walks only the chunks its changes touched).
    with backend.read() as view:
        leaves = closure.manifest_leaves(view.get, records)
    leaf_rows = state.leaf_objects(backend, cfg.rid, leaves)
    plan = _Plan(backend, cfg, records, leaf_rows)
    if len(plan.spread()) > MAX_SPREAD:
        # Small pushes leave their data inline in their bundles, so the checkpoints of a long
        # history need more and more bundles (a clone reads each).  Past MAX_SPREAD, this push
        # gathers what its checkpoints hold in those bundles into a fresh pack: a reader then
        # needs at most MAX_SPREAD + its packs.  Only chunks these checkpoints reach are sent.
        if leaf_rows:
            plan = _Plan(backend, cfg, records, {})  # every entry walked: all that is scattered
        plan.drop(plan.spread())
        report.gathered = True
    return plan


def _lost_among(backend: Backend, transport: Transport, cfg: RemoteConfig, keys: set[str], lock: Lock) -> set[str]:
    """Which of the remote objects ``keys`` a bundle is about to name are gone.

    Each not seen on the remote for :data:`CONFIRM_AGE` is HEADed first (in parallel); what
    is missing is marked lost (:func:`state.put_lost`), so no later push counts on it."""
    from snapstore.remote.fetch import parallel_map

    now = time.time_ns()
    stale = state.unseen_since(backend, cfg.rid, sorted(keys), now - int(CONFIRM_AGE * 1e9))
    if not stale:
        return set()
    found = list(parallel_map(transport.head, stale))
    with lock(), backend.write() as batch:
        for key, meta in zip(stale, found):
            if meta is None:
                state.put_lost(batch, cfg.rid, key)
            else:
                state.put_seen(batch, cfg.rid, key, now)
    return {key for key, meta in zip(stale, found) if meta is None}


def run(
    backend: Backend,
    transport: Transport,
    cfg: RemoteConfig,
    records: list[tuple[bytes, bytes]],
    ns: str,
    *,
    level: int,
    lock: Lock,
    descends_from: Callable[[bytes], bool],
    force: bool = False,
    move_ref: bool = True,
    progress: Progress | None = None,
) -> PushReport:
    """Push the checkpoints ``records`` (``(id, record)``, oldest first) to namespace ``ns``.

    Phases: plan (what the remote lacks, its lost objects sent again), upload (packs), publish
    (the bundle: the commit point), record (what this store now knows the remote holds), and
    move the ref (compare-and-swap)."""
    report = PushReport(cfg.name, ns)
    report.checkpoints = [cid.hex() for cid, _ in records]
    plan = _checked_plan(backend, transport, cfg, records, report, lock)
    up = _upload(backend, transport, plan, level, report, progress)
    now = time.time_ns()
    key = _publish(transport, cfg, ns, records, plan, up, now, report)
    _record(backend, cfg, plan, up, key, now, lock)
    if move_ref and records:
        _move_ref(backend, transport, cfg, ns, layout.Ref(records[-1][0], key, now, cfg.writer), descends_from, force, lock, report)
    else:
        report.ref_outcome = "skipped"
    if progress is not None:
        progress(up.total, up.total)
    return report


def _checked_plan(
    backend: Backend, transport: Transport, cfg: RemoteConfig, records: list[tuple[bytes, bytes]],
    report: PushReport, lock: Lock,
) -> _Plan:
    """The plan, made again while objects it counts on turn out lost from the remote (their
    data then goes in this push)."""
    plan = _plan(backend, cfg, records, report)
    for _ in range(3):  # (a recomputed plan may name objects not checked yet)
        if not _lost_among(backend, transport, cfg, plan.objects(), lock):
            return plan
        plan = _plan(backend, cfg, records, report)
    raise RemoteError("objects of the remote keep disappearing during the push: run 'snapstore remote verify'")


class _Uploaded:
    """What the upload phase sent: the new chunks, streams and conversations, where each went."""

    def __init__(self, plan: _Plan, packer: _Packer, new_chunks: list[bytes],
                 new_streams: list[tuple[bytes, bytes]], new_convs: list[tuple[bytes, bytes]],
                 inline: bytes | None) -> None:
        self.new_chunks, self.new_streams, self.new_convs = new_chunks, new_streams, new_convs
        self.inline = inline
        self.placed, self.uploaded, self.last_records = packer.placed, packer.uploaded, packer.records_at
        self.needs = plan.objects() | set(packer.uploaded)
        self.total = 1  # progress's total (plain bytes + 1 for the commit)


def _upload(
    backend: Backend, transport: Transport, plan: _Plan, level: int, report: PushReport,
    progress: Progress | None,
) -> _Uploaded:
    """Frames of the chunks the remote lacks, in packs PUT create-only (or left inline)."""
    need = plan.need
    new_chunks = [c for c in need.chunks if c not in plan.chunks]
    report.chunks_new, report.chunks_known = len(new_chunks), len(plan.chunks)
    with backend.read() as view:
        new_streams = [(s, _value(view.get, "streams", s)) for s in need.streams if s not in plan.streams]
        new_convs = [(c, _value(view.get, "conversations", c)) for c in need.conversations if c not in plan.convs]
        # Progress counts plain bytes once their pack is on the remote; the last byte stands for
        # the commit (bundle and ref), so 100% is shown only after the last upload.
        total = sum(_plain_size(view.get("chunks", c)) for c in new_chunks) + 1
        done = 0

        def uploaded(n: int) -> None:
            nonlocal done
            done = min(done + n, total - 1)
            if progress is not None:
                progress(done, total)

        packer = _Packer(transport, report, uploaded)
        if progress is not None:
            progress(0, total)
        for data, members, plain in _frames_of(view.get, new_chunks, level, lambda n: None):
            report.bytes_new += plain
            packer.add(data, members)
    inline = packer.finish(new_streams, new_convs)
    if packer.started is not None and time.monotonic() - packer.started > PUSH_WINDOW:
        raise RemoteError(
            f"the push took more than {PUSH_WINDOW / 3600:g} h between its first pack and its commit: "
            "its packs may be collected by remote gc, so nothing was published; push again"
        )
    up = _Uploaded(plan, packer, new_chunks, new_streams, new_convs, inline)
    up.total = total
    return up


def _plain_size(value: bytes | None) -> int:
    """A chunk's plain size from its index entry (cheap: no frame is read)."""
    from snapstore.storage import entries

    return entries.entry_size(value) if entries.is_entry(value) else len(value or b"")


def _publish(
    transport: Transport, cfg: RemoteConfig, ns: str, records: list[tuple[bytes, bytes]], plan: _Plan,
    up: _Uploaded, now: int, report: PushReport,
) -> str:
    """The commit point: the bundle is visible iff its create succeeded (a None answer means a
    retried request found our own bundle: its key holds its hash).  Returns its key."""
    bundle = layout.encode_bundle(ns, cfg.writer, now, records, sorted(up.needs), up.inline)
    key = layout.bundle_key(ns, now, cfg.writer, bundle)
    transport.put_create(key, bundle)
    report.bundle = key
    report.inline = up.inline is not None
    report.bytes_sent += len(bundle)
    return key


def _record(backend: Backend, cfg: RemoteConfig, plan: _Plan, up: _Uploaded, key: str, now: int, lock: Lock) -> None:
    """What this store now knows the remote holds, and where (one transaction)."""
    need = plan.need
    records_at = up.last_records or key

    def chunk_at(cid: bytes) -> str:
        return up.placed.get(cid) or plan.chunks.get(cid) or key

    def stream_at(sid: bytes) -> str | None:
        return plan.streams.get(sid) or (records_at if sid in need.streams else None)

    with lock(), backend.write() as batch:
        for written in [*up.uploaded, key]:
            state.put_seen(batch, cfg.rid, written, now)
        for cid in up.new_chunks:
            state.put_known(batch, cfg.rid, state.KIND_CHUNK, cid, chunk_at(cid))
        for sid, _ in up.new_streams:
            state.put_known(batch, cfg.rid, state.KIND_STREAM, sid, records_at)
        for rid, _ in up.new_convs:
            state.put_known(batch, cfg.rid, state.KIND_CONV, rid, records_at)
        for leaf, files in need.leaf_streams.items():
            held = {chunk_at(n) for sid in files for n in need.stream_nodes[sid]}
            held.update(k for k in map(stream_at, files) if k is not None)
            state.put_leaf_objects(batch, cfg.rid, leaf, sorted(held))


def _move_ref(
    backend: Backend, transport: Transport, cfg: RemoteConfig, ns: str, new: layout.Ref,
    descends_from: Callable[[bytes], bool], force: bool, lock: Lock, report: PushReport,
) -> None:
    """Move the ref to the new head by compare-and-swap, and remember what it was seen as."""
    seen = state.seen_ref(backend, cfg.rid, ns)
    move = refs.advance(transport, ns, new, descends_from=descends_from, force=force, seen=seen)
    report.ref_outcome, report.ref_rounds = move.outcome, move.rounds
    report.ref_checkpoint = move.ref.checkpoint.hex() if move.ref is not None else None
    if move.ref is not None and move.etag:
        with lock(), backend.write() as batch:
            state.put_seen_ref(batch, cfg.rid, ns, state.SeenRef(move.ref.checkpoint, move.etag, move.ref.bundle))


def _value(get: Callable[[str, bytes], bytes | None], table: str, key: bytes) -> bytes:
    value = get(table, key)
    if value is None:
        raise CorruptError(f"{table} record {key.hex()} vanished during the push; run 'snapstore verify'")
    return value
