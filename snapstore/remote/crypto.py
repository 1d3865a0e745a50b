"""Client-side encryption of a remote: a :class:`Transport` that encrypts every object and name.

The protocol modules (push, fetch, browse, gc, verify, doctor) are unchanged: they see plain
keys and plain bodies through :class:`EncryptedTransport`, which wraps the engine's transport.
What goes to the bucket (docs/remote.md, "Encryption"):

* **bodies**: ``MAGIC`` then segments of ``SEGMENT`` plain bytes, each sealed on its own with
  AES-256-GCM: ``nonce (12) | ciphertext | tag (16)``.  The nonce is 8 random bytes drawn once
  per object plus the segment's number, so a segment moved within an object, or spliced in from
  another object or another version of the same key, fails.  The associated data binds the
  object's plain key (a bucket writer cannot swap two objects) and whether the segment is the
  last one.  Every object ends with a segment shorter than ``SEGMENT`` (empty if need be), so a
  cut anywhere, even on a segment boundary, is found.  Segments make ranged reads possible: a
  range of the plain object maps to the segments covering it, each checked on its own.
* **names**: everything after the first path segment (``packs/``, ``log/``, ``refs/``,
  ``gc/``, ``doctor/``) is encrypted deterministically with AES-SIV (RFC 5297) and written in
  base32.  Deterministic, because create-only writes and compare-and-swap need one stored name
  per plain name; invertible (unlike a keyed hash), because listings must give back the names:
  ``fetch`` lists refs, ``gc`` and ``verify`` list bundles and packs.  So pack names (the
  BLAKE3 of the plain pack), ref names (task names), bundle times and writer ids never reach
  the bucket.

The keys come from one random 32-byte master key (:mod:`snapstore.remote.keys`) through HKDF.
``cryptography`` is imported here only, and only when an encrypted remote is used.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from snapstore.errors import CorruptError
from snapstore.remote.layout import CRYPT_MAGIC as MAGIC
from snapstore.remote.transport import MAX_GET, Got, Listed, Transport

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV

#: Plain bytes per sealed segment: a ranged read fetches at most two segments more than it
#: needs; each segment costs ``OVERHEAD`` bytes (0.17%).
SEGMENT = 16 << 10
NONCE = 12
TAG = 16
OVERHEAD = NONCE + TAG
_FULL = SEGMENT + OVERHEAD
#: Keys the layer keeps for itself, in the clear (docs/remote.md): never a protocol key.
OWN = ("crypt", "keys")


class Ciphers:
    """The data and name ciphers derived from a master key, and the key check value."""

    def __init__(self, master: bytes) -> None:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESSIV
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        def derive(length: int, info: bytes) -> bytes:
            return HKDF(hashes.SHA256(), length, salt=None, info=b"snapstore remote " + info).derive(master)

        self.data: AESGCM = AESGCM(derive(32, b"data v1"))
        self.names: AESSIV = AESSIV(derive(64, b"names v1"))
        #: Names the master key without revealing it: a client that unwrapped another master
        #: (the loser of two first pushes at once) tells it from the remote's.
        self.check = derive(16, b"check v1")


def cipher_size(plain: int) -> int:
    """The stored size of an object of ``plain`` bytes."""
    return len(MAGIC) + (plain // SEGMENT) * _FULL + plain % SEGMENT + OVERHEAD


def plain_size(stored: int) -> int | None:
    """The plain size of a stored object of ``stored`` bytes; None when no object sealed here
    has that size (a cut or padded one)."""
    rest = stored - len(MAGIC)
    if rest < OVERHEAD:
        return None
    full, last = divmod(rest, _FULL)
    return full * SEGMENT + last - OVERHEAD if last >= OVERHEAD else None


def _aad(key: str, final: bool) -> bytes:
    return b"snapstore v1\0" + key.encode() + (b"\0\1" if final else b"\0\0")


def seal(c: Ciphers, key: str, plain: bytes) -> bytes:
    """``plain`` sealed for the object ``key``."""
    salt = os.urandom(NONCE - 4)
    view = memoryview(plain)
    full = len(plain) // SEGMENT
    out = bytearray(MAGIC)
    for i in range(full + 1):
        nonce = salt + i.to_bytes(4, "big")
        out += nonce
        out += c.data.encrypt(nonce, view[i * SEGMENT : (i + 1) * SEGMENT], _aad(key, i == full))
    return bytes(out)


def _corrupt(key: str, why: str) -> CorruptError:
    return CorruptError(
        f"remote object {key} is corrupt ({why}: altered, cut short, moved from another name, "
        "or not sealed with this remote's key)"
    )


def _open_segments(c: Ciphers, key: str, data: bytes | memoryview, first: int, ends: bool) -> bytes:
    """The plain bytes of the consecutive segments ``data`` holds, the first being number
    ``first``; ``ends``: ``data`` reaches the object's end (its last segment is the final one)."""
    from cryptography.exceptions import InvalidTag

    out = bytearray()
    salt: bytes | None = None
    view = memoryview(data)
    for n, pos in enumerate(range(0, len(data), _FULL)):
        piece = view[pos : pos + _FULL]
        final = len(piece) < _FULL
        if len(piece) < OVERHEAD or (final and pos + len(piece) != len(data)):
            raise _corrupt(key, "a segment is cut short")
        nonce = bytes(piece[:NONCE])
        if salt is None:
            salt = nonce[:-4]
        if nonce[:-4] != salt or int.from_bytes(nonce[-4:], "big") != first + n:
            raise _corrupt(key, "a segment is out of place")
        try:
            out += c.data.decrypt(nonce, piece[NONCE:], _aad(key, final))
        except InvalidTag:
            raise _corrupt(key, "it does not decrypt") from None
    if ends and (not data or len(data) % _FULL == 0):
        raise _corrupt(key, "its last segment is missing")
    return bytes(out)


def unseal(c: Ciphers, key: str, body: bytes) -> bytes:
    """The plain bytes of the whole stored object ``key``; CorruptError unless every segment
    is there, in place, and authentic."""
    if not body.startswith(MAGIC):
        raise _corrupt(key, "it is not sealed")
    if plain_size(len(body)) is None:
        raise _corrupt(key, f"its size, {len(body)} bytes, is no sealed object's")
    return _open_segments(c, key, memoryview(body)[len(MAGIC) :], 0, True)


def _b32(data: bytes) -> str:
    return base64.b32encode(data).decode().rstrip("=").lower()


def _unb32(text: str) -> bytes:
    return base64.b32decode(text.upper() + "=" * (-len(text) % 8))


def stored_key(c: Ciphers, key: str) -> str:
    """The name the bucket sees for the plain key ``key`` (``config`` stays ``config``)."""
    top, sep, rest = key.partition("/")
    if top in OWN:
        raise ValueError(f"{key!r} is a key the encryption layer keeps for itself")
    if not sep or not rest:
        return key
    return f"{top}/{_b32(c.names.encrypt(rest.encode(), [b'snapstore name v1', top.encode()]))}"


def plain_key(c: Ciphers, stored: str) -> str | None:
    """The plain key of a stored name, or None for a name not sealed with this key."""
    from cryptography.exceptions import InvalidTag

    top, sep, rest = stored.partition("/")
    if not sep or top in OWN:
        return None if top in OWN else stored
    try:
        return f"{top}/{c.names.decrypt(_unb32(rest), [b'snapstore name v1', top.encode()]).decode()}"
    except (InvalidTag, ValueError, UnicodeDecodeError):
        return None


class EncryptedTransport(Transport):
    """:class:`Transport` that seals every body and name it passes to ``inner`` (see the
    module's docstring).  Thread-safe: the ciphers hold no state between calls."""

    def __init__(self, inner: Transport, ciphers: Ciphers) -> None:
        self.inner = inner
        self.c = ciphers

    def _sk(self, key: str) -> str:
        return stored_key(self.c, key)

    def get(self, key: str, limit: int = MAX_GET) -> Got | None:
        got = self.inner.get(self._sk(key), cipher_size(min(limit, MAX_GET)))
        if got is None:
            return None
        return Got(unseal(self.c, key, got.body), got.etag, got.mtime_ns)

    def head(self, key: str) -> Listed | None:
        got = self.inner.head(self._sk(key))
        return None if got is None else Listed(key, plain_size(got.size) or 0, got.mtime_ns)

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        if not 0 <= start < end or end - start > MAX_GET:
            raise ValueError(f"bad range {start}-{end}")
        first, last = start // SEGMENT, (end - 1) // SEGMENT
        at = len(MAGIC) + first * _FULL
        data = self.inner.get_range(self._sk(key), at, len(MAGIC) + (last + 1) * _FULL)
        if data is None:
            return None
        # A short answer ends at the object's end: its last segment must then be the final one.
        plain = _open_segments(self.c, key, data, first, len(data) < (last + 1 - first) * _FULL)
        return plain[start - first * SEGMENT : end - first * SEGMENT]

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        if not 0 < n <= MAX_GET:
            raise ValueError(f"bad suffix length {n}")
        want = (-(-n // SEGMENT) + 1) * _FULL  # the final segment plus enough whole ones
        got = self.inner.get_suffix(self._sk(key), want)
        if got is None:
            return None
        data, stored = got
        size = plain_size(stored)
        if size is None or len(data) != min(want, stored):
            raise _corrupt(key, f"its size, {stored} bytes, is no sealed object's")
        body_from = stored - len(data)  # where ``data`` starts in the stored object
        first = max(0, -(-(body_from - len(MAGIC)) // _FULL))
        skip = len(MAGIC) + first * _FULL - body_from
        plain = _open_segments(self.c, key, data[skip:], first, True)
        return plain[max(0, len(plain) - n) :], size

    def put_create(self, key: str, data: bytes) -> str | None:
        return self.inner.put_create(self._sk(key), seal(self.c, key, data))

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        return self.inner.put_update(self._sk(key), seal(self.c, key, data), etag)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[Listed]:
        """As the engine's, in plain-key order.  Stored names do not sort as plain ones, so
        the whole top-level prefix is listed and sorted here (``start_after`` saves nothing)."""
        top = prefix.partition("/")[0]
        entries = []
        for e in self.inner.list(top + "/" if "/" in prefix else prefix):
            key = plain_key(self.c, e.key)
            if key is None or not key.startswith(prefix) or (start_after is not None and key <= start_after):
                continue  # not ours: written without this key (remote verify reads what it needs)
            entries.append(Listed(key, plain_size(e.size) or 0, e.mtime_ns))
        yield from sorted(entries)

    def delete(self, key: str) -> None:
        self.inner.delete(self._sk(key))
