"""Creating a store directory atomically (``snapstore init``).

The store is built in a private directory beside its final place and renamed into place once
its meta table is durable, so a failed or killed init leaves no half-made store (which ``init``
would call existing and every other command "not a store").
"""

from __future__ import annotations

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
    import tempfile

    from snapstore.storage.lmdb_backend import LmdbBackend

    parent = os.path.dirname(store_dir)
    try:
        os.makedirs(parent, exist_ok=True)
        remove_killed_inits(parent)
        in_place = os.path.isdir(store_dir) and bool(os.listdir(store_dir))
        # Owner-only (mkdtemp makes it 0700): the store holds every file's content, including
        # files the owner made unreadable to others (mode 0600 in the tree).
        work = store_dir if in_place else tempfile.mkdtemp(prefix=INIT_PREFIX, dir=parent)
    except OSError as exc:
        raise TreeIOError(f"cannot create {store_dir}: {exc.strerror}") from exc
    before = set(os.listdir(work)) if in_place else set()
    try:
        backend = LmdbBackend(work, create=True)
        try:
            with backend.write() as batch:
                for key, value in meta.items():
                    batch.put("meta", key, value)
            backend.sync()
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


def remove_killed_inits(parent: str) -> None:
    """Remove what an init killed midway left in ``parent`` (its private directory, holding at
    most the LMDB files), so the next snapshot does not record it."""
    import shutil

    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        if not name.startswith(INIT_PREFIX) or os.path.islink(path) or not os.path.isdir(path):
            continue
        if os.stat(path).st_uid == os.geteuid() and set(os.listdir(path)) <= {"data.mdb", "lock.mdb"}:
            shutil.rmtree(path, ignore_errors=True)


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
