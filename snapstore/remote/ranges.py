"""Ranged reads: how much of an object's end to read for its footer, and what to do when an
engine does not serve ranges (docs/remote.md, "Browsing: read-through by range").

A single-file read from a fresh machine (``cat --remote``) costs the ref, the heads of its
history's bundles (:mod:`heads`), the footers of the objects its checkpoint needs and the frames
that hold the file.  The footers are the index: they say which frame holds each chunk, at which
offset.  :func:`tail_read` sizes the first read of an object's end: a bundle's inline pack is at
most ``layout.INLINE_MAX`` (1 MiB) and its footer a few hundred bytes for a push of a few files,
so a bundle's end is read in :data:`BUNDLE_TAIL` bytes (64 KiB there read most small bundles
whole: 24 of them were 1.2 MB of a 1.47 MB read; 4 KiB was 6-10 times the footers of a 16-push
history of stdlib edits, 236-679 bytes); a pack's footer
lists up to thousands of chunks, so its end is read in :data:`PACK_TAIL`.  A footer larger than
the first read costs one more ranged GET of exactly the rest.

An engine that answers a ranged GET with the whole object (HTTP 200, not 206) makes obstore
raise :class:`RangeNotServed`.  :class:`RangeFallback` then reads the object whole (bounded as
every whole read is), keeps the last few in memory so a footer and then a frame of one object
cost one read, and says so once per process on stderr: a silent fallback is a bug report nobody
can file.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator

from snapstore.remote.interface import MAX_GET, Got, Listed, Transport
from snapstore.remote.s3errors import RangeNotServed

#: Bytes of a bundle's end read first (its inline pack's footer and tail).
BUNDLE_TAIL = 1 << 10
#: Bytes of a pack's end read first (a footer of up to about 1,400 chunks).
PACK_TAIL = 64 << 10
#: Bytes of whole objects kept by the fallback (the last few read).
FALLBACK_KEPT = 64 << 20

_told = False
_fallbacks = 0  # ranged reads served from whole objects in this process
_told_lock = threading.Lock()


def tail_read(key: str) -> int:
    """How many bytes of ``key``'s end the first footer read asks for."""
    return PACK_TAIL if key.startswith("packs/") else BUNDLE_TAIL


def fell_back() -> bool:
    """Whether this process read whole objects for want of ranged reads."""
    return _fallbacks > 0


def fallbacks() -> int:
    """How many ranged reads this process served from whole objects."""
    return _fallbacks


def _say_once(key: str) -> None:
    global _told, _fallbacks
    with _told_lock:
        _fallbacks += 1
        if _told:
            return
        _told = True
    sys.stderr.write(
        "snapstore: warning: the remote does not serve ranged reads (it answered a Range request for "
        f"{key} with the whole object): reading whole objects instead, which reads more\n"
    )
    sys.stderr.flush()


class RangeFallback(Transport):
    """``inner`` with ranged reads served from whole reads when the engine ignores ranges."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self._whole: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def _object(self, key: str) -> bytes | None:
        with self._lock:
            body = self._whole.get(key)
        if body is not None:
            return body
        got = self.inner.get(key, MAX_GET)
        if got is None:
            return None
        with self._lock:
            self._whole[key] = got.body
            while sum(map(len, self._whole.values())) > FALLBACK_KEPT and len(self._whole) > 1:
                self._whole.popitem(last=False)
        return got.body

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        try:
            return self.inner.get_range(key, start, end)
        except RangeNotServed:
            _say_once(key)
        body = self._object(key)
        return None if body is None else body[start:end]

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        try:
            return self.inner.get_suffix(key, n)
        except RangeNotServed:
            _say_once(key)
        body = self._object(key)
        return None if body is None else (body[-n:], len(body))

    def get(self, key: str, limit: int = MAX_GET) -> Got | None:
        return self.inner.get(key, limit)

    def head(self, key: str) -> Listed | None:
        return self.inner.head(key)

    def put_create(self, key: str, data: bytes) -> str | None:
        return self.inner.put_create(key, data)

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        return self.inner.put_update(key, data, etag)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[Listed]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)
