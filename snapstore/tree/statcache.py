"""The stat cache: path -> what the file looked like when its content was last read.

It lets a snapshot skip opening files whose stat fields have not changed.  It is an optimisation
only: deleting the table changes no result, only speed.

Racy files (git's "racy git", borg #3536): a file modified within the same timestamp tick as the
moment its content was read would look unchanged afterwards.  An entry is therefore trusted only
when both its mtime and its ctime are at least RACY_MARGIN_NS older than the moment the content
was read; younger entries are re-read on the next snapshot (once, then they are old enough).
ctime cannot be set by user programs, so "same size, same mtime (set back with utime)" is caught
by ctime too.

Files a restore wrote (:func:`written`) are known without being read: their content is what the
restore wrote, up to its last write (their mtime).  Such an entry is trusted when the file's
ctime (set by the rename that gave it its name, after that last write) is later than its mtime
and the mtime has sub-second precision: the file system's clock then had already moved past the
mtime, so any later write stamps a newer mtime, which the stat comparison catches.  (Without
sub-second mtimes, as on FAT or ext3, a later write in the same second could keep the mtime: the
entry is not trusted and the file is read by the next snapshot, as before.)

A file rewritten with its own bytes (a touch) keeps its parent checkpoint's entry, mtime
included (ops.snapshot.keep): its value then also holds that mtime (:func:`encode`'s ``kept``),
which the entry made from it (:func:`lookup_entry`) records instead of the file's.
"""

from __future__ import annotations

import os
import stat
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


def encode(st: os.stat_result | Stat, sid: bytes, recorded_ns: int, kept: int | None = None) -> bytes:
    """The cache value of a file read under ``st`` at ``recorded_ns`` with stream id ``sid``.
    ``kept``: the mtime the checkpoint records for the file when it is not ``st``'s (its
    parent's entry, kept: the file was touched, not changed)."""
    fields = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode, sid, recorded_ns]
    if kept is not None and kept != st.st_mtime_ns:
        fields.append(kept)
    packed: bytes = msgpack.packb(fields)
    return packed


#: The ``recorded`` field of an entry :func:`written` made (not a time: the write rule applies).
WRITTEN = -1


def written(before: os.stat_result, after: os.stat_result, sid: bytes) -> bytes | None:
    """The cache value of a file this process wrote, or None when it must be read back.

    ``before`` is the fstat of the file's descriptor after its last write (and chmod),
    ``after`` the lstat of its final name after the rename: the same inode, size and mtime show
    nothing wrote to it in between (a write in a later clock tick would change the mtime).
    """
    if (
        not stat.S_ISREG(after.st_mode)
        or (after.st_ino, after.st_size, after.st_mtime_ns) != (before.st_ino, before.st_size, before.st_mtime_ns)
        or not _write_settled(after.st_mtime_ns, after.st_ctime_ns)
    ):
        return None
    return encode(after, sid, WRITTEN)


def _write_settled(mtime: int, ctime: int) -> bool:
    # The clock moved on after the last write (ctime > mtime), and the mtime is fine-grained.
    return ctime > mtime and mtime % 1_000_000_000 != 0


def lookup(value: bytes | None, st: os.stat_result | Stat) -> bytes | None:
    """The cached stream id for a file whose lstat is ``st``, or None when it must be read."""
    if value is None:
        return None
    try:
        size, mtime, ctime, ino, mode, sid, recorded = _unpack(value)
    except (ValueError, TypeError, msgpack.UnpackException):
        # (a value that keeps an mtime has eight items: rare, so not in the way of the others)
        return _lookup_kept(value, st) if value[:1] == KEPT_HEADER else None  # else damaged: a re-read
    if (size, mtime, ctime, ino, mode) != (
        st.st_size,
        st.st_mtime_ns,
        st.st_ctime_ns,
        st.st_ino,
        st.st_mode,
    ):
        return None
    if recorded == WRITTEN:
        if not _write_settled(mtime, ctime):
            return None
    elif (mtime if mtime > ctime else ctime) >= recorded - RACY_MARGIN_NS:
        return None
    if type(sid) is not bytes or len(sid) != 32:
        return None
    return sid


#: The first byte of a value that keeps an mtime (a msgpack array of eight items).
KEPT_HEADER = b"\x98"


def _lookup_kept(value: bytes, st: os.stat_result | Stat) -> bytes | None:
    """:func:`lookup` of a value with a kept mtime: the same rules for its first seven items."""
    try:
        fields = _unpack(value)
        if len(fields) != 8 or type(fields[7]) is not int:
            return None
        return lookup(msgpack.packb(fields[:7]), st)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None


def kept_mtime(value: bytes) -> int:
    """The mtime a value whose :func:`lookup` gave a stream id keeps (its first byte is
    :data:`KEPT_HEADER`)."""
    mtime: int = _unpack(value)[7]
    return mtime


def lookup_entry(value: bytes | None, st: os.stat_result | Stat) -> tuple[bytes, int] | None:
    """``(stream id, the mtime its entry records)`` for a file whose lstat is ``st`` (the
    mtime is ``st``'s unless the value keeps another: :func:`encode`), or None when it must
    be read.  (worktree.classify makes the same pair inline.)"""
    sid = lookup(value, st)
    if sid is None or value is None:
        return None
    return sid, kept_mtime(value) if value[:1] == KEPT_HEADER else st.st_mtime_ns


_unpack = msgpack.unpackb


def known(value: bytes) -> tuple[bytes, int] | None:
    """``(stream id, the mtime its entry records)`` of a cache value, whatever its age and
    whatever the file's stat is now; None when the value is damaged."""
    try:
        fields = _unpack(value)
        sid, mtime = fields[5], fields[7] if len(fields) > 7 else fields[1]
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException):
        return None
    return (sid, mtime) if type(sid) is bytes and type(mtime) is int else None


def stream_id(value: bytes) -> bytes | None:
    """The stream id a cache value names (whatever its age), or None if the value is damaged.

    gc uses it to drop entries whose stream it removes, without knowing the value's layout.
    """
    try:
        sid = _unpack(value)[5]
    except (ValueError, TypeError, IndexError, KeyError, msgpack.UnpackException):
        return None
    return sid if type(sid) is bytes else None
