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
from typing import NamedTuple

import msgpack

from snapstore.errors import CorruptError
from snapstore.records import conversation
from snapstore.records.checkpoint import parse_record
from snapstore.remote.names import decode_name, encode_name
from snapstore.storage import entries, objects
from snapstore.storage.chunker import PARAMS
from snapstore.storage.objects import chunk_id

FORMAT = 1
CONFIG_KEY = "config"
PACK_MAGIC = b"SNAPPACK"
BUNDLE_MAGIC = b"SNAPBNDL"
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


def pack_key(name: bytes) -> str:
    """The key of the pack whose BLAKE3-256 is ``name``."""
    h = name.hex()
    return f"packs/{h[:2]}/{h}"


def ref_key(ns: str) -> str:
    return f"refs/{encode_name(ns)}"


def ref_name(key: str) -> str:
    """The ref name of a ``refs/<ns>`` key (ValueError when it is not one)."""
    if not key.startswith("refs/") or "/" in key[5:]:
        raise ValueError(key)
    return decode_name(key[5:])


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
    frames, streams, convs = parse_footer(what, body[end - flen : end], end - flen)
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
    what: str, footer: bytes, data_end: int
) -> tuple[list[PackFrame], list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
    """Parse and check a pack's footer: its frames (each within ``[magic + nonce, data_end)``
    and with a sound chunk list) and its records (schema).  CorruptError naming ``what``."""
    def bad(why: str) -> CorruptError:
        return CorruptError(f"remote object {what} is corrupt ({why})")

    try:
        doc = msgpack.unpackb(footer, raw=False, max_bin_len=MAX_OBJECT)
        frames = [
            PackFrame(int(off), int(length), [(bytes(c), int(o), int(s)) for c, o, s in members])
            for off, length, members in doc["frames"]
        ]
        streams = [(bytes(k), bytes(v)) for k, v in doc["streams"]]
        convs = [(bytes(k), bytes(v)) for k, v in doc["conversations"]]
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise bad(f"damaged footer: {exc}") from None
    if len(streams) > MAX_RECORDS or len(convs) > MAX_RECORDS:
        raise bad("too many records")
    for f in frames:
        if f.offset < len(PACK_MAGIC) + NONCE or f.length <= 0 or f.offset + f.length > data_end:
            raise bad("a frame lies outside the pack")
        total = sum(s for _, _, s in f.members)
        if total > entries.MAX_FRAME_BYTES or any(s < 0 or o < 0 or o + s > total for _, o, s in f.members):
            raise bad("a frame's chunk list is damaged")
    try:
        for sid, rec in streams:
            objects.parse_stream_record(sid, rec)
        for rid, rec in convs:
            conversation.parse_record(rid, rec)
    except CorruptError as exc:
        raise bad(exc.message) from None
    return frames, streams, convs


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


class Bundle(NamedTuple):
    """A parsed bundle: the commit of one push."""

    key: str
    ns: str
    writer: str
    time_ns: int
    checkpoints: list[tuple[bytes, bytes]]  # (id, record), oldest first
    needs: list[str]  # keys of the packs (and bundles with inline data) the checkpoints need
    inline: Pack | None


def encode_bundle(
    ns: str, writer: str, time_ns: int, checkpoints: list[tuple[bytes, bytes]], needs: list[str], inline: bytes | None
) -> bytes:
    # "inline" stays the last field: a bundle then ends with its inline pack's footer and tail,
    # so browsing reads it by range like a pack (remote/browse.py).  msgpack keeps this order.
    doc = {
        "v": FORMAT, "ns": ns, "writer": writer, "time_ns": time_ns,
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
        doc = msgpack.unpackb(body[len(BUNDLE_MAGIC) :], raw=False, max_bin_len=MAX_OBJECT)
        if doc["v"] != FORMAT:
            raise ValueError(f"unknown bundle version {doc['v']!r}")
        ns, writer, time_ns = str(doc["ns"]), str(doc["writer"]), int(doc["time_ns"])
        cps = [(bytes(k), bytes(v)) for k, v in doc["checkpoints"]]
        needs = [str(n) for n in doc["needs"]]
        inline = doc["inline"]
        if inline is not None and not isinstance(inline, bytes):
            raise ValueError("bad inline pack")
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise bad(f"damaged: {exc}") from None
    try:
        for cid, rec in cps:
            parse_record(cid, rec)
    except CorruptError as exc:
        raise bad(exc.message) from None
    for n in needs:
        if not is_data_key(n):
            raise bad(f"it names {n!r}, not a pack or bundle")
    pack = parse_pack(key, inline, None) if inline is not None else None
    return Bundle(key, ns, writer, time_ns, cps, needs, pack)


def is_data_key(key: str) -> bool:
    """Whether ``key`` names a pack or a bundle (what a bundle may say it needs)."""
    parts = key.split("/")
    if parts[0] == "packs":
        return len(parts) == 3 and len(parts[2]) == 64 and parts[1] == parts[2][:2] and _hex(parts[2])
    return parts[0] == "log" and len(parts) == 3 and all(p not in ("", ".", "..") for p in parts[1:])


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
        doc = msgpack.unpackb(body, raw=False)
        cp = bytes(doc["checkpoint"])
        bundle = str(doc["bundle"])
        if doc["v"] != FORMAT or len(cp) != 32 or not bundle.startswith("log/") or not is_data_key(bundle):
            raise ValueError("bad fields")
        return Ref(cp, bundle, int(doc["time_ns"]), str(doc["writer"]))
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"remote object {key} is corrupt (damaged ref: {exc})") from None


def encode_config(remote_id: bytes, created: int) -> bytes:
    packed: bytes = msgpack.packb({"format": FORMAT, "chunker": PARAMS, "id": remote_id, "created": created}, use_bin_type=True)
    return packed


def parse_config(body: bytes) -> bytes:
    """The remote's id; CorruptError for a damaged config, FormatVersionError for another
    format or chunker (a remote written by another snapstore)."""
    from snapstore.errors import FormatVersionError

    try:
        doc = msgpack.unpackb(body, raw=False, strict_map_key=False)
        fmt, params, rid = doc["format"], doc["chunker"], bytes(doc["id"])
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"remote object {CONFIG_KEY} is corrupt ({exc})") from None
    if fmt != FORMAT:
        raise FormatVersionError(f"the remote has format {fmt!r}; this snapstore reads format {FORMAT}")
    if params != PARAMS:
        raise FormatVersionError("the remote was written with other chunker parameters")
    return rid
