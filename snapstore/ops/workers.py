"""Thread pools kept for the life of the process.

A restore stages its files in a pool and reads its sources ahead in another; made afresh for
every restore, their threads cost a start each, every time, and each new thread starts
with an empty frame cache (storage.entries keeps decoded frames per thread).  A long-lived
Store (the service, an agent's process) restores many times: the pools, their threads and
those caches are kept instead.  The threads are the executor's own (joined at exit).

A forked child inherits the pools without their threads (a job submitted to one would never
run): the child starts with none and makes its own on first use.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

_pools: dict[str, ThreadPoolExecutor] = {}
_lock = threading.Lock()


def pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool called ``name`` (made on first use with ``workers`` threads)."""
    with _lock:
        found = _pools.get(name)
        if found is None:
            from concurrent.futures import ThreadPoolExecutor

            found = _pools[name] = ThreadPoolExecutor(workers, thread_name_prefix=f"snapstore-{name}")
        return found


def _forget_after_fork() -> None:
    """In a forked child: the parent's pools have no threads here (their executors are left
    alone, not shut down: shutting one down would wait for threads that do not exist)."""
    global _lock
    _lock = threading.Lock()
    _pools.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
