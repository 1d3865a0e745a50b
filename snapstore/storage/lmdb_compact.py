"""Compaction of an LMDB store: a new generation without free pages.

LMDB never shrinks its file; pages freed by gc are reused but the size stays.  :func:`compact`
(the caller holds the store's writer lock) writes a compact copy of the current generation into
a new directory ``gen-N+1/`` (``env.copy(compact=True)``), fsyncs it, checks that it opens and
reads, and then names it in ``CURRENT`` (written to ``CURRENT.tmp``, fsynced, renamed, the
directory fsynced).  Every process follows CURRENT at its next transaction (see
:mod:`snapstore.storage.lmdb_generations`); old generations are deleted once no process has
them open.  Nothing here depends on LMDB's file layout.

Crash safety: until the rename of CURRENT, the old generation is the store and the new directory
is garbage (removed by the next writer); after it, the new generation is complete on disk.
"""

from __future__ import annotations

import os

import lmdb

from snapstore.errors import TreeIOError
from snapstore.storage.backend import TABLES
from snapstore.storage.lmdb_env import translate
from snapstore.storage.lmdb_generations import CURRENT, Generations, gen_path


def compact(gens: Generations) -> tuple[int, int]:
    """Write and switch to a compact new generation; returns ``(size before, size after)``."""
    gens.follow()
    gens.remove_old()
    shared = gens.current
    before = os.path.getsize(os.path.join(shared.path, "data.mdb"))
    name = gens.next_name()
    new_dir = gen_path(gens.store_dir, name)
    os.mkdir(new_dir, 0o700)
    with shared.write_lock:
        txnid = shared.last_txnid()
        try:
            shared.env.copy(new_dir, compact=True)
        except lmdb.Error as exc:
            raise translate(exc, "cannot compact the store") from exc
        new = os.path.join(new_dir, "data.mdb")
        _fsync(new)
        _check_copy(new_dir)
        _fsync(new_dir)
        if shared.last_txnid() != txnid:
            raise TreeIOError("the store changed during compaction; nothing was replaced")
        tmp = os.path.join(gens.store_dir, CURRENT + ".tmp")
        if os.path.lexists(tmp):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, f"{name}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, os.path.join(gens.store_dir, CURRENT))
        _fsync(gens.store_dir)
    gens.follow()
    gens.remove_old()
    return before, os.path.getsize(new)


def _check_copy(path: str) -> None:
    """Open the copy on its own (it gets its own lock file) and read its tables."""
    try:
        env = lmdb.open(path, subdir=True, max_dbs=len(TABLES) + 2, create=False)
    except lmdb.Error as exc:
        raise TreeIOError(f"compaction: the copy does not open ({exc}); nothing was replaced") from exc
    try:
        with env.begin() as txn:
            if txn.get(b"meta") is None:
                raise TreeIOError("compaction: the copy has no tables; nothing was replaced")
    finally:
        env.close()


def _fsync(path: str) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    if os.path.isdir(path):
        flags |= os.O_DIRECTORY
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
