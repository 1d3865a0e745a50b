"""Creating a store directory atomically (``snapstore init``).

The store is built in a private directory beside its final place and renamed into place once
its meta table is durable, so a failed or killed init leaves no half-made store (which ``init``
would call existing and every other command "not a store").

Several inits may race (an agent's parallel tool calls each find no store and make one): each
builds in its own private directory, the first rename wins and the others open the winner's.  An
init holds a shared ``flock`` on its private directory from the moment it exists to its rename, so
the clean-up of killed inits (an exclusive, non-blocking try) never removes a live one; the
directory is made and locked under an exclusive ``flock`` on the parent, which the clean-up holds
too, so no directory is ever seen between its creation and its lock.
"""

from __future__ import annotations

import fcntl
import os

from snapstore.errors import StoreExistsError, TreeIOError
from snapstore.storage import lmdb_generations

#: The prefix of the private directory an init builds a store in.
INIT_PREFIX = ".snapstore-init-"


def build(store_dir: str, meta: dict[bytes, bytes]) -> None:
    """Make a store at ``store_dir`` holding the ``meta`` rows, all at once: built in a private
    directory beside it, then renamed into place, so a failed ``init`` (a full disk, a refused
    map, a kill) leaves no half-made store behind.  An existing non-empty directory (``init
    --store DIR``) is filled in place instead, and what was made in it is removed again on
    failure."""
    import shutil

    from snapstore.storage.lmdb_backend import LmdbBackend

    parent = os.path.dirname(store_dir)
    held: int | None = None  # the shared flock on the private directory (see the module's doc)
    try:
        os.makedirs(parent, exist_ok=True)
        in_place = os.path.isdir(store_dir) and bool(os.listdir(store_dir))
        if in_place:
            work = store_dir
        else:
            work, held = _private_dir(parent)
    except OSError as exc:
        raise TreeIOError(f"cannot create {store_dir}: {exc.strerror}") from exc
    before = set(os.listdir(work)) if in_place else set()
    try:
        backend = LmdbBackend(work, create=True)
        try:
            with backend.write() as batch:
                for key, value in meta.items():
                    batch.put("meta", key, value)
            backend.barrier()
        finally:
            backend.close()
        if not in_place:
            try:
                os.rename(work, store_dir)  # replaces an empty directory; fails on anything else
            except OSError as exc:
                if lmdb_generations.is_store(store_dir):
                    raise StoreExistsError(f"a store already exists at {store_dir}") from exc
                raise TreeIOError(f"cannot create {store_dir}: {exc.strerror}") from exc
            _fsync_dir(parent)
    except BaseException:
        if not in_place:
            shutil.rmtree(work, ignore_errors=True)
        else:
            for name in set(os.listdir(work)) - before:  # what this init made, nothing else
                made = os.path.join(work, name)
                try:
                    if os.path.isdir(made) and not os.path.islink(made):
                        shutil.rmtree(made)
                    else:
                        os.unlink(made)
                except OSError:
                    pass
        raise
    finally:
        if held is not None:
            os.close(held)


def _private_dir(parent: str) -> tuple[str, int]:
    """A new private directory in ``parent`` (owner-only: mkdtemp makes it 0700, and the store
    holds every file's content, including files the owner made unreadable to others) and an fd
    holding a shared flock on it; killed inits' directories are removed first."""
    import tempfile

    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(parent_fd, fcntl.LOCK_EX)
        remove_killed_inits(parent)
        work = tempfile.mkdtemp(prefix=INIT_PREFIX, dir=parent)
        held = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fcntl.flock(held, fcntl.LOCK_SH)  # (LMDB's own lock on the directory is shared too)
        return work, held
    finally:
        os.close(parent_fd)  # (closing drops the flock)


def remove_killed_inits(parent: str) -> None:
    """Remove what an init killed midway left in ``parent`` (its private directory, holding at
    most the LMDB files), so the next snapshot does not record it.  A directory whose init is
    alive is locked (see the module's doc) and left alone; the caller holds the parent's lock."""
    import shutil

    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        if not name.startswith(INIT_PREFIX):
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # gone, a symlink, not a directory: not an init's
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(fd).st_uid == os.geteuid() and set(os.listdir(fd)) <= {"data.mdb", "lock.mdb"}:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:  # locked: an init in progress
            pass
        finally:
            os.close(fd)


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
