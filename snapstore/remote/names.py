"""Remote URLs and the names used in object keys (refs, namespaces)."""

from __future__ import annotations

from typing import NamedTuple

from snapstore.errors import UsageError

#: Characters a namespace keeps as they are in an object key; anything else is %XX (UTF-8).
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
#: Longest encoded name (S3 keys are at most 1,024 bytes; the bundle key adds ~60).
MAX_NAME = 400


class RemoteURL(NamedTuple):
    """Where a remote lives: ``s3://bucket/prefix`` or ``memory://name`` (tests)."""

    scheme: str
    bucket: str
    prefix: str

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")


def shown(url: str) -> str:
    """``url`` as a refusal may quote it: not at all when it may carry a credential (a user
    name or password, a query string such as a presigned signature, a ``KEY:SECRET`` pair
    mistyped anywhere), else quoted with its control characters escaped."""
    rest = url.partition("://")[2] or url
    if any(c in rest for c in "@:?#=") or len(url) > 200:
        return "(not shown: it may hold a credential)"
    return repr(url)


def parse_url(url: str) -> RemoteURL:
    """Parse ``s3://bucket[/prefix]`` (or ``memory://name[/prefix]``); UsageError otherwise."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("s3", "memory"):
        raise UsageError(f"not a remote URL: {shown(url)} (expected s3://bucket/prefix)")
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if "@" in rest or ":" in bucket:
        # s3://KEY:SECRET@bucket would put a credential in the store: never accepted.
        raise UsageError("credentials never go in a remote URL: use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or a profile")
    if any(c in rest for c in "?#"):
        raise UsageError(f"not a remote URL: {shown(url)} (a query or fragment: a remote URL is s3://bucket/prefix)")
    if not bucket or any(c in bucket for c in " \\"):
        raise UsageError(f"not a remote URL: {shown(url)} (no bucket name)")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise UsageError(f"not a remote URL: {shown(url)} (empty, '.' or '..' in the prefix)")
    return RemoteURL(scheme, bucket, prefix)


def encode_name(name: str) -> str:
    """A ref or namespace name as one safe object-key segment (reversible, no ``/``)."""
    if not name:
        raise UsageError("a remote ref name cannot be empty")
    raw = name.encode("utf-8", "surrogateescape")
    out = []
    for i, b in enumerate(raw):
        if b in _SAFE and not (b == ord(".") and i == 0):
            out.append(chr(b))
        else:
            out.append(f"%{b:02X}")
    encoded = "".join(out)
    if len(encoded) > MAX_NAME:
        raise UsageError(f"the remote ref name is too long ({len(raw)} bytes)")
    return encoded


def decode_name(segment: str) -> str:
    """The inverse of :func:`encode_name` (ValueError for a segment it cannot have made)."""
    raw = bytearray()
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "%" and i + 3 <= len(segment):
            raw.append(int(segment[i + 1 : i + 3], 16))  # ValueError for a bad key: the caller's
            i += 3
        else:
            raw += c.encode("ascii")
            i += 1
    return raw.decode("utf-8", "surrogateescape")
