"""The stat cache: path -> what the file looked like when its content was last read.

It lets a snapshot skip opening files whose stat fields have not changed.  It is an optimisation
only: deleting the table changes no result, only speed.

Racy files (git's "racy git", borg #3536): a file modified within the same timestamp tick as the
moment its content was read would look unchanged afterwards.  An entry is therefore trusted only
when both its mtime and its ctime are at least RACY_MARGIN_NS older than the moment the content
was read; younger entries are re-read on the next snapshot (once, then they are old enough).
ctime cannot be set by user programs, so "same size, same mtime (set back with utime)" is caught
by ctime too.
"""

from __future__ import annotations

import os
import time

import blake3
import msgpack

TYPE_CHECKING = False
if TYPE_CHECKING:
    from snapstore.tree.scan import Stat

#: Two seconds covers the coarsest common timestamp granularity (FAT) with room to spare.
RACY_MARGIN_NS = 2_000_000_000

#: The clock that stamps the moment a file's content was read (the "now" the racy rule compares
#: with).  A seam: tests replace it to control racy-ness without depending on machine load.
now_ns = time.time_ns


#: LMDB keys are at most 511 bytes: a longer path is keyed by a NUL (never in a path) and its
#: BLAKE3, so a deep tree neither fails to snapshot nor loses its cache.
MAX_KEY = 480


def key(path: bytes) -> bytes:
    """The table key of ``path``'s cache entry."""
    return path if len(path) <= MAX_KEY else long_key(path)


def long_key(path: bytes) -> bytes:
    """The key of a path longer than MAX_KEY."""
    return b"\x00" + blake3.blake3(path).digest()


def encode(st: os.stat_result | Stat, sid: bytes, recorded_ns: int) -> bytes:
    """The cache value of a file read under ``st`` at ``recorded_ns`` with stream id ``sid``."""
    packed: bytes = msgpack.packb(
        [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode, sid, recorded_ns]
    )
    return packed


def lookup(value: bytes | None, st: os.stat_result | Stat) -> bytes | None:
    """The cached stream id for a file whose lstat is ``st``, or None when it must be read."""
    if value is None:
        return None
    try:
        size, mtime, ctime, ino, mode, sid, recorded = _unpack(value)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None  # a damaged cache entry only costs a re-read
    if (size, mtime, ctime, ino, mode) != (
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
        st.st_mode,
    ):
        return None
    if (mtime if mtime > ctime else ctime) >= recorded - RACY_MARGIN_NS:
        return None
    if type(sid) is not bytes or len(sid) != 32:
        return None
    return sid


_unpack = msgpack.unpackb


def stream_id(value: bytes) -> bytes | None:
    """The stream id a cache value names (whatever its age), or None if the value is damaged.

    gc uses it to drop entries whose stream it removes, without knowing the value's layout.
    """
    try:
        sid = _unpack(value)[5]
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException):
        return None
    return sid if type(sid) is bytes else None
