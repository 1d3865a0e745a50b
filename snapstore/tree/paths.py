"""Paths as snapstore handles them: bytes, relative to the tree root, ``/``-separated."""

from __future__ import annotations

import os


def display(rel: bytes) -> str:
    """A printable form of a stored path: bytes that are not UTF-8 appear as ``\\xNN``."""
    return rel.decode("utf-8", "backslashreplace")


def to_json(rel: bytes) -> str:
    """The JSON form of a stored path (lossless: undecodable bytes become lone surrogates)."""
    return os.fsdecode(rel)


def from_user(path: str | bytes) -> bytes:
    """A root-relative path typed by a user or passed by a caller, normalised."""
    raw = os.fsencode(path)
    if os.sep != "/":  # on POSIX a backslash is an ordinary character of a file name
        raw = raw.replace(os.sep.encode(), b"/")
    parts = [p for p in raw.split(b"/") if p and p != b"."]
    return b"/".join(parts)


def parents(path: bytes) -> list[bytes]:
    """The proper ancestors of a ``/``-separated relative path, nearest first.

    ``parents(b"a/b/c") == [b"a/b", b"a"]``; a top-level path has none.  This is the one walk of
    a path's parents: restore's planning and safety checks and the scan all use it.
    """
    out = []
    cut = path.rfind(b"/")
    while cut > 0:
        out.append(path[:cut])
        cut = path.rfind(b"/", 0, cut)
    return out
