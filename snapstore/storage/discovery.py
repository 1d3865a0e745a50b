"""Finding a tree's store without being told where it is, safely (git's ``safe.directory`` rule).

Searching upwards from the working directory is how a command finds its store, and every
directory above it may belong to someone else (``/tmp``, a shared checkout, a container's
volume).  A store found that way is used only when it belongs to the user running the command,
root included: a ``.snapstore`` another user planted in a parent directory would otherwise
receive root's project, 0600 files and all, from a hook or a plain ``snapshot``.  Naming a store
(``--store DIR``, ``SNAPSTORE_STORE``) is the way to use another user's store on purpose.  The
search also stops at a file-system boundary (a mount point), as git's does by default.

Standard library only: the service client (the console script's first module) uses it too.
"""

from __future__ import annotations

import os

STORE_DIRNAME = ".snapstore"


def holds_store(path: str) -> bool:
    """True when directory ``path`` holds a store (of any generation)."""
    return os.path.lexists(os.path.join(path, "data.mdb")) or os.path.lexists(os.path.join(path, "CURRENT"))


def search(start: str) -> tuple[str | None, str]:
    """``(store_dir, "")`` for the nearest store at or above ``start`` that may be used without
    being named, or ``(None, why)``: ``why`` is empty when there is simply none, and says what was
    refused (another user's store) or where the search stopped (a file-system boundary)."""
    here = os.path.abspath(start)
    try:
        device = os.stat(here).st_dev
    except OSError as exc:
        return None, f"cannot read {here}: {exc.strerror}"
    while True:
        candidate = os.path.join(here, STORE_DIRNAME)
        if holds_store(candidate):
            owner = foreign_owner(candidate)
            if owner is None:
                return candidate, ""
            return None, (
                f"the store {candidate} belongs to another user (uid {owner}) and is not used: a "
                "store found by searching must be your own (name it with --store to use it anyway)"
            )
        parent = os.path.dirname(here)
        if parent == here:
            return None, ""
        try:
            if os.stat(parent).st_dev != device:
                return None, f"the search stopped at the file-system boundary at {here}"
        except OSError as exc:
            return None, f"cannot read {parent}: {exc.strerror}"
        here = parent


def foreign_owner(store_dir: str) -> int | None:
    """The uid owning ``store_dir`` (or a symlink standing for it) when it is not this process's
    effective user; None when it is ours."""
    me = os.geteuid()
    try:
        for st in (os.lstat(store_dir), os.stat(store_dir)):
            if st.st_uid != me:
                return st.st_uid
    except OSError:
        return None  # gone meanwhile: opening it says so
    return None
