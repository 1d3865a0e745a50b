"""When a committed write reaches the disk: the store's durability setting.

Every environment is opened with LMDB's ``MDB_NOMETASYNC`` (``metasync=False``) unless the
setting is ``off``: a commit writes its data pages, ``fdatasync``\\ s them, then writes its meta
page (the page that makes the commit the store's current state) without a sync.  The next
commit's ``fdatasync`` or an explicit ``env.sync`` flushes that meta page.  LMDB documents that
this "maintains database integrity, but a system crash may undo the last committed transaction".

The three settings (``storage.durability``; ``Store.open(durability=...)``):

``full``
    After each operation (a checkpoint, a restore's records) the meta page is synced too before
    the call returns: a power failure loses nothing that was acknowledged.  Two syncs a commit.
``normal``
    The meta page is synced by the next commit, or by this process's flusher thread at most
    :data:`FLUSH_DELAY` seconds later, or when the store is closed: a power failure within that
    window may undo the last commit (the store stays consistent).  One sync a commit.
``off``
    ``MDB_NOSYNC``: snapstore syncs nothing; the kernel writes the pages back when it likes
    (Linux: within ~30 s).  A power failure may lose the recent commits **and may corrupt the
    store** (LMDB: "a system crash can corrupt the database or lose the last transactions if
    buffers are not yet flushed to disk"): pages of one commit can reach the disk without the
    pages they depend on.  For scratch stores only.

A process crash (SIGKILL, an exception, OOM) loses nothing under any setting: the kernel keeps
the written pages.  Operations that must be durable whatever the setting (a restore's journal
and safety checkpoint before the first file of the tree is touched, creating a store) call
``Backend.barrier``.  A restore's writes to the tree follow the setting too
(:mod:`snapstore.ops.restore.settle`): ``full`` syncs them inline, ``normal`` within
:data:`FLUSH_DELAY` through a :class:`Flusher` of their own (its journal kept until then),
``off`` never.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

MODES = ("full", "normal", "off")
#: The setting of a store that never chose one (see docs/reliability.md for the measurements).
DEFAULT = "normal"
#: The meta key of the setting (``ops.retention``'s ``config_key("storage.durability")``).
CONFIG_KEY = b"config:storage.durability"
#: How long (seconds) a ``normal`` commit's meta page may wait for the flusher.
FLUSH_DELAY = 1.0


class Flushable(Protocol):
    """What the flusher syncs (an :class:`snapstore.storage.lmdb_env.Env`)."""

    def flush(self) -> None: ...


class Flusher:
    """One daemon thread per process that syncs environments whose meta page waits.

    ``later(env)`` marks ``env`` dirty (a no-op when it already is); the thread calls
    ``env.flush()`` once its delay has passed.  ``forget(env)`` drops a mark (the env flushes
    itself when it closes).  A flush that fails is left to the next commit or close: the
    environment raises nothing here.
    """

    def __init__(self, delay: float = FLUSH_DELAY) -> None:
        self.delay = delay
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, Flushable]] = {}
        self._thread: threading.Thread | None = None

    def later(self, env: Flushable) -> None:
        """Flush ``env`` within the delay (from the first unflushed commit)."""
        with self._cond:
            if id(env) in self._due:
                return
            self._due[id(env)] = (time.monotonic() + self.delay, env)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="snapstore-flush", daemon=True)
                self._thread.start()
            self._cond.notify()

    def forget(self, env: Flushable) -> bool:
        """Drop ``env``'s pending flush; True when one was pending."""
        with self._cond:
            return self._due.pop(id(env), None) is not None

    def pending(self, env: Flushable) -> bool:
        """True while ``env`` waits for a flush (a test seam)."""
        with self._cond:
            return id(env) in self._due

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                now = time.monotonic()
                ready = [k for k, (when, _) in self._due.items() if when <= now]
                if not ready:
                    self._cond.wait(min(when for when, _ in self._due.values()) - now)
                    continue
                envs = [self._due.pop(k)[1] for k in ready]
            for env in envs:
                try:
                    env.flush()
                except Exception:  # noqa: BLE001 - the next commit or close syncs it again
                    pass

    def reset(self) -> None:
        """Forget every mark and the thread (a forked child has neither)."""
        self._cond = threading.Condition()
        self._due = {}
        self._thread = None


flusher = Flusher()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=flusher.reset)


def check(mode: str) -> str:
    """``mode`` normalised; ValueError for a setting that does not exist."""
    m = str(mode).strip().lower()
    if m not in MODES:
        raise ValueError(f"durability must be one of {', '.join(MODES)}, not {mode!r}")
    return m
