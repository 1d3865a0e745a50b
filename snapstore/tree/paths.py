"""Paths as snapstore handles them: bytes, relative to the tree root, ``/``-separated."""

from __future__ import annotations

import os
from collections.abc import Iterator

from snapstore.platform import files


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
    return list(iter_parents(path))


def iter_parents(path: bytes) -> Iterator[bytes]:
    """:func:`parents`, lazily: for walks that stop at the first ancestor already seen."""
    cut = path.rfind(b"/")
    while cut > 0:
        yield path[:cut]
        cut = path.rfind(b"/", 0, cut)


#: Paths shorter than this are opened by name in one system call (the fast, common case); longer
#: ones are reached one directory fd at a time, so a tree deeper than PATH_MAX (4096 on Linux)
#: can still be read.  Well below PATH_MAX so the root's own length never tips it over.
SHORT_PATH = 3072

#: Flags that open a directory for listing without following a symlink in its last component.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TRAVERSE = files.traverse_flag()  # (walk through a directory without needing its read bit)
_WALK_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | (_TRAVERSE or os.O_RDONLY)


def open_dir(name: bytes, dir_fd: int | None = None) -> int:
    """Open directory ``name`` (relative to ``dir_fd`` when given) for listing, never following
    a symlink in its last component."""
    return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def open_beneath(root: bytes, rel: bytes, flags: int) -> int:
    """``os.open`` of the root-relative path ``rel`` with ``flags``, at any depth.

    A short path is opened by name.  A longer one is walked from ``root`` one directory fd at a
    time (each parent opened with O_NOFOLLOW|O_DIRECTORY), so ENAMETOOLONG never happens and no
    parent symlink is followed on that walk.  Raises OSError like ``os.open``.
    """
    if len(root) + len(rel) < SHORT_PATH:
        return os.open(root + b"/" + rel, flags)
    parts = rel.split(b"/")
    fd = os.open(root, os.O_DIRECTORY | os.O_CLOEXEC | (_TRAVERSE or os.O_RDONLY))
    try:
        for part in parts[:-1]:
            nfd = os.open(part, _WALK_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return os.open(parts[-1], flags, dir_fd=fd)
    finally:
        os.close(fd)


def is_inside(path: str, top: str) -> bool:
    """Whether the file-system path ``path`` is ``top`` or below it, both as given (callers
    resolve symlinks first when they must: ``os.path.realpath``)."""
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)

