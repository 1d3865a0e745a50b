"""Fetch: bring the checkpoints a remote ref names (and what they reach) into the local store.

Reads the ref, its bundle, then each object the bundle says its checkpoints need, whole, unless
an earlier fetch imported it already; never a listing of packs or any remote-wide index.  Every
object is checked before anything of it is written (its name against its hash, each chunk
against its id, each record against the schema), and the checkpoint records go in last, in one
transaction, only once their whole closure is in the store: a fetch adds complete checkpoints
or none.  Remote frames become local packs without recompression (docs/format.md is
unchanged); the tree is never touched (``pull`` restores through the journaled restore).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from snapstore.errors import CorruptError, RefError, UsageError
from snapstore.records.checkpoint import (
    PATHS_INDEX_META,
    Checkpoint,
    key_seq,
    next_seq,
    parse_record,
    write_rows,
)
from snapstore.remote import closure, layout, refs, state
from snapstore.remote.state import RemoteConfig
from snapstore.remote.transport import Transport
from snapstore.storage import packs
from snapstore.storage.backend import Backend, ReadView, WriteBatch
from snapstore.storage.entries import CODEC_ZSTD

if TYPE_CHECKING:
    from snapstore.ops.restore import RestoreReport

T = TypeVar("T")
Lock = Callable[[], AbstractContextManager[None]]
Progress = Callable[[int, int], None]

#: Objects read at once by a fetch (each at most a pack, ~16 MiB, held until imported).
READERS = 6


class FetchedRef:
    """What fetching one ref did."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.checkpoint = ""
        self.bundle = ""
        self.new_checkpoints: list[str] = []
        self.objects_read = 0
        self.bytes_read = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def import_pack(
    batch: WriteBatch, key: str, pack: layout.Pack, has: Callable[[bytes], bool], *,
    put_stream: Callable[[bytes, bytes], None] | None = None,
) -> list[bytes]:
    """Write a checked pack's chunks and records into ``batch``; returns the chunk ids it holds.

    A frame whose chunks the store has already is skipped; the others become local frames
    unchanged (each chunk was checked against its id by :func:`layout.frame_chunks`).
    ``put_stream`` takes the stream records instead of the ``streams`` table (browsing holds
    some back until they are proven).
    """
    frames = []
    ids: list[bytes] = []
    for frame in pack.frames:
        chunks = layout.frame_chunks(key, pack, frame)  # checks every chunk
        ids.extend(cid for cid, _ in chunks)
        if all(has(cid) for cid, _ in chunks):
            continue
        data = pack.body[frame.offset : frame.offset + frame.length]
        frames.append(packs.Frame(CODEC_ZSTD, data, list(frame.members)))
    for table, k, v in packs.pack_ops(frames):
        batch.put_new(table, k, v)
    for sid, rec in pack.streams:
        if put_stream is None:
            batch.put_new("streams", sid, rec)
        else:
            put_stream(sid, rec)
    for rid, rec in pack.conversations:
        batch.put_new("conversations", rid, rec)
    if pack.conversations and any(rec[:1] and 0x90 <= rec[0] <= 0x9F for _, rec in pack.conversations):
        _lift_to_compact(batch)
    return ids


def _lift_to_compact(batch: WriteBatch) -> None:
    """A compact conversation record (a msgpack array, pushed from a format-3 store) taken into
    a format-2 store makes it format 3 in the same transaction: its format-2 readers then say
    "upgrade snapstore" rather than find a damaged record (docs/format.md, Versioning)."""
    if batch.get("meta", b"format") == b"2":
        batch.put("meta", b"format", b"3")


def read_object(transport: Transport, key: str, needed_by: str) -> tuple[layout.Pack | None, int]:
    """Read and check the object ``key`` (a pack, or a bundle with inline data): its pack."""
    got = transport.get(key)
    if got is None:
        raise CorruptError(f"remote object {key} is missing (needed by {needed_by}); run 'snapstore remote verify'")
    if key.startswith("packs/"):
        return layout.parse_pack(key, got.body, layout.pack_name_of(key)), len(got.body)
    return layout.parse_bundle(key, got.body).inline, len(got.body)


def store_object(backend: Backend, cfg: RemoteConfig, lock: Lock, key: str, pack: layout.Pack | None) -> None:
    """Import one checked object, and remember that it was imported and what it holds."""
    with lock(), backend.write() as batch:
        if pack is not None:
            ids = import_pack(batch, key, pack, lambda c: batch.get("chunks", c) is not None)
            for cid in ids:
                state.put_known(batch, cfg.rid, state.KIND_CHUNK, cid, key)
            for sid, _ in pack.streams:
                state.put_known(batch, cfg.rid, state.KIND_STREAM, sid, key)
            for rid, _ in pack.conversations:
                state.put_known(batch, cfg.rid, state.KIND_CONV, rid, key)
        state.put_imported(batch, cfg.rid, key)
        state.put_seen(batch, cfg.rid, key, time.time_ns())


def fetch_ref(
    backend: Backend, transport: Transport, cfg: RemoteConfig, name: str, *, lock: Lock,
    progress: Progress | None = None, add: Callable[..., None] | None = None, whole_history: bool = False,
    at: str | None = None, on_forgotten: Callable[[], None] | None = None, heads: bool = False,
) -> FetchedRef:
    """Fetch ref ``name``: RefError when the remote has no such ref; CorruptError (nothing of
    the bundle's checkpoints added) when an object is missing or fails a check.

    Takes up the bundle of the ref's checkpoint; with ``whole_history`` every bundle of the
    ref's history this store has not taken up yet (remote/history.py), oldest first; with
    ``at`` (a checkpoint id or a prefix of one) the bundle of the newest such checkpoint in
    that history instead, and ``out.checkpoint`` names it.  ``on_forgotten`` is called when a
    bundle taken up before was forgotten since.  ``add`` takes each checked bundle up (default:
    :func:`add_bundle`, the whole closure; browsing passes one that reads lazily, and
    ``heads``: each bundle's head is read by range, not its inline data, :mod:`heads`)."""
    out = FetchedRef(name)
    ref, etag = refs.read(transport, name)
    seen = state.seen_ref(backend, cfg.rid, name)
    if ref is None:
        if seen is not None:  # deleted: a later push may create it again, timed afresh
            with lock(), backend.write() as batch:
                state.drop_seen_ref(batch, cfg.rid, name)
        raise RefError(f"the remote {cfg.name} has no ref {name!r} ('snapstore remote ls {cfg.name}' lists them)")
    refs.check_not_older(ref, seen, name, cfg.name)
    out.checkpoint, out.bundle = ref.checkpoint.hex(), ref.bundle
    last = None
    pairs: Iterator[tuple[str, layout.Bundle]]
    if at is not None:
        found, cid = _find(transport, name, ref, at, out)
        out.checkpoint, out.bundle = cid.hex(), found.key
        pairs = iter([(found.key, found)])
    else:
        if whole_history:
            keys, last = _untaken_history(backend, transport, cfg, name, ref, on_forgotten)
        else:
            with backend.read() as view:
                present = view.get("checkpoints", ref.checkpoint) is not None
            keys = [] if present else [ref.bundle]
        reader = None
        if heads:
            from snapstore.remote.heads import HeadReader

            reader = HeadReader(transport)
        pairs = zip(keys, parallel_map(lambda k: _read_bundle(transport, k, name, out, reader), keys))
    for key, bundle in pairs:
        if key == ref.bundle and ref.checkpoint not in {cid for cid, _ in bundle.checkpoints}:
            raise CorruptError(f"remote object {ref.bundle} does not hold the checkpoint its ref {name} names")
        (add or add_bundle)(backend, transport, cfg, bundle, lock=lock, out=out, progress=progress)
        with lock(), backend.write() as batch:
            take(batch, cfg, bundle)
    with lock(), backend.write() as batch:
        state.put_seen_ref(batch, cfg.rid, name, state.SeenRef(ref.checkpoint, etag, ref.bundle, ref.time_ns))
        if last is not None:
            state.put_listed_until(batch, cfg.rid, name, last)
    return out


def take(batch: WriteBatch, cfg: RemoteConfig, bundle: layout.Bundle) -> None:
    """Note that ``bundle`` was taken up: its checkpoints are published there (a push does not
    send them again) and who pushed it (``remote log``)."""
    cids = [cid for cid, _ in bundle.checkpoints]
    for cid in cids:
        state.put_published(batch, cfg.rid, cid, bundle.key)
    state.put_taken(batch, cfg.rid, state.Taken(bundle.key, bundle.ns, bundle.writer, bundle.user, bundle.host, bundle.time_ns, cids))


def _read_bundle(
    transport: Transport, key: str, name: str, out: FetchedRef, heads: Callable[[str], layout.Bundle | None] | None = None,
) -> layout.Bundle:
    """Bundle ``key`` read whole and checked, or (``heads``) its head only."""
    if heads is not None:
        bundle = heads(key)
        if bundle is None:
            raise CorruptError(f"remote object {key} is missing (the history of ref {name} names it)")
        out.objects_read += 1
        return bundle
    got = transport.get(key)
    if got is None:
        raise CorruptError(f"remote object {key} is missing (the history of ref {name} names it)")
    out.objects_read += 1
    out.bytes_read += len(got.body)
    return layout.parse_bundle(key, got.body)


def _untaken_history(
    backend: Backend, transport: Transport, cfg: RemoteConfig, name: str, ref: layout.Ref,
    on_forgotten: Callable[[], None] | None,
) -> tuple[list[str], str | None]:
    """The bundles of ref ``name``'s history this store has not taken up (the listing resumed
    where the last one stopped), and the last key listed."""
    from snapstore.remote import history

    hist = history.read(transport, name, start_after=history.resume_point(name, state.listed_until(backend, cfg.rid, name)))
    if on_forgotten is not None and any(state.is_taken(backend, cfg.rid, k) for k in hist.forgotten):
        on_forgotten()
    keys = [k for k in hist.bundles if not state.is_taken(backend, cfg.rid, k)]
    if ref.bundle not in keys and not state.is_taken(backend, cfg.rid, ref.bundle):
        keys.append(ref.bundle)  # (a listing may lag the push that moved the ref)
    return keys, hist.last


def _find(transport: Transport, name: str, ref: layout.Ref, at: str, out: FetchedRef) -> tuple[layout.Bundle, bytes]:
    """The bundle of the newest checkpoint of ref ``name``'s history whose id starts with
    ``at`` (the heads of its bundles read newest first until one holds it, then that bundle
    whole), and that checkpoint's id."""
    from snapstore.remote import history
    from snapstore.remote.heads import read_head

    prefix = at.lower()
    if len(prefix) < 4 or any(c not in "0123456789abcdef" for c in prefix):
        raise UsageError(f"--at takes a checkpoint id or a prefix of at least 4 hex digits, not {at!r:.80}")
    keys = [k for k in history.read(transport, name).bundles if k != ref.bundle]
    for key in [ref.bundle, *reversed(keys)]:
        head = read_head(transport, key)
        if head is None:
            raise CorruptError(f"remote object {key} is missing (the history of ref {name} names it)")
        for cid, _ in reversed(head.checkpoints):
            if cid.hex().startswith(prefix):
                # (a head is checked record by record: what is imported is checked whole)
                return (head if head.inline is not None else _read_bundle(transport, key, name, out)), cid
    raise RefError(f"no checkpoint {at!r:.80} in the history of the remote ref {name}")


def add_bundle(
    backend: Backend, transport: Transport, cfg: RemoteConfig, bundle: layout.Bundle, *, lock: Lock,
    out: FetchedRef, progress: Progress | None = None, excluded: frozenset[bytes] = frozenset(),
    keep_latest: bool = False,
) -> None:
    """Import what ``bundle``'s checkpoints need, then the checkpoints themselves, each only
    if the store's own ``verify`` would find nothing wrong with it (``excluded``: the store's
    paths in the tree).  With ``keep_latest`` they go into the log before the store's newest
    checkpoint, which stays ``latest`` and the parent of the next snapshot (a fetch; a pull
    means to move on to what it fetched)."""
    if bundle.inline is not None:
        store_object(backend, cfg, lock, bundle.key, bundle.inline)
    todo = [k for k in bundle.needs if not state.imported(backend, cfg.rid, k)]
    done = 0
    for again in (False, True):
        for i, (key, (pack, size)) in enumerate(zip(todo, _read_many(transport, todo, bundle.key))):
            out.objects_read += 1
            out.bytes_read += size
            store_object(backend, cfg, lock, key, pack)  # (one writer thread: this one)
            done += size
            if progress is not None:  # bytes; a bundle names objects, not sizes: the total is
                progress(done, done * len(todo) // (i + 1))  # estimated from those read so far
        missing = _missing(backend, bundle)
        if not missing:
            break
        if again:
            raise CorruptError(
                f"remote object {bundle.key} names checkpoints whose data is not on the remote "
                f"({missing}); run 'snapstore remote verify'"
            )
        # Something imported earlier was removed locally since (gc): read every object again.
        todo = list(bundle.needs)
    _check_manifest_names(backend, bundle)
    _check_like_local(backend, bundle, excluded)
    with lock(), backend.write() as batch:
        add_checkpoints(batch, bundle, out, keep_latest=keep_latest)


def _check_like_local(backend: Backend, bundle: layout.Bundle, excluded: frozenset[bytes]) -> None:
    """Refuse the bundle (CorruptError, nothing of it kept) when a checkpoint it brings would
    be damage to the store's own ``verify``: a manifest entry ``../x``, an absolute path or one
    in the store, a file whose stream does not hold its size (git's ``fsckObjects``)."""
    from snapstore.ops.verify import checkpoint_problems
    from snapstore.records.conversation_check import Checker

    with backend.read() as view:
        checker = Checker(view.get)  # a session's conversations, checked once each step
        for cid, rec in bundle.checkpoints:
            if view.get("checkpoints", cid) is not None:
                continue
            problems = checkpoint_problems(view, cid, rec, excluded, checker)
            if problems:
                raise CorruptError(
                    f"remote object {bundle.key} names checkpoint {cid.hex()}, which this store would call "
                    f"damaged ({problems[0]}); nothing of it was kept"
                )


def add_checkpoints(batch: WriteBatch, bundle: layout.Bundle, out: FetchedRef, *, keep_latest: bool = False) -> None:
    """Add ``bundle``'s checkpoint records the store lacks to its log (in ``batch``): at its
    end, or with ``keep_latest`` before its newest checkpoint (see :func:`add_bundle`)."""
    new = [(cid, rec) for cid, rec in bundle.checkpoints if batch.get("checkpoints", cid) is None]
    if not new:
        return
    with batch.reading() as view:
        last = next(iter(view.items("log", reverse=True)), None)
        lifted = _lift_newest(view, batch) if keep_latest else []
    seq = key_seq(lifted[0][0]) if lifted else next_seq(last[0] if last is not None else None)
    for cid, rec in new:
        write_rows(batch, cid, rec, seq, parse_record(cid, rec).task, [])
        seq += 1
        out.new_checkpoints.append(cid.hex())
    for _, cid, rec, task in lifted:
        write_rows(batch, cid, rec, seq, task, [])  # (tags name ids: they stay as they are)
        seq += 1
    # The path index lists changes between log neighbours: rebuilt by the next snapshot.
    batch.delete("meta", PATHS_INDEX_META)


def _lift_newest(view: ReadView, batch: WriteBatch) -> list[tuple[bytes, bytes, bytes, str | None]]:
    """Take the store's newest checkpoint (and the safety checkpoints after it) out of the log
    and its indexes; ``(log key, id, record, task)`` of each, oldest first, to put back after
    what a fetch adds."""
    from snapstore.ops import pathlog
    from snapstore.records.checkpoint import SAFETY, path_prefix, task_key

    rows: list[tuple[bytes, bytes, bytes, Checkpoint | None]] = []  # newest first
    before: bytes | None = None  # the manifest of the checkpoint logged before them
    for key, cid in view.items("log", reverse=True):
        rec = view.get("checkpoints", cid)
        cp = _parsed(cid, rec)
        if rows and (rows[-1][3] is None or rows[-1][3].kind != SAFETY):
            before = cp.manifest if cp is not None else None
            break
        if rec is None:  # a log entry that names nothing stays where it is
            break
        rows.append((key, cid, rec, cp))
    rows.reverse()
    for key, _, _, cp in rows:
        batch.delete("log", key)
        if cp is None:
            continue
        if cp.task is not None:
            batch.delete("tasks", task_key(cp.task, key_seq(key)))
        try:  # its path-index rows carry its old number (the next snapshot indexes it again)
            for path in pathlog.changed(view.get, before, cp.manifest):
                batch.delete("paths", path_prefix(path) + key)
        except CorruptError:
            pass
        before = cp.manifest
    return [(key, cid, rec, cp.task if cp is not None else None) for key, cid, rec, cp in rows]


def _parsed(cid: bytes, rec: bytes | None) -> Checkpoint | None:
    try:
        return parse_record(cid, rec) if rec is not None else None
    except CorruptError:
        return None


def _read_many(transport: Transport, keys: list[str], needed_by: str) -> Iterator[tuple[layout.Pack | None, int]]:
    """:func:`read_object` of each key, in order, :data:`READERS` requests in flight (the
    latency of a remote engine, not its bandwidth, bounds a clone of many small objects)."""
    return parallel_map(lambda key: read_object(transport, key, needed_by), keys)


def parallel_map(call: Callable[[str], T], keys: list[str]) -> Iterator[T]:
    """``call`` of each key, results in order, :data:`READERS` at a time; at most READERS
    results are held ahead of the consumer (each may be a whole object)."""
    if len(keys) < 2:
        yield from map(call, keys)
        return
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="snapstore-fetch")
    try:
        pending = deque(pool.submit(call, key) for key in keys[:READERS])
        for i in range(len(keys)):
            result = pending.popleft().result()
            if i + READERS < len(keys):
                pending.append(pool.submit(call, keys[i + READERS]))
            yield result
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _check_manifest_names(backend: Backend, bundle: layout.Bundle) -> None:
    """Refuse checkpoints whose manifest id does not name its ``streams`` record (nor its
    content): a footer that put another manifest's record under this id would make the
    checkpoint show another tree.  Chunks were checked on import; this checks the records."""
    from snapstore.records import manifest
    from snapstore.records.checkpoint import references
    from snapstore.storage import objects

    with backend.read() as view:
        for cid, rec in bundle.checkpoints:
            mid = references(cid, rec)[0]
            record = view.get("streams", mid)
            if record is None or objects.id_matches(mid, record):
                continue  # one chunk (its id checked as it loaded) or named by its tree: O(1)
            try:  # an older manifest, named by its content: read it whole
                for _ in manifest.named_chunks(view.get, mid):
                    pass
            except CorruptError as exc:
                raise CorruptError(
                    f"remote object {bundle.key} names checkpoint {cid.hex()}, whose {exc}; "
                    "run 'snapstore remote verify'"
                ) from None


def _missing(backend: Backend, bundle: layout.Bundle) -> str | None:
    """Why the bundle's checkpoints are not whole in the store yet, or None."""
    try:
        with backend.read() as view:
            need = closure.of(view.get, bundle.checkpoints)
        have = backend.has_many("chunks", list(need.chunks))
    except CorruptError as exc:
        return str(exc)
    lacking = [c for c, ok in zip(need.chunks, have) if not ok]
    return f"{len(lacking)} chunks, e.g. {lacking[0].hex()}" if lacking else None


class FetchReport:
    """What a fetch (or the fetch of a pull or clone) did, per ref, and its request count."""

    def __init__(self, remote: str) -> None:
        self.remote = remote
        self.refs: list[FetchedRef] = []
        #: One line per ref that could not be fetched (damaged, or naming damaged objects):
        #: the sound refs are fetched all the same.
        self.problems: list[str] = []
        self.requests = 0
        self.restore: RestoreReport | None = None
        self.directory: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "remote": self.remote, "refs": [r.to_json() for r in self.refs], "problems": self.problems,
            "requests": self.requests,
        }
        if self.directory is not None:
            d["directory"] = self.directory
        if self.restore is not None:
            d["restore"] = self.restore.to_json()
        return d


class Forgotten(Exception):
    """A browsing cache holds pushes forgotten since: it starts its history again."""


def take_up_refs(
    backend: Backend, t: Transport, cfg: RemoteConfig, add: Callable[..., None], report: FetchReport, *,
    again: bool, lock: Callable[[], AbstractContextManager[Any]], notes: list[str],
) -> None:
    """Take up the whole history of every ref into a browsing cache; :class:`Forgotten` when a
    push it took up was forgotten since, or a ref it read was deleted (unless ``again``).  A
    damaged ref is a line of ``report.problems`` (and of ``notes``): the sound refs are browsed."""

    def forgotten() -> None:
        if not again:
            raise Forgotten

    names = refs.names(t)
    if set(state.seen_refs(backend, cfg.rid)) - set(names):
        forgotten()  # a ref was deleted: its history went with it
    for name in names:
        try:
            report.refs.append(fetch_ref(
                backend, t, cfg, name, lock=lock, add=add, whole_history=True, on_forgotten=forgotten, heads=True,
            ))
        except CorruptError as exc:
            report.problems.append(exc.message)
            notes.append(f"skipped: {exc.message}")
