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

A bundle carries only the checkpoints its namespace's history lacks (``b`` rows: a ``push
--task`` sends each record once, O(new) bytes), and who pushed it.  Each pack is noted in the
local store as it lands (``j`` rows), so a push killed or failed part-way is resumed by the
next one, which names those packs instead of sending them again.  Objects gc's plan condemns
are never named (the plan is read once an hour: :data:`CONFIRM_AGE`).

An incremental push of one checkpoint is 1 PUT (bundle, data inline) plus 1-2 for its ref.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from snapstore.errors import CorruptError, RemoteError
from snapstore.records.checkpoint import references
from snapstore.remote import closure, layout, refs, state
from snapstore.remote.state import RemoteConfig
from snapstore.remote.transport import Transport
from snapstore.storage import objects, packs
from snapstore.storage.backend import Backend

Progress = Callable[[int, int], None]  # (done, total): plain bytes uploaded, of the push's new data
Lock = Callable[[], AbstractContextManager[None]]

#: Plain bytes read from the store and compressed per step (bounds a push's memory).
READ_STEP = 32 << 20
#: Longest time from a push's plan (or a resumed pack's upload) to its bundle: past it the push
#: stops (its packs may already be gc candidates, and objects it reuses may have been condemned
#: since; see :mod:`snapstore.remote.gc`, whose grace and window are longer).
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
        self.checkpoints_published = 0  # of ``checkpoints``, those this ref's history held already
        self.packs_resumed = 0  # packs an unfinished push uploaded, named instead of sent again

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
                 leaf_rows: dict[bytes, list[str]], pending: dict[str, state.PendingPack]) -> None:
        with backend.read() as view:
            self.need = closure.of(view.get, records, skip_leaves=frozenset(leaf_rows), track=True)
        manifests = {references(cid, rec)[0] for cid, rec in records}
        #: The chunks of the checkpoints' manifests (index nodes and leaves): framed apart from
        #: file data, so a reader by range fetches a manifest without the files beside it.
        self.metadata = {n for mid in manifests for n in self.need.stream_nodes.get(mid, ())}
        self.leaf_rows = leaf_rows
        self.chunks = state.known(backend, cfg.rid, state.KIND_CHUNK, self.need.chunks)
        self.streams = state.known(backend, cfg.rid, state.KIND_STREAM, self.need.streams)
        self.convs = state.known(backend, cfg.rid, state.KIND_CONV, self.need.conversations)
        self.pending = pending
        self.expired: list[str] = []
        for key, p in pending.items():  # what an unfinished push uploaded is not sent again
            for ids, need, known in ((p.chunks, self.need.chunks, self.chunks),
                                     (p.streams, self.need.streams, self.streams),
                                     (p.conversations, self.need.conversations, self.convs)):
                for oid in ids:
                    if oid in need and oid not in known:
                        known[oid] = key

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

    def __init__(
        self, transport: Transport, report: PushReport, journal: Callable[[str, state.PendingPack], None],
        uploaded: Callable[[int], None],
    ) -> None:
        self.transport = transport
        self.report = report
        self.journal = journal  # notes each pack in the local store as it lands (resume)
        self.on_upload = uploaded  # plain bytes of each pack, once it is on the remote
        self.frames: list[tuple[bytes, list[tuple[bytes, int, int]]]] = []
        self.stored = 0
        self.placed: dict[bytes, str] = {}  # new chunk -> key of the pack it went to
        self.uploaded: list[str] = []
        self.records_at: str | None = None  # the pack holding the new records, if not inline

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
        self.transport.put_create(key, body)  # None: a retried request found it written
        self.report.packs += 1
        self.report.bytes_sent += len(body)
        chunks = [cid for _, members in self.frames for cid, _, _ in members]
        for cid in chunks:
            self.placed[cid] = key
        self.journal(key, state.PendingPack(time.time_ns(), chunks, [s for s, _ in streams], [c for c, _ in convs]))
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
    young = time.time_ns() - int(PUSH_WINDOW / 2 * 1e9)
    noted = state.pending(backend, cfg.rid)
    pending = {k: p for k, p in noted.items() if p.time_ns > young}
    plan = _Plan(backend, cfg, records, leaf_rows, pending)
    plan.expired = [k for k in noted if k not in pending]  # too old to name: forgotten once published
    if len(plan.spread()) > MAX_SPREAD:
        # Small pushes leave their data inline in their bundles, so the checkpoints of a long
        # history need more and more bundles (a clone reads each).  Past MAX_SPREAD, this push
        # gathers what its checkpoints hold in those bundles into a fresh pack: a reader then
        # needs at most MAX_SPREAD + its packs.  Only chunks these checkpoints reach are sent.
        if leaf_rows:
            plan = _Plan(backend, cfg, records, {}, pending)  # every entry walked: all that is scattered
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
    who: tuple[str, str] = ("", ""),
) -> PushReport:
    """Push the checkpoints ``records`` (``(id, record)``, oldest first) to namespace ``ns``
    (``who``: the user and host the bundle names).

    Phases: plan (what the remote lacks, its lost and condemned objects sent again), upload
    (packs), publish (the bundle: the commit point), record (what this store now knows the
    remote holds), and move the ref (compare-and-swap).  Checkpoints the namespace's history
    holds already are not published again; when that is all of them, no bundle is written."""
    report = PushReport(cfg.name, ns)
    report.checkpoints = [cid.hex() for cid, _ in records]
    started = time.monotonic()
    done = state.published(backend, cfg.rid, [cid for cid, _ in records])
    prefix = layout.log_prefix(ns)
    head = records[-1][0] if records else b""
    if head in done and done[head] in state.lost(backend, cfg.rid):
        del done[head]  # its bundle was forgotten (ref delete): the ref needs it published again
    fresh = [(cid, rec) for cid, rec in records if not done.get(cid, "").startswith(prefix)]
    report.checkpoints_published = len(records) - len(fresh)
    now = time.time_ns()
    key, total = "", 1
    if fresh:
        _note_condemned(backend, transport, cfg, lock)
        plan = _checked_plan(backend, transport, cfg, fresh, report, lock)
        up = _upload(backend, transport, cfg, plan, level, report, progress, lock, started)
        now, total = time.time_ns(), up.total
        key = _publish(transport, cfg, ns, fresh, up, now, report, who)
        _record(backend, cfg, plan, up, key, now, lock, _Published(ns, fresh, who))
    if move_ref and records:
        holder = key if head in {cid for cid, _ in fresh} else done[head]
        _move_ref(backend, transport, cfg, ns, layout.Ref(head, holder, now, cfg.writer), descends_from, force, lock, report)
    else:
        report.ref_outcome = "skipped"
    if progress is not None:  # (100% only now: the last byte stands for the commit)
        progress(total, total)
    return report


def _note_condemned(backend: Backend, transport: Transport, cfg: RemoteConfig, lock: Lock) -> None:
    """Mark what gc's plan condemns as lost (no push names it again), reading the plan at most
    once per :data:`CONFIRM_AGE`: gc deletes a condemned object only :data:`gc.WINDOW` later,
    longer than that plus :data:`PUSH_WINDOW`, so a bundle never names a deleted object."""
    from snapstore.remote import gc

    now = time.time_ns()
    if now - state.plan_read_at(backend, cfg.rid) < CONFIRM_AGE * 1e9:
        return
    condemned = gc.condemned(transport)
    with lock(), backend.write() as batch:
        for key in condemned:
            state.put_lost(batch, cfg.rid, key)
        state.put_plan_read_at(batch, cfg.rid, now)


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
        self.resumed = {k: p for k, p in plan.pending.items() if k in self.needs}


class _Published(NamedTuple):
    """What the bundle publishes: its namespace, its checkpoints, who pushed it."""

    ns: str
    records: list[tuple[bytes, bytes]]
    who: tuple[str, str]


def _upload(
    backend: Backend, transport: Transport, cfg: RemoteConfig, plan: _Plan, level: int, report: PushReport,
    progress: Progress | None, lock: Lock, started: float,
) -> _Uploaded:
    """Frames of the chunks the remote lacks, in packs PUT create-only (or left inline)."""
    need = plan.need
    new_chunks = [c for c in need.chunks if c not in plan.chunks]
    report.chunks_new, report.chunks_known = len(new_chunks), len(plan.chunks)

    def journal(key: str, row: state.PendingPack) -> None:
        with lock(), backend.write() as batch:
            state.put_pending(batch, cfg.rid, key, row)
            state.put_seen(batch, cfg.rid, key, row.time_ns)

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

        packer = _Packer(transport, report, journal, uploaded)
        if progress is not None:
            progress(0, total)
        metadata = [c for c in new_chunks if c in plan.metadata]
        for group in (metadata, [c for c in new_chunks if c not in plan.metadata]):
            for data, members, plain in _frames_of(view.get, group, level, lambda n: None):
                report.bytes_new += plain
                packer.add(data, members)
    inline = packer.finish(new_streams, new_convs)
    up = _Uploaded(plan, packer, new_chunks, new_streams, new_convs, inline)
    report.packs_resumed = len(up.resumed)
    oldest = min((p.time_ns for p in up.resumed.values()), default=time.time_ns())
    if time.monotonic() - started > PUSH_WINDOW or time.time_ns() - oldest > PUSH_WINDOW * 1e9:
        raise RemoteError(
            f"the push took more than {PUSH_WINDOW / 3600:g} h between its plan and its commit: "
            "its packs may be collected by remote gc, so nothing was published; push again"
        )
    up.total = total
    return up


def _plain_size(value: bytes | None) -> int:
    """A chunk's plain size from its index entry (cheap: no frame is read)."""
    from snapstore.storage import entries

    return entries.entry_size(value) if entries.is_entry(value) else len(value or b"")


def _publish(
    transport: Transport, cfg: RemoteConfig, ns: str, records: list[tuple[bytes, bytes]], up: _Uploaded, now: int,
    report: PushReport, who: tuple[str, str],
) -> str:
    """The commit point: the bundle is visible iff its create succeeded (a None answer means a
    retried request found our own bundle: its key holds its hash).  Returns its key."""
    bundle = layout.encode_bundle(ns, cfg.writer, now, records, sorted(up.needs), up.inline, user=who[0], host=who[1])
    key = layout.bundle_key(ns, now, cfg.writer, bundle)
    transport.put_create(key, bundle)
    report.bundle = key
    report.inline = up.inline is not None
    report.bytes_sent += len(bundle)
    return key


def _record(
    backend: Backend, cfg: RemoteConfig, plan: _Plan, up: _Uploaded, key: str, now: int, lock: Lock, pub: _Published,
) -> None:
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
            state.drop_pending(batch, cfg.rid, written)
        for old in plan.expired:
            state.drop_pending(batch, cfg.rid, old)
        for pk, p in up.resumed.items():  # named by a published bundle now: known, no longer pending
            for kind, ids in ((state.KIND_CHUNK, p.chunks), (state.KIND_STREAM, p.streams), (state.KIND_CONV, p.conversations)):
                for oid in ids:
                    state.put_known(batch, cfg.rid, kind, oid, pk)
            state.drop_pending(batch, cfg.rid, pk)
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
        for cid, _ in pub.records:
            state.put_published(batch, cfg.rid, cid, key)
        state.put_taken(batch, cfg.rid, state.Taken(key, pub.ns, cfg.writer, *pub.who, now, [c for c, _ in pub.records]))


def _move_ref(
    backend: Backend, transport: Transport, cfg: RemoteConfig, ns: str, new: layout.Ref,
    descends_from: Callable[[bytes], bool], force: bool, lock: Lock, report: PushReport,
) -> None:
    """Move the ref to the new head by compare-and-swap, and remember what it was seen as."""
    seen = state.seen_ref(backend, cfg.rid, ns)
    move = refs.advance(transport, ns, new, descends_from=descends_from, force=force, seen=seen, remote=cfg.name)
    report.ref_outcome, report.ref_rounds = move.outcome, move.rounds
    report.ref_checkpoint = move.ref.checkpoint.hex() if move.ref is not None else None
    if move.ref is not None and move.etag:
        with lock(), backend.write() as batch:
            state.put_seen_ref(batch, cfg.rid, ns, state.SeenRef(
                move.ref.checkpoint, move.etag, move.ref.bundle, move.ref.time_ns))


def _value(get: Callable[[str, bytes], bytes | None], table: str, key: bytes) -> bytes:
    value = get(table, key)
    if value is None:
        raise CorruptError(f"{table} record {key.hex()} vanished during the push; run 'snapstore verify'")
    return value
