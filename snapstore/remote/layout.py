"""The objects on a remote: their keys and byte formats (docs/remote.md has the tables).

Every object but a ref is immutable and written create-only (``If-None-Match: *``):

* ``config``: msgpack map ``{format, chunker, id, created}``, written once by the first client;
* ``packs/<h2>/<blake3-256 hex>``: a **pack**: a random nonce, zstd frames of chunks, then a footer (msgpack)
  saying which chunks each frame holds and carrying the stream and conversation records pushed
  with them.  Its name is the BLAKE3-256 of all its bytes (the full 256 bits: a 128-bit name
  could be squatted by a co-tenant who searched for a collision);
* ``log/<ns>/<time_ns:020>-<writer>-<h16>``: a **bundle**, the commit of one push: the
  checkpoint records, the packs the checkpoints need, and (small pushes) a pack inline.  ``h16``
  is the first 8 bytes of the BLAKE3-256 of the bundle, in hex;
* ``refs/<ns>``: a **ref** ``{checkpoint, bundle, time_ns, writer}``, moved by compare-and-swap.

A reader trusts nothing it reads: names are checked against hashes, every chunk against its id,
every record against the schema readers use locally (format.md, "What a reader refuses").
"""

from __future__ import annotations

import os
import struct
from typing import Any, NamedTuple

import msgpack

from snapstore.errors import CorruptError
from snapstore.records import conversation, schema
from snapstore.records.checkpoint import parse_record
from snapstore.remote import wire
from snapstore.remote.names import MAX_NAME, decode_name, encode_name
from snapstore.storage import entries, objects
from snapstore.storage.chunker import PARAMS
from snapstore.storage.objects import chunk_id

FORMAT = 1
CONFIG_KEY = "config"
PACK_MAGIC = b"SNAPPACK"
BUNDLE_MAGIC = b"SNAPBNDL"
#: The start of every object of an encrypted remote (``remote/crypto.py``).
CRYPT_MAGIC = b"SNAPENC1"
NONCE = 16  # random bytes after PACK_MAGIC
_TAIL = struct.Struct(">I8s")  # footer length, PACK_MAGIC again (the end of a pack)
#: A pack closes once it holds this many stored bytes (one PUT each; docs/remote.md, costs).
PACK_TARGET = 16 << 20
#: A push whose new data compresses to at most this goes inline in its bundle (one PUT).
INLINE_MAX = 1 << 20
#: No remote object read whole may be larger (packs close at PACK_TARGET + one frame).
MAX_OBJECT = 256 << 20
#: Records of one kind in one footer, at most (bounds what a hostile footer makes us allocate).
MAX_RECORDS = 1 << 22
#: The largest ref and config objects (a ref is ~150 bytes, the config ~200): a larger one is
#: refused before it is read.
MAX_REF = 4 << 10
MAX_CONFIG = 4 << 10
#: Containers and elements a checkpoint record may hold (its metadata's limit, and the rest).
RECORD_ITEMS = schema.MAX_METADATA_ITEMS + 4096
#: The longest object key a bundle or ref may name.
MAX_KEY = 1024


def pack_key(name: bytes) -> str:
    """The key of the pack whose BLAKE3-256 is ``name``."""
    h = name.hex()
    return f"packs/{h[:2]}/{h}"


def ref_key(ns: str) -> str:
    return f"refs/{encode_name(ns)}"


def ref_name(key: str) -> str:
    """The ref name of a ``refs/<ns>`` key; ValueError when it is not one, or not the key
    :func:`ref_key` makes of that name (``refs/%41``, ``refs/.hidden``: no writer of ours made
    it, and reading the ref by its name would read another key)."""
    if not key.startswith("refs/") or "/" in key[5:]:
        raise ValueError(key)
    name = decode_name(key[5:])
    try:
        canonical = ref_key(name)
    except Exception:  # UsageError: empty, too long
        raise ValueError(key) from None
    if canonical != key:
        raise ValueError(key)
    return name


def bundle_key(ns: str, time_ns: int, writer: str, body: bytes) -> str:
    return f"log/{encode_name(ns)}/{time_ns:020d}-{writer}-{chunk_id(body)[:8].hex()}"


# -- packs -------------------------------------------------------------------------------------


class PackFrame(NamedTuple):
    """One frame of a pack: where it is, and the chunks ``(id, offset, size)`` it holds."""

    offset: int
    length: int
    members: list[tuple[bytes, int, int]]


class Pack(NamedTuple):
    """A parsed pack (or a bundle's inline pack)."""

    body: bytes
    frames: list[PackFrame]
    streams: list[tuple[bytes, bytes]]
    conversations: list[tuple[bytes, bytes]]


def encode_pack(
    frames: list[tuple[bytes, list[tuple[bytes, int, int]]]],
    streams: list[tuple[bytes, bytes]],
    convs: list[tuple[bytes, bytes]],
) -> bytes:
    """A pack of ``(zstd frame, members)`` and records; its name is ``chunk_id`` of it."""
    # A nonce makes every pack's name its own: no two pushes ever write the same key, so a
    # pusher never mistakes someone else's pack (perhaps condemned by gc) for one it wrote.
    out = bytearray(PACK_MAGIC + os.urandom(NONCE))
    index = []
    for data, members in frames:
        index.append([len(out), len(data), [[c, o, s] for c, o, s in members]])
        out += data
    footer = msgpack.packb(
        {"frames": index, "streams": [[k, v] for k, v in streams], "conversations": [[k, v] for k, v in convs]},
        use_bin_type=True,
    )
    out += footer
    out += _TAIL.pack(len(footer), PACK_MAGIC)
    return bytes(out)


def parse_pack(what: str, body: bytes, name: bytes | None) -> Pack:
    """Parse and check a pack: its name (when given), its footer, every frame and chunk hash,
    every record.  CorruptError naming ``what`` (its key) on anything wrong."""
    def bad(why: str) -> CorruptError:
        return CorruptError(f"remote object {what} is corrupt ({why})")

    if name is not None and chunk_id(body) != name:
        raise bad("its content does not match its name")
    if len(body) < len(PACK_MAGIC) + NONCE + _TAIL.size or not body.startswith(PACK_MAGIC):
        raise bad("not a pack")
    flen = footer_length(what, body[-_TAIL.size :], len(body))
    end = len(body) - _TAIL.size
    frames, streams, convs = parse_footer(what, memoryview(body)[end - flen : end], end - flen)
    return Pack(body, frames, streams, convs)


#: Bytes after a pack's footer: the footer's length and the magic (what a ranged read of a
#: pack's end parses first).
TAIL_SIZE = _TAIL.size


def footer_length(what: str, tail: bytes, size: int) -> int:
    """The footer length a pack's last :data:`TAIL_SIZE` bytes give, checked against the size
    of the pack (``size``); CorruptError naming ``what``."""
    if len(tail) != _TAIL.size or size < len(PACK_MAGIC) + NONCE + _TAIL.size:
        raise CorruptError(f"remote object {what} is corrupt (not a pack)")
    flen, magic = _TAIL.unpack(tail)
    if magic != PACK_MAGIC or flen > size - _TAIL.size - len(PACK_MAGIC) - NONCE:
        raise CorruptError(f"remote object {what} is corrupt (truncated or no footer)")
    return int(flen)


def parse_footer(
    what: str, footer: bytes | memoryview, data_end: int
) -> tuple[list[PackFrame], list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """Parse and check a pack's footer: its frames (each within ``[magic + nonce, data_end)``
    and with a sound chunk list) and its records (schema).  CorruptError naming ``what``."""
    def bad(why: str) -> CorruptError:
        return CorruptError(f"remote object {what} is corrupt ({why})")

    try:
        frames, streams, convs = _read_footer(footer, data_end)
    except CorruptError as exc:
        raise bad(exc.message) from None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise bad(f"damaged footer: {exc}") from None
    return frames, streams, convs


#: Longest stream record (``[size, height, root]``: about 45 bytes).
MAX_STREAM_RECORD = 64


def _read_footer(
    footer: bytes | memoryview, data_end: int
) -> tuple[list[PackFrame], list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """The footer's fields, each element checked as it is read (:class:`wire.SchemaReader`)."""
    r = wire.SchemaReader(footer)
    frames: list[PackFrame] = []
    records: dict[str, list[tuple[bytes, bytes]]] = {}
    for _ in range(r.map()):
        field = r.str_(32)
        if field == "frames" and not frames:
            for _ in range(r.array()):
                frame = _read_frame(r, data_end)
                if frames and frame.offset < frames[-1].offset + frames[-1].length:
                    # (writers lay frames out in order: overlaps would read the same bytes again)
                    raise CorruptError("its frames overlap or are out of order")
                frames.append(frame)
        elif field in ("streams", "conversations") and field not in records:
            out = records[field] = []
            for _ in range(r.array()):
                if len(out) >= MAX_RECORDS:
                    raise ValueError("too many records")
                r.pair()
                rid = _id(r)
                rec = r.bytes_(MAX_STREAM_RECORD if field == "streams" else None)
                if field == "streams":
                    objects.parse_stream_record(rid, rec)
                else:
                    wire.unpack(rec)  # bounded first: the record's own parser decodes it freely
                    conversation.parse_record(rid, rec)
                out.append((rid, rec))
        else:
            raise ValueError(f"unexpected field {field!r}")
    r.done()
    if len(records) != 2:
        raise ValueError("a field is missing")
    return frames, records["streams"], records["conversations"]


def _id(r: wire.SchemaReader) -> bytes:
    v = r.bytes_(32)
    if len(v) != 32:
        raise ValueError("an id is not 32 bytes")
    return v


def _read_frame(r: wire.SchemaReader, data_end: int) -> PackFrame:
    if r.array() != 3:
        raise ValueError("a frame is not [offset, length, chunks]")
    offset, length = r.int_(), r.int_()
    if offset < len(PACK_MAGIC) + NONCE or length <= 0 or offset + length > data_end:
        raise CorruptError("a frame lies outside the pack")
    members = []
    total = 0
    for _ in range(r.array()):
        if r.array() != 3:
            raise ValueError("a chunk is not [id, offset, size]")
        cid, o, s = _id(r), r.int_(), r.int_()
        total += s
        if s < 0 or o < 0 or total > entries.MAX_FRAME_BYTES:
            raise CorruptError("a frame's chunk list is damaged")
        members.append((cid, o, s))
    if not members or any(o + s > total for _, o, s in members):
        raise CorruptError("a frame's chunk list is damaged")
    return PackFrame(offset, length, members)


def frame_chunks(what: str, pack: Pack, frame: PackFrame) -> list[tuple[bytes, bytes]]:
    """The ``(id, plain bytes)`` chunks of one frame, each checked against its id."""
    return check_frame(what, pack.body[frame.offset : frame.offset + frame.length], frame)


def check_frame(what: str, data: bytes, frame: PackFrame) -> list[tuple[bytes, bytes]]:
    """The ``(id, plain bytes)`` chunks of ``frame`` given its compressed bytes ``data`` (read
    whole with its pack, or by range), each checked against its id."""
    if len(data) != frame.length:
        raise CorruptError(f"remote object {what} is corrupt (a frame is cut short)")
    size = max((o + s for _, o, s in frame.members), default=0)
    try:
        plain = entries.inflate(b"", data, size)
    except CorruptError:
        raise CorruptError(f"remote object {what} is corrupt (a frame does not decompress)") from None
    out = []
    for cid, offset, csize in frame.members:
        chunk = plain[offset : offset + csize]
        if len(chunk) != csize or chunk_id(chunk) != cid:
            raise CorruptError(f"remote object {what} is corrupt (chunk {cid.hex()} does not match its id)")
        out.append((cid, chunk))
    return out


# -- bundles -----------------------------------------------------------------------------------


#: Bundle versions: 1 (no author), 2 (adds ``user`` and ``host``, who pushed it).  Older
#: readers refuse version 2 by its number, not as damage.
BUNDLE_V = 2
#: The longest user or host name a bundle records.
MAX_WHO = 256


class Bundle(NamedTuple):
    """A parsed bundle: the commit of one push."""

    key: str
    ns: str
    writer: str
    time_ns: int
    checkpoints: list[tuple[bytes, bytes]]  # (id, record), oldest first
    needs: list[str]  # keys of the packs (and bundles with inline data) the checkpoints need
    inline: Pack | None
    user: str = ""  # who pushed it (version 2; "" for version 1)
    host: str = ""
    #: Where its inline pack lies in it, ``(start, end)``, when only its head was read
    #: (:mod:`snapstore.remote.heads`: ``inline`` is then None; the pack is read by range).
    inline_at: tuple[int, int] | None = None


def encode_bundle(
    ns: str, writer: str, time_ns: int, checkpoints: list[tuple[bytes, bytes]], needs: list[str], inline: bytes | None,
    *, user: str = "", host: str = "",
) -> bytes:
    # "inline" stays the last field: a bundle then ends with its inline pack's footer and tail,
    # so browsing reads it by range like a pack (remote/browse.py).  msgpack keeps this order.
    doc = {
        "v": BUNDLE_V, "ns": ns, "writer": writer, "time_ns": time_ns, "user": user[:MAX_WHO], "host": host[:MAX_WHO],
        "checkpoints": [[k, v] for k, v in checkpoints], "needs": needs, "inline": inline,
    }
    packed: bytes = msgpack.packb(doc, use_bin_type=True)
    return BUNDLE_MAGIC + packed


def parse_bundle(key: str, body: bytes) -> Bundle:
    """Parse and check a bundle fetched from ``key``: its hash suffix, every checkpoint record
    (hash and schema), its list of needed objects, and its inline pack."""
    def bad(why: str) -> CorruptError:
        return CorruptError(f"remote object {key} is corrupt ({why})")

    if not key.endswith("-" + chunk_id(body)[:8].hex()):
        raise bad("its content does not match its name")
    if not body.startswith(BUNDLE_MAGIC):
        raise bad("not a bundle")
    try:
        doc = _read_bundle(body)
    except CorruptError as exc:
        raise bad(exc.message) from None
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise bad(f"damaged: {exc}") from None
    inline = doc["inline"]
    pack = parse_pack(key, inline, None) if inline is not None else None
    return Bundle(
        key, doc["ns"], doc["writer"], doc["time_ns"], doc["checkpoints"], doc["needs"], pack,
        doc.get("user", ""), doc.get("host", ""),
    )


def _read_bundle(body: bytes) -> dict[str, Any]:
    """A bundle's fields, each element checked as it is read (:class:`wire.SchemaReader`)."""
    r = wire.SchemaReader(memoryview(body)[len(BUNDLE_MAGIC) :])
    doc: dict[str, Any] = {}
    for _ in range(r.map()):
        read_bundle_field(r, r.str_(32), doc)
    r.done()
    check_bundle_fields(doc)
    return doc


def read_bundle_field(r: wire.SchemaReader, field: str, doc: dict[str, Any]) -> None:
    """Read one field of a bundle into ``doc``, each element checked as it is read."""
    if read_header(r, field, doc):
        return
    if field == "inline":
        doc[field] = r.optional_bytes()
    elif field == "needs":
        doc[field] = needs = []
        for _ in range(r.array()):
            need = r.str_(MAX_KEY)
            if not is_data_key(need):
                raise CorruptError(f"it names {need!r}, not a pack or bundle")
            needs.append(need)
    elif field == "checkpoints":
        doc[field] = cps = []
        for _ in range(r.array()):
            r.pair()
            cid, rec = _id(r), r.bytes_()
            wire.unpack(rec, items=RECORD_ITEMS)  # bounded first: parse_record decodes it freely
            parse_record(cid, rec)
            cps.append((cid, rec))
    else:
        raise ValueError(f"unexpected field {field!r}")


def check_bundle_fields(doc: dict[str, Any]) -> None:
    """ValueError (KeyError) unless a bundle's fields are all there, of a version read here."""
    if doc.get("v") not in (FORMAT, BUNDLE_V):
        raise ValueError(f"unknown bundle version {doc.get('v')!r}")
    for field in ("ns", "writer", "time_ns", "checkpoints", "needs", "inline"):
        if field not in doc:
            raise KeyError(field)


#: What ends the key of a forget record (``log/<ns>/...-<h16>.forget``, remote/history.py).
FORGET_SUFFIX = ".forget"


def read_header(r: wire.SchemaReader, field: str, doc: dict[str, Any]) -> bool:
    """Read ``field`` into ``doc`` if it is one of the fields bundles and forget records share
    (``v``, ``time_ns``, ``ns``, ``writer``, ``user``, ``host``, each bounded); whether it was.
    ValueError for a field seen twice or of the wrong type."""
    if field in doc:
        raise ValueError(f"the field {field!r} appears twice")
    if field in ("v", "time_ns"):
        doc[field] = r.int_()
    elif field in ("ns", "writer"):
        doc[field] = r.str_(MAX_NAME)
    elif field in ("user", "host"):
        doc[field] = r.str_(MAX_WHO)
    else:
        return False
    return True


def is_data_key(key: str) -> bool:
    """Whether ``key`` names a pack or a bundle (what a bundle may say it needs)."""
    parts = key.split("/")
    if parts[0] == "packs":
        return len(parts) == 3 and len(parts[2]) == 64 and parts[1] == parts[2][:2] and _hex(parts[2])
    return (
        parts[0] == "log" and len(parts) == 3 and all(p not in ("", ".", "..") for p in parts[1:])
        and not key.endswith(FORGET_SUFFIX)
    )


def log_prefix(ns: str) -> str:
    """The prefix of the bundles (and forget records) published under namespace ``ns``."""
    return f"log/{encode_name(ns)}/"


def _hex(s: str) -> bool:
    try:
        bytes.fromhex(s)
    except ValueError:
        return False
    return True


def pack_name_of(key: str) -> bytes | None:
    """The hash a pack key names (None for a bundle key)."""
    return bytes.fromhex(key.split("/")[2]) if key.startswith("packs/") else None


# -- refs and config ---------------------------------------------------------------------------


class Ref(NamedTuple):
    checkpoint: bytes
    bundle: str
    time_ns: int
    writer: str


def encode_ref(ref: Ref) -> bytes:
    packed: bytes = msgpack.packb(
        {"v": FORMAT, "checkpoint": ref.checkpoint, "bundle": ref.bundle, "time_ns": ref.time_ns, "writer": ref.writer},
        use_bin_type=True,
    )
    return packed


def parse_ref(key: str, body: bytes) -> Ref:
    try:
        if len(body) > MAX_REF:
            raise ValueError(f"{len(body)} bytes, more than a ref holds ({MAX_REF})")
        doc = wire.unpack(body)
        if not isinstance(doc, dict):
            raise ValueError("not a map")
        cp = doc["checkpoint"]
        bundle = doc["bundle"]
        writer, time_ns = doc["writer"], doc["time_ns"]
        if (
            doc["v"] != FORMAT or not isinstance(cp, bytes) or len(cp) != 32 or not isinstance(bundle, str)
            or not bundle.startswith("log/") or not is_data_key(bundle) or not isinstance(writer, str)
            or type(time_ns) is not int
        ):
            raise ValueError("bad fields")
        return Ref(cp, bundle, time_ns, writer)
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"remote object {key} is corrupt (damaged ref: {exc})") from None


def encode_config(remote_id: bytes, created: int) -> bytes:
    packed: bytes = msgpack.packb({"format": FORMAT, "chunker": PARAMS, "id": remote_id, "created": created}, use_bin_type=True)
    return packed


def parse_config(body: bytes) -> bytes:
    """The remote's id; CorruptError for a damaged config, FormatVersionError for another
    format or chunker (a remote written by another snapstore)."""
    from snapstore.errors import EncryptionKeyError, FormatVersionError

    if body.startswith(CRYPT_MAGIC):
        raise EncryptionKeyError("the remote is encrypted: remove it and add it again with --encrypt "
                                 "(the passphrase in SNAPSTORE_PASSPHRASE or asked for, or --key-file FILE)")
    try:
        if len(body) > MAX_CONFIG:
            raise ValueError(f"{len(body)} bytes, more than a config holds ({MAX_CONFIG})")
        doc = wire.unpack(body, strict_map_key=False)
        fmt, params, rid = doc["format"], doc["chunker"], doc["id"]
        if not isinstance(rid, bytes) or not 8 <= len(rid) <= 64:
            raise ValueError("bad id")
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"remote object {CONFIG_KEY} is corrupt ({exc})") from None
    if fmt != FORMAT:
        raise FormatVersionError(f"the remote has format {fmt!r:.40}; this snapstore reads format {FORMAT}")
    if params != PARAMS:
        raise FormatVersionError("the remote was written with other chunker parameters")
    return rid
