"""The store as the pages see it: each Store call holds the UI's lock, nothing else does.

Store calls from the UI run one at a time (as before: a page must not read the tree while a
restore writes it), but only for the call itself.  Rendering what a call returned, highlighting,
and reading file contents through a change's loaders (content-addressed, immutable, read in
LMDB read transactions that any thread may open) happen outside the lock, so a page busy
rendering a huge diff never holds back another page or an action.
"""

from __future__ import annotations

import functools
import threading
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from snapstore.store import Store


class _LockedStore:
    def __init__(self, store: Store, lock: threading.RLock):
        self._store = store
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value):
            return value

        @functools.wraps(value)
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return value(*args, **kwargs)

        return call


def locked(store: Store, lock: threading.RLock) -> Store:
    """``store`` with every method call made under ``lock`` (attributes read as they are).

    A generator method (``iter_bytes``) runs wholly outside the lock, in the thread that
    iterates it: it only reads, in a read transaction of its own.
    """
    return cast("Store", _LockedStore(store, lock))


__all__ = ["locked"]
