"""Browsing a remote by range reads: the filler of the read-through cache (docs/remote.md).

``list``, ``show``, ``log``, ``cat``, ``diff`` and ``ui`` with ``--remote NAME`` read a cache
store whose backend is a :class:`~snapstore.storage.readthrough.ReadThroughBackend` with a
:class:`Filler`.  Bringing the cache up to date reads each ref and, for a checkpoint it does
not hold yet, its bundle (the checkpoint records, the bundle's inline pack,
and the list of objects the checkpoints need, kept as "footer not read yet").  Nothing else is
read until a command reads a row the cache lacks (:meth:`Filler.add_bundle` takes a bundle up):

* a chunk: where it is comes from the footers of the objects the cached checkpoints need.  The
  first miss reads every footer not read yet (one ranged GET of the object's last
  :func:`ranges.tail_read` bytes each, a second only for a larger footer, :data:`fetch.READERS` at a
  time) and keeps them in the cache, with any frame such a read brought whole (a small
  bundle's inline pack); then one ranged GET of the frame that holds the chunk.
  Every chunk of that frame is checked against its id and imported into the cache;
* a stream or conversation record: footers carry them, so the same footer reads bring them.

A footer is read once per cache, a frame once; each is checked before use, as a fetch checks
(frame bounds and chunk lists, record schemas, each chunk against its id, each cached
checkpoint's manifest id against its record: one that does not name it waits apart until the
manifest's content proves it, :meth:`Filler.prove`).  A pack's name (the hash of all its
bytes) cannot be checked from ranges: fetch and ``remote verify`` check it.
A bundle a checkpoint needs for its inline data is read the same way: its inline pack is its
last field, so the bundle ends with that pack's footer and tail (:func:`layout.encode_bundle`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import msgpack

from snapstore.errors import CorruptError
from snapstore.records import manifest
from snapstore.records.checkpoint import references
from snapstore.remote import fetch, layout, ranges, state
from snapstore.remote.fetch import FetchedRef, Lock, Progress
from snapstore.remote.state import RemoteConfig
from snapstore.remote.transport import MAX_GET, Transport
from snapstore.storage import objects, packs
from snapstore.storage.backend import Backend, ReadView, WriteBatch
from snapstore.storage.entries import CODEC_ZSTD
from snapstore.storage.readthrough import Pending

#: The tables whose missing rows a remote fills ("packs": the local packs frames were imported
#: into, written with their chunks' entries, so a view older than the import asks for them).
TABLES = ("chunks", "packs", "streams", "conversations")

#: Parsed footers kept in memory (a full pack's is ~1,000-5,000 tuples; the others are re-read
#: from the cache's rows, never from the remote).
FOOTERS_KEPT = 8


class Footer(NamedTuple):
    """Where an object's pack starts in it, and the pack's frames."""

    base: int
    frames: list[layout.PackFrame]


class _Read(NamedTuple):
    """An object's footer as read: its frames, its records, and the bytes read from its end
    (``tail``, from offset ``tail_start``), which may hold whole frames."""

    footer: Footer
    streams: list[tuple[bytes, bytes]]
    conversations: list[tuple[bytes, bytes]]
    tail: bytes
    tail_start: int


def _pending_key(rid: bytes, key: str) -> bytes:
    return b"n" + rid + key.encode()


def _footer_key(rid: bytes, key: str) -> bytes:
    return b"f" + rid + key.encode()


def _where_key(rid: bytes, cid: bytes) -> bytes:
    return b"l" + rid + cid


def _unproven_key(rid: bytes, mid: bytes) -> bytes:
    return b"u" + rid + mid


def _manifests(view: ReadView) -> set[bytes]:
    """The manifest ids of the checkpoints in the cache."""
    return {references(cid, rec)[0] for cid, rec in view.items("checkpoints")}


def put_stream(batch: WriteBatch, rid: bytes, manifests: set[bytes], sid: bytes, rec: bytes) -> None:
    """Keep a stream record read from the remote: in ``streams``, unless ``sid`` is the id of a
    cached checkpoint's manifest that ``rec`` does not name (an older manifest named by its
    content, or another manifest's record put under this id): that one waits, apart, until
    the manifest's content proves it (:meth:`Filler.prove`)."""
    if sid in manifests and not objects.id_matches(sid, rec):
        batch.put_new(state.TABLE, _unproven_key(rid, sid), rec)
    else:
        batch.put_new("streams", sid, rec)


class Filler:
    """Fills a browsing cache's missing rows from remote ``cfg`` through ``transport``
    (``backend`` is the cache's own store, under the read-through wrapper)."""

    def __init__(self, backend: Backend, transport: Transport, cfg: RemoteConfig) -> None:
        self.backend = backend
        self.transport = transport
        self.rid = cfg.rid
        self._footers: OrderedDict[str, Footer] = OrderedDict()
        self._read: set[str] = set()  # footers read by this process (their "n" rows may be pending)
        self._manifests: set[bytes] | None = None
        #: ``(time, keys)`` of each bundle this process took up: the objects it needs.
        self._groups: list[tuple[int, list[str]]] = []

    def add_bundle(
        self, backend: Backend, transport: Transport, cfg: RemoteConfig, bundle: layout.Bundle, *, lock: Lock,
        out: FetchedRef, progress: Progress | None = None,
    ) -> None:
        """Take up a checked bundle without its closure (what :func:`fetch.fetch_ref` calls for
        a checkpoint not held yet): its checkpoint records, its inline pack (read with it
        already), and the objects its checkpoints need, as footers to read later."""
        manifests = self._manifest_ids()
        with lock(), backend.write() as batch:
            with batch.reading() as view:
                for cid, rec in bundle.checkpoints:
                    mid = references(cid, rec)[0]
                    manifests.add(mid)
                    held = view.get("streams", mid)
                    if held is not None and not objects.id_matches(mid, held):
                        # Taken up before as some stream's record: a manifest's now, so proven first.
                        batch.delete("streams", mid)
                        batch.put_new(state.TABLE, _unproven_key(self.rid, mid), held)
            if bundle.inline is not None:
                fetch.import_pack(
                    batch, bundle.key, bundle.inline, lambda c: batch.get("chunks", c) is not None,
                    put_stream=lambda sid, rec: put_stream(batch, self.rid, manifests, sid, rec),
                )
                state.put_imported(batch, self.rid, bundle.key)
            elif bundle.inline_at is not None and not self._known(batch, bundle.key):
                # Only its head was read: its inline pack is read by range, like a pack, and
                # where it lies is kept to check its footer against.
                batch.put(state.TABLE, _pending_key(self.rid, bundle.key), msgpack.packb(list(bundle.inline_at)))
            for key in bundle.needs:
                if not self._known(batch, key) and batch.get(state.TABLE, _pending_key(self.rid, key)) is None:
                    batch.put(state.TABLE, _pending_key(self.rid, key), b"")
            fetch.add_checkpoints(batch, bundle, out)
        own = [bundle.key] if bundle.inline_at is not None else []
        self._groups.append((bundle.time_ns, own + list(bundle.needs)))

    def _known(self, batch: WriteBatch, key: str) -> bool:
        """Whether object ``key``'s footer was read, or the object imported whole."""
        known = (_footer_key(self.rid, key), state.imported_key(self.rid, key))
        return any(batch.get(state.TABLE, k) is not None for k in known)

    def __call__(self, pending: Pending, table: str, key: bytes) -> None:
        if table == "packs":
            return  # only ever made by an import: pending, or in the store already
        if table != "chunks":
            def found() -> bool:  # footers carry the records
                if pending.get(table, key) is not None or table != "streams":
                    return pending.get(table, key) is not None
                # A stream read finds a one-chunk file's chunk under its stream's id: once that
                # id is a chunk's, any record of it names the same bytes (its content's hash; a
                # tree id is derived apart), so the other footers need not be read for it.
                return any(v is not None for v in (
                    pending.get(state.TABLE, _unproven_key(self.rid, key)), pending.get("chunks", key),
                    pending.get(state.TABLE, _where_key(self.rid, key)),
                ))

            self._read_footers(pending, found)
            if table == "streams" and pending.get("streams", key) is None:
                self.prove(pending, key)
            return
        where = self._where(pending, key)
        if where is None and self._read_footers(pending, lambda: self._where(pending, key) is not None):
            where = self._where(pending, key)
        if where is not None:
            self._read_frame(pending, *where)

    def _where(self, pending: Pending, cid: bytes) -> tuple[str, int] | None:
        raw = pending.get(state.TABLE, _where_key(self.rid, cid))
        if raw is None:
            return None
        try:
            key, n = msgpack.unpackb(raw, raw=False)
            return str(key), int(n)
        except (ValueError, TypeError, msgpack.UnpackException):
            return None  # a cache row only: the chunk is then reported missing

    def _read_footers(self, pending: Pending, found: Callable[[], bool]) -> bool:
        """Read footers not read yet until ``found()``; whether one was read.  Those of the
        objects the newest bundle taken up by this process needs go first (a read of the
        latest checkpoint reads no other footer), then each older bundle's, then the rest."""
        prefix = b"n" + self.rid
        with self.backend.read() as view:
            rows = {k[len(prefix) :].decode(): v for k, v in view.items(state.TABLE, prefix=prefix)}
        if all(k in self._read for k in rows) or found():
            return False
        for group in [*(keys for _, keys in sorted(self._groups, reverse=True)), list(rows)]:
            keys = list(dict.fromkeys(k for k in group if k in rows and k not in self._read))
            if keys:
                self._take_footers(pending, keys, rows)
                if found():
                    break
        return True

    def _take_footers(self, pending: Pending, keys: list[str], rows: dict[str, bytes]) -> None:
        """Read the footers of ``keys`` (:data:`fetch.READERS` at a time) into the cache."""
        reads = fetch.parallel_map(lambda k: self._read_footer(k, _extent(k, rows[k])), keys)
        for key, read in zip(keys, reads):
            footer = read.footer
            pending.put(state.TABLE, _footer_key(self.rid, key), msgpack.packb(
                [footer.base, [[f.offset, f.length, [list(m) for m in f.members]] for f in footer.frames]],
                use_bin_type=True,
            ))
            for i, frame in enumerate(footer.frames):
                for cid, _, _ in frame.members:
                    pending.put_new(state.TABLE, _where_key(self.rid, cid), msgpack.packb([key, i]))
            for sid, rec in read.streams:
                put_stream(pending, self.rid, self._manifest_ids(), sid, rec)
            for rid, rec in read.conversations:
                pending.put_new("conversations", rid, rec)
            for frame in footer.frames:
                # Frames the footer read brought whole (all of a small object, the last frames
                # of a pack) are imported now: no request will ever be made for them.
                at = footer.base + frame.offset - read.tail_start
                if at >= 0:
                    self._import_frame(pending, key, frame, read.tail[at : at + frame.length])
            pending.delete(state.TABLE, _pending_key(self.rid, key))
            self._keep(key, footer)
            self._read.add(key)

    def _manifest_ids(self) -> set[bytes]:
        """The manifest ids of the cached checkpoints: read once per process (the checkpoints
        this process takes up are added as it does)."""
        if self._manifests is None:
            with self.backend.read() as view:
                self._manifests = _manifests(view)
        return self._manifests

    def prove(self, pending: Pending, mid: bytes) -> None:
        """Put manifest ``mid``'s held-back record in ``streams`` once its content, read
        whole, hashes to ``mid`` (what :func:`manifest.named_chunks` checks); CorruptError
        when it does not."""
        record = pending.get(state.TABLE, _unproven_key(self.rid, mid))
        if record is None:
            return

        def get(table: str, key: bytes) -> bytes | None:
            if table == "streams" and key == mid:
                return record
            value = pending.get(table, key)
            if value is None and table in TABLES:
                self(pending, table, key)
                value = pending.get(table, key)
            return value

        try:
            for _ in manifest.named_chunks(get, mid):
                pass
        except CorruptError as exc:
            raise CorruptError(f"{exc} (a remote footer gave it another record); run 'snapstore remote verify'") from None
        pending.put("streams", mid, record)

    def _read_footer(self, key: str, extent: tuple[int, int] | None = None) -> _Read:
        """Read and check the footer of ``key``'s pack by ranges (its frames and records);
        ``extent``: where a bundle's inline pack lies, as its head said (then no more than
        that pack is read, and the footer must agree)."""
        first = ranges.tail_read(key) if extent is None else min(ranges.tail_read(key), extent[1] - extent[0])
        got = self.transport.get_suffix(key, first)
        if got is None:
            raise _missing(key)
        tail, size = got
        if size > MAX_GET or len(tail) != min(size, first):
            raise CorruptError(f"remote object {key} is corrupt (it is not the size its reads say)")
        if extent is not None and size != extent[1]:
            raise CorruptError(f"remote object {key} is corrupt (it is not the size its head says)")
        flen = layout.footer_length(key, tail[-layout.TAIL_SIZE :], size)
        need = flen + layout.TAIL_SIZE
        if need > len(tail):
            more = self.transport.get_range(key, size - need, size - len(tail))
            if more is None:
                raise _missing(key)
            tail = more + tail
        footer = tail[len(tail) - need : len(tail) - layout.TAIL_SIZE]
        start = size - len(tail)
        if key.startswith("packs/"):
            frames, streams, convs = layout.parse_footer(key, footer, size - need)
            return _Read(Footer(0, frames), streams, convs, tail, start)
        if extent is not None:  # its head said where its inline pack starts
            base = extent[0]
            frames, streams, convs = layout.parse_footer(key, footer, size - need - base)
            return _Read(Footer(base, frames), streams, convs, tail, start)
        # A bundle's inline pack ends the bundle: its start follows from its last frame's end.
        frames, streams, convs = layout.parse_footer(key, footer, size)
        length = max((f.offset + f.length for f in frames), default=len(layout.PACK_MAGIC) + layout.NONCE) + need
        if length > size - len(layout.BUNDLE_MAGIC):
            raise CorruptError(f"remote object {key} is corrupt (its inline pack does not fit in it)")
        return _Read(Footer(size - length, frames), streams, convs, tail, start)

    def _keep(self, key: str, footer: Footer) -> None:
        self._footers[key] = footer
        self._footers.move_to_end(key)
        while len(self._footers) > FOOTERS_KEPT:
            self._footers.popitem(last=False)

    def _footer(self, pending: Pending, key: str) -> Footer:
        footer = self._footers.get(key)
        if footer is not None:
            self._footers.move_to_end(key)
            return footer
        raw = pending.get(state.TABLE, _footer_key(self.rid, key))
        try:
            base, frames = msgpack.unpackb(raw or b"\xc0", raw=False)
            footer = Footer(int(base), [
                layout.PackFrame(int(o), int(n), [(bytes(c), int(a), int(s)) for c, a, s in m]) for o, n, m in frames
            ])
        except (ValueError, TypeError, msgpack.UnpackException):
            raise CorruptError(f"the browsing cache's copy of the footer of {key} is damaged "
                               "('snapstore remote remove' and add the remote again)") from None
        self._keep(key, footer)
        return footer

    def _read_frame(self, pending: Pending, key: str, n: int) -> None:
        """Read frame ``n`` of ``key`` by range, check every chunk, import it into the cache."""
        footer = self._footer(pending, key)
        if not 0 <= n < len(footer.frames):
            raise CorruptError(f"the browsing cache's copy of the footer of {key} is damaged")
        frame = footer.frames[n]
        start = footer.base + frame.offset
        data = self.transport.get_range(key, start, start + frame.length)
        if data is None:
            raise _missing(key)
        self._import_frame(pending, key, frame, data)

    def _import_frame(self, pending: Pending, key: str, frame: layout.PackFrame, data: bytes) -> None:
        """Check every chunk of a frame of ``key`` against its id, then put it in the cache."""
        layout.check_frame(key, data, frame)
        for table, k, v in packs.pack_ops([packs.Frame(CODEC_ZSTD, data, list(frame.members))]):
            pending.put_new(table, k, v)


def _extent(key: str, row: bytes) -> tuple[int, int] | None:
    """Where a bundle's inline pack lies, from its pending row (empty: not known)."""
    if not row:
        return None
    try:
        start, end = msgpack.unpackb(row)
        if type(start) is int and type(end) is int and 0 < start < end:
            return start, end
    except (ValueError, TypeError, msgpack.UnpackException):
        pass
    raise CorruptError(f"the browsing cache's note of where {key} holds its data is damaged "
                       "('snapstore remote remove' and add the remote again)")


def _missing(key: str) -> CorruptError:
    return CorruptError(f"remote object {key} is missing (the browsed checkpoints need it); run 'snapstore remote verify'")
