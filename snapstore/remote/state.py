"""What a local store remembers about its remotes (the ``remotes`` table, docs/remote.md).

| key | value |
| --- | --- |
| ``c:`` + name | msgpack ``{url, endpoint, region, profile, rid, writer, remote_id, cas}`` |
| ``k`` + rid + kind + id | the key of the remote object holding chunk (``c``), stream record (``s``) or conversation record (``v``) ``id``: what a push need not upload again |
| ``o`` + rid + object key | empty: that remote object was imported whole (a fetch skips it) |
| ``m`` + rid + manifest chunk id | msgpack list of the object keys holding everything the entries of that manifest chunk reach (written by a push once its bundle is published): the next push skips those entries |
| ``r`` + rid + ref name | msgpack ``{checkpoint, etag, bundle}``: the ref as last seen or set |
| ``n`` + rid + object key | empty: browsing's cache holds checkpoints that need this object, whose footer it has not read yet |
| ``f`` + rid + object key | msgpack ``[base, [[offset, length, [[chunk id, offset, size]...]]...]]``: the frames of that object's pack (read once; ``base`` is where the pack starts in the object) |
| ``l`` + rid + chunk id | msgpack ``[object key, frame number]``: where browsing reads that chunk |
| ``u`` + rid + manifest id | a stream record read for that manifest id that does not name it by its tree: kept apart until the manifest's content proves it (browsing) |
| ``h`` + rid + object key | 8-byte time (ns, this machine's clock) the object was last seen on the remote: written, read, or HEADed by a push |
| ``x`` + rid + object key | empty: the object is lost from the remote (a push's HEAD or ``remote verify`` found it missing, or gc's plan condemns it); ``k`` and ``m`` rows naming it are ignored |
| ``b`` + rid + checkpoint id | the key of a bundle that published that checkpoint (a push of its namespace does not send its record again) |
| ``w`` + rid + bundle key | msgpack ``{ns, writer, user, host, time_ns, checkpoints}``: a bundle of the history this store took up (pushed, fetched or browsed): read once |
| ``y`` + rid + ref name | the last key a listing of that namespace's history gave (the next listing resumes there) |
| ``j`` + rid + pack key | msgpack ``[time_ns, chunks, streams, conversations]``: a pack a push uploaded whose bundle is not published yet (the next push names it instead of sending it again) |
| ``g`` + rid | 8-byte time (ns) gc's plan was last read: a push reads it again an hour on |

``rid`` is 8 random bytes given at ``remote add``; removing the remote removes its rows.
Credentials are never stored (see :mod:`snapstore.remote.credentials`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import msgpack

from snapstore.errors import CorruptError, UsageError
from snapstore.remote.layout import is_data_key
from snapstore.remote.names import RemoteURL, parse_url, shown
from snapstore.storage.backend import Backend, WriteBatch

TABLE = "remotes"
KIND_CHUNK, KIND_STREAM, KIND_CONV = b"c", b"s", b"v"


class RemoteConfig(NamedTuple):
    """A remote as ``remote add`` recorded it."""

    name: str
    url: str
    endpoint: str | None
    region: str | None
    profile: str | None
    rid: bytes
    writer: str
    remote_id: bytes | None = None
    cas: bool | None = None  # conditional writes probed: True enforced, False ignored
    #: None: not encrypted; else ``{key_file, key_id}`` (remote/keys.py; never a secret)
    crypt: dict[str, Any] | None = None

    @property
    def parsed(self) -> RemoteURL:
        return parse_url(self.url)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "url": self.url, "endpoint": self.endpoint, "region": self.region,
            "profile": self.profile, "conditional_writes": self.cas, "encrypted": self.crypt is not None,
        }


def check_name(name: str) -> None:
    if not name or len(name) > 100 or any(c in name for c in "/\\\0 ") or name.startswith("-"):
        raise UsageError(f"bad remote name {name!r} (letters, digits, '.', '_', '-')")


def _config_key(name: str) -> bytes:
    return b"c:" + name.encode()


def get_config(backend: Backend, name: str) -> RemoteConfig:
    """The remote ``name``; UsageError when there is none."""
    with backend.read() as view:
        raw = view.get(TABLE, _config_key(name))
    if raw is None:
        raise UsageError(f"no remote named {name!r} (add one with 'snapstore remote add {name} s3://bucket/prefix')")
    return _parse(name, raw)


def _parse(name: str, raw: bytes) -> RemoteConfig:
    try:
        d = msgpack.unpackb(raw, raw=False)
        return RemoteConfig(
            name, str(d["url"]), d["endpoint"], d["region"], d["profile"], bytes(d["rid"]),
            str(d["writer"]), d.get("remote_id"), d.get("cas"), d.get("crypt"),
        )
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"the settings of remote {name!r} are damaged ({exc}); remove and add it again") from None


def put_config(batch: WriteBatch, cfg: RemoteConfig) -> None:
    batch.put(TABLE, _config_key(cfg.name), msgpack.packb({
        "url": cfg.url, "endpoint": cfg.endpoint, "region": cfg.region, "profile": cfg.profile,
        "rid": cfg.rid, "writer": cfg.writer, "remote_id": cfg.remote_id, "cas": cfg.cas, "crypt": cfg.crypt,
    }, use_bin_type=True))


def new_config(
    name: str, url: str, endpoint: str | None, region: str | None, profile: str | None,
    crypt: dict[str, Any] | None = None,
) -> RemoteConfig:
    check_name(name)
    parsed = parse_url(url)
    if endpoint is not None and not endpoint.startswith(("https://", "http://")):
        raise UsageError(f"the endpoint must be an http(s) URL, not {shown(endpoint)}")
    if endpoint is not None and "@" in endpoint.split("//", 1)[1].split("/", 1)[0]:
        raise UsageError("credentials never go in an endpoint URL")
    return RemoteConfig(name, str(parsed), endpoint, region, profile, os.urandom(8), os.urandom(8).hex(), crypt=crypt)


def all_configs(backend: Backend) -> list[RemoteConfig]:
    with backend.read() as view:
        return [_parse(k[2:].decode(), v) for k, v in view.items(TABLE, prefix=b"c:")]


def remove(backend: Backend, cfg: RemoteConfig) -> None:
    """Remove a remote and every row it owns (in bounded batches; the config row last, so a
    crash leaves the remote listed and ``remote remove`` finishes it)."""
    _drop(backend, cfg.rid, b"korm" + b"nflu" + b"hxbw" + b"yjg")
    with backend.write() as batch:
        batch.delete(TABLE, _config_key(cfg.name))


def drop_history(backend: Backend, rid: bytes) -> None:
    """Forget the history taken up (the bundles, what they published, where listings
    stopped, the refs as seen); what is known of the remote's objects stays."""
    _drop(backend, rid, b"wbyr")


def _drop(backend: Backend, rid: bytes, kinds: bytes) -> None:
    for kind in kinds:
        prefix = bytes([kind]) + rid
        while True:
            with backend.read() as view:
                keys = [k for k, _ in _take(view.items(TABLE, prefix=prefix), 4096)]
            if not keys:
                break
            with backend.write() as batch:
                for k in keys:
                    batch.delete(TABLE, k)


def _take(it: Iterator[tuple[bytes, bytes]], n: int) -> Iterator[tuple[bytes, bytes]]:
    for i, row in enumerate(it):
        if i >= n:
            return
        yield row


# -- what is known to be on the remote ------------------------------------------------------


def known_key(rid: bytes, kind: bytes, oid: bytes) -> bytes:
    return b"k" + rid + kind + oid


def known(backend: Backend, rid: bytes, kind: bytes, ids: Iterable[bytes]) -> dict[bytes, str]:
    """For each id known to be on the remote, the key of the object holding it (none held by
    an object found lost)."""
    gone = lost(backend, rid)
    out = {}
    with backend.read() as view:
        for oid in ids:
            v = view.get(TABLE, known_key(rid, kind, oid))
            if v is not None and v.decode() not in gone:
                out[oid] = v.decode()
    return out


def lost(backend: Backend, rid: bytes) -> set[str]:
    """The objects found missing from the remote (few: a loss is an accident)."""
    prefix = b"x" + rid
    with backend.read() as view:
        return {k[len(prefix) :].decode() for k, _ in view.items(TABLE, prefix=prefix)}


def put_lost(batch: WriteBatch, rid: bytes, key: str) -> None:
    batch.put(TABLE, b"x" + rid + key.encode(), b"")
    batch.delete(TABLE, b"h" + rid + key.encode())
    batch.delete(TABLE, imported_key(rid, key))


def put_seen(batch: WriteBatch, rid: bytes, key: str, now_ns: int) -> None:
    """Note that object ``key`` was on the remote at ``now_ns``."""
    batch.put(TABLE, b"h" + rid + key.encode(), now_ns.to_bytes(8, "big"))


def unseen_since(backend: Backend, rid: bytes, keys: Iterable[str], since_ns: int) -> list[str]:
    """The objects among ``keys`` not seen on the remote since ``since_ns`` (or never)."""
    out = []
    with backend.read() as view:
        for key in keys:
            v = view.get(TABLE, b"h" + rid + key.encode())
            if v is None or len(v) != 8 or int.from_bytes(v, "big") < since_ns:
                out.append(key)
    return out


def put_known(batch: WriteBatch, rid: bytes, kind: bytes, oid: bytes, key: str) -> None:
    batch.put(TABLE, known_key(rid, kind, oid), key.encode())


def imported_key(rid: bytes, key: str) -> bytes:
    return b"o" + rid + key.encode()


def imported(backend: Backend, rid: bytes, key: str) -> bool:
    with backend.read() as view:
        return view.get(TABLE, imported_key(rid, key)) is not None


def put_imported(batch: WriteBatch, rid: bytes, key: str) -> None:
    batch.put(TABLE, imported_key(rid, key), b"")


def leaf_objects(backend: Backend, rid: bytes, leaves: Iterable[bytes]) -> dict[bytes, list[str]]:
    """For each manifest chunk a push recorded, the objects its entries' closure lives in."""
    out = {}
    gone = lost(backend, rid)
    with backend.read() as view:
        for leaf in leaves:
            raw = view.get(TABLE, b"m" + rid + leaf)
            if raw is None:
                continue
            try:
                keys = msgpack.unpackb(raw, raw=False)
            except (ValueError, TypeError, msgpack.UnpackException):
                continue  # a cache only: that chunk's entries are walked again
            if isinstance(keys, list) and all(isinstance(k, str) and is_data_key(k) and k not in gone for k in keys):
                out[leaf] = keys
    return out


def put_leaf_objects(batch: WriteBatch, rid: bytes, leaf: bytes, keys: list[str]) -> None:
    batch.put(TABLE, b"m" + rid + leaf, msgpack.packb(sorted(keys)))


# -- refs as last seen -------------------------------------------------------------------------


class SeenRef(NamedTuple):
    """A ref as this store last read or wrote it.  ``time_ns`` is the ref body's own time: a
    writer's next version is always later (remote/refs.py), so an older one read afterwards is an
    old version put back (0: a row written before the time was kept, nothing to compare)."""

    checkpoint: bytes
    etag: str
    bundle: str
    time_ns: int = 0


def _parse_seen(raw: bytes) -> SeenRef | None:
    try:
        d = msgpack.unpackb(raw, raw=False)
        return SeenRef(bytes(d["checkpoint"]), str(d["etag"]), str(d["bundle"]), int(d.get("time_ns", 0)))
    except (KeyError, ValueError, TypeError, AttributeError, msgpack.UnpackException):
        return None  # a damaged row costs one more request (and the replay check of that ref)


def seen_ref(backend: Backend, rid: bytes, name: str) -> SeenRef | None:
    with backend.read() as view:
        raw = view.get(TABLE, b"r" + rid + name.encode("utf-8", "surrogateescape"))
    return None if raw is None else _parse_seen(raw)


def put_seen_ref(batch: WriteBatch, rid: bytes, name: str, ref: SeenRef) -> None:
    batch.put(TABLE, b"r" + rid + name.encode("utf-8", "surrogateescape"), msgpack.packb(
        {"checkpoint": ref.checkpoint, "etag": ref.etag, "bundle": ref.bundle, "time_ns": ref.time_ns}, use_bin_type=True))


def drop_seen_ref(batch: WriteBatch, rid: bytes, name: str) -> None:
    """Forget how ref ``name`` was seen (the remote no longer has it)."""
    batch.delete(TABLE, b"r" + rid + name.encode("utf-8", "surrogateescape"))


def seen_refs(backend: Backend, rid: bytes) -> dict[str, SeenRef]:
    out = {}
    with backend.read() as view:
        for k, raw in view.items(TABLE, prefix=b"r" + rid):
            ref = _parse_seen(raw)
            if ref is not None:
                out[k[1 + len(rid) :].decode("utf-8", "surrogateescape")] = ref
    return out


#: Where the browsing caches of a store's remotes live (in the store directory).
CACHE_DIRNAME = "remote-cache"


def cache_dirs(store_dir: str, cfg: RemoteConfig) -> tuple[str, str]:
    """``(tree, store)`` directories of remote ``cfg``'s browsing cache (its tree stays empty:
    a cache is only read)."""
    base = os.path.join(store_dir, CACHE_DIRNAME, cfg.rid.hex())
    return os.path.join(base, "tree"), os.path.join(base, "store")
# -- the published history ---------------------------------------------------------------------


def published(backend: Backend, rid: bytes, ids: Iterable[bytes]) -> dict[bytes, str]:
    """For each checkpoint known to be published on the remote, the key of a bundle holding it."""
    out = {}
    with backend.read() as view:
        for cid in ids:
            v = view.get(TABLE, b"b" + rid + cid)
            if v is not None:
                out[cid] = v.decode()
    return out


def put_published(batch: WriteBatch, rid: bytes, cid: bytes, bundle: str) -> None:
    batch.put(TABLE, b"b" + rid + cid, bundle.encode())


class Taken(NamedTuple):
    """A bundle of a history this store took up (what ``remote log`` shows of it)."""

    key: str
    ns: str
    writer: str
    user: str
    host: str
    time_ns: int
    checkpoints: list[bytes]

    def to_json(self) -> dict[str, Any]:
        d = self._asdict()
        d["checkpoints"] = [c.hex() for c in self.checkpoints]
        return d


def put_taken(batch: WriteBatch, rid: bytes, t: Taken) -> None:
    batch.put(TABLE, b"w" + rid + t.key.encode(), msgpack.packb(
        [t.ns, t.writer, t.user, t.host, t.time_ns, t.checkpoints], use_bin_type=True))


def taken(backend: Backend, rid: bytes, prefix: str = "") -> list[Taken]:
    """The bundles taken up whose keys start with ``prefix``, in key order (oldest first
    within a namespace)."""
    out = []
    start = b"w" + rid
    with backend.read() as view:
        for k, raw in view.items(TABLE, prefix=start + prefix.encode()):
            try:
                ns, writer, user, host, time_ns, cps = msgpack.unpackb(raw, raw=False)
                out.append(Taken(k[len(start) :].decode(), ns, writer, user, host, int(time_ns), [bytes(c) for c in cps]))
            except (ValueError, TypeError, msgpack.UnpackException):
                continue  # a cache row only: that bundle is read again
    return out


def is_taken(backend: Backend, rid: bytes, key: str) -> bool:
    with backend.read() as view:
        return view.get(TABLE, b"w" + rid + key.encode()) is not None


def listed_until(backend: Backend, rid: bytes, ns: str) -> str | None:
    with backend.read() as view:
        v = view.get(TABLE, b"y" + rid + ns.encode("utf-8", "surrogateescape"))
    return None if v is None else v.decode()


def put_listed_until(batch: WriteBatch, rid: bytes, ns: str, key: str) -> None:
    batch.put(TABLE, b"y" + rid + ns.encode("utf-8", "surrogateescape"), key.encode())


# -- packs uploaded by a push that did not finish ----------------------------------------------


class PendingPack(NamedTuple):
    time_ns: int  # when it was uploaded (this machine's clock)
    chunks: list[bytes]
    streams: list[bytes]
    conversations: list[bytes]


def put_pending(batch: WriteBatch, rid: bytes, key: str, p: PendingPack) -> None:
    batch.put(TABLE, b"j" + rid + key.encode(), msgpack.packb(list(p), use_bin_type=True))


def drop_pending(batch: WriteBatch, rid: bytes, key: str) -> None:
    batch.delete(TABLE, b"j" + rid + key.encode())


def pending(backend: Backend, rid: bytes) -> dict[str, PendingPack]:
    """The packs uploaded by pushes whose bundle was never published (none found lost)."""
    gone = lost(backend, rid)
    out = {}
    start = b"j" + rid
    with backend.read() as view:
        for k, raw in view.items(TABLE, prefix=start):
            key = k[len(start) :].decode()
            try:
                t, chunks, streams, convs = msgpack.unpackb(raw, raw=False)
                row = PendingPack(int(t), [bytes(c) for c in chunks], [bytes(c) for c in streams], [bytes(c) for c in convs])
            except (ValueError, TypeError, msgpack.UnpackException):
                continue
            if key not in gone and is_data_key(key):
                out[key] = row
    return out


def plan_read_at(backend: Backend, rid: bytes) -> int:
    """When gc's plan was last read (ns, this machine's clock; 0: never)."""
    with backend.read() as view:
        v = view.get(TABLE, b"g" + rid)
    return int.from_bytes(v, "big") if v is not None and len(v) == 8 else 0


def put_plan_read_at(batch: WriteBatch, rid: bytes, now_ns: int) -> None:
    batch.put(TABLE, b"g" + rid, now_ns.to_bytes(8, "big"))
