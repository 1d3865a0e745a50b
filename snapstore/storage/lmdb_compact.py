"""Compaction of an LMDB store: rewrite data.mdb without its free pages.

LMDB never shrinks its file; pages freed by gc are reused but the size stays.  :func:`compact`
writes a compact copy into a work directory inside the store (so the final rename stays on one
file system), checks it, and renames it over data.mdb: a crash leaves either file whole, and the
next compaction removes a leftover work directory.  Other processes still map the old, unlinked
file; every writer compares data.mdb's inode after taking the writer lock and reopens
(``LmdbBackend.refresh``).

LMDB keeps the id of the last committed transaction in the lock file (lock.mdb) as well as in
the two meta pages of data.mdb, and readers and writers of a process that attaches to an
existing lock file trust the lock file's copy to pick the current meta page.  A compacted copy
restarts at transaction 1, so renaming it in while another process keeps lock.mdb open would
make that process (and every process opening the store after it) read the wrong meta page.
We therefore stamp the copy with the live file's transaction id T: both meta pages get the
copy's (identical) root, page T % 2 with id T and the other with T - 1.  Whichever page a
process picks, it sees the compacted tree, and the next commit (T + 1) continues the sequence.
Layout (LMDB 0.9, 64-bit): a 16-byte page header, then MDB_meta: magic u32, version u32,
address, mapsize, two MDB_db records of 48 bytes, last_pgno u64 at 136, txnid u64 at 144.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Callable

import lmdb

from snapstore.errors import TreeIOError
from snapstore.storage.backend import TABLES
from snapstore.storage.lmdb_env import Env, translate

#: The work directory of a compaction, inside the store directory.
COMPACT_DIR = "compact.tmp"

_META_MAGIC = 0xBEEFC0DE
_META_START = 16
_META_END = 152
_TXNID_AT = 144


def compact(shared: Env, sync: Callable[[], None]) -> tuple[int, int]:
    """Rewrite ``shared``'s data.mdb without free pages; returns ``(size before, size after)``.

    The caller holds the store's writer lock.  Steps: ``env.copy(compact=True)`` into the work
    directory; give the copy the transaction id of the live file (see the module docstring);
    fsync; check the copy opens and reads; rename it over data.mdb; fsync the directory; reopen.
    """
    data = os.path.join(shared.path, "data.mdb")
    work_dir = os.path.join(shared.path, COMPACT_DIR)
    before = os.path.getsize(data)
    remove_work_dir(work_dir)
    os.mkdir(work_dir, 0o700)
    try:
        sync()
        with shared.write_lock:
            txnid = shared.last_txnid()
            try:
                shared.env.copy(work_dir, compact=True)
            except lmdb.Error as exc:
                raise translate(exc, "cannot compact the store") from exc
            new = os.path.join(work_dir, "data.mdb")
            _stamp_txnid(new, txnid)
            fd = os.open(new, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            _check_copy(work_dir, txnid)
            lock_copy = os.path.join(work_dir, "lock.mdb")
            if os.path.lexists(lock_copy):
                os.unlink(lock_copy)
            if shared.last_txnid() != txnid:
                raise TreeIOError("the store changed during compaction; nothing was replaced")
            os.rename(new, data)
            _fsync_dir(shared.path)
    finally:
        remove_work_dir(work_dir)
    shared.reopen()
    return before, os.path.getsize(data)


def remove_work_dir(path: str) -> None:
    """Remove a (leftover) work directory; a symlink planted in its place is removed, not followed."""
    if os.path.islink(path):
        os.unlink(path)
        return
    shutil.rmtree(path, ignore_errors=True)


def _stamp_txnid(path: str, txnid: int) -> None:
    if struct.calcsize("P") != 8:
        raise TreeIOError("compaction needs a 64-bit LMDB build")
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    with open(fd, "r+b") as f:
        head = f.read(_META_END)
        magic, version = struct.unpack_from("<II", head, _META_START)
        psize = struct.unpack_from("<I", head, _META_START + 24)[0]  # FREE_DBI.md_pad
        if magic != _META_MAGIC or version != 1 or psize < 512 or psize & (psize - 1):
            raise TreeIOError("compaction: unexpected LMDB file layout; nothing was replaced")
        f.seek(psize)
        meta1 = bytearray(f.read(_META_END))
        if struct.unpack_from("<II", meta1, _META_START) != (_META_MAGIC, 1):
            raise TreeIOError("compaction: unexpected LMDB file layout; nothing was replaced")
        copy_txn = struct.unpack_from("<Q", meta1, _TXNID_AT)[0]
        f.seek(0)
        meta0 = f.read(_META_END)
        if copy_txn < struct.unpack_from("<Q", meta0, _TXNID_AT)[0]:
            raise TreeIOError("compaction: unexpected LMDB copy; nothing was replaced")
        body = bytes(meta1[_META_START:_TXNID_AT])
        for page in (0, 1):
            stamp = txnid if page == txnid % 2 else max(txnid - 1, 0)
            f.seek(page * psize + _META_START)
            f.write(body + struct.pack("<Q", stamp))
        f.flush()


def _check_copy(work_dir: str, txnid: int) -> None:
    """Open the stamped copy on its own (fresh lock file) and read every table's first key."""
    try:
        env = lmdb.open(work_dir, subdir=True, max_dbs=len(TABLES) + 2, readonly=False, create=False)
    except lmdb.Error as exc:
        raise TreeIOError(f"compaction: the copy does not open ({exc}); nothing was replaced") from exc
    try:
        if env.info()["last_txnid"] != txnid:
            raise TreeIOError("compaction: the copy has the wrong transaction id; nothing was replaced")
        with env.begin() as txn:
            if txn.get(b"meta") is None:
                raise TreeIOError("compaction: the copy has no tables; nothing was replaced")
    finally:
        env.close()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
