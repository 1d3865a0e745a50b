"""The narrow interface the protocol uses to talk to an object store (:class:`Transport`), and
what its reads return.  :mod:`snapstore.remote.transport` implements it over obstore and
re-exports these names; the wrappers (:mod:`~snapstore.remote.retry`,
:mod:`~snapstore.remote.ranges`) import them from here, so nothing imports in a circle.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

#: The largest object read whole (packs close at 16 MiB plus a frame; bundles hold records).
MAX_GET = 256 << 20


class Got(NamedTuple):
    """An object read whole, the ETag to compare-and-swap it against, and its modification
    time by the engine's clock (0 when unknown)."""

    body: bytes
    etag: str
    mtime_ns: int = 0


class Listed(NamedTuple):
    key: str
    size: int
    mtime_ns: int


class Transport:
    """One request per call, keys relative to the remote's prefix."""

    def get(self, key: str, limit: int = MAX_GET) -> Got | None:
        """The object at ``key``, or None when there is none; CorruptError, before its body
        is read, when it holds more than ``limit`` bytes (a ref, the config or gc's plan is
        small: a planted giant is refused unread)."""
        raise NotImplementedError

    def head(self, key: str) -> Listed | None:
        """The size and time of ``key`` without its body (one HEAD), or None when absent."""
        raise NotImplementedError

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of ``key`` (fewer when the object ends first), or None when
        there is no such object.  One ranged GET: what browsing reads of a pack's frames."""
        raise NotImplementedError

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        """The last ``n`` bytes of ``key`` (all of it when it is shorter) and the object's
        size, or None.  One ranged GET (``Range: bytes=-n``): a pack's footer and its tail."""
        raise NotImplementedError

    def put_create(self, key: str, data: bytes) -> str | None:
        """Create ``key`` only if absent (``If-None-Match: *``): its ETag, or None if it existed."""
        raise NotImplementedError

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        """Replace ``key`` only if its ETag is ``etag`` (``If-Match``): the new ETag, or None."""
        raise NotImplementedError

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[Listed]:
        """The objects under ``prefix`` in key order (one request per page of 1,000).

        ``prefix`` is a whole path ("log/", "refs/"): object_store lists by path segment, so
        "gc/clock" would list "gc/clock/..." and not the key itself."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        """Remove ``key`` (no error when it is already gone)."""
        raise NotImplementedError


