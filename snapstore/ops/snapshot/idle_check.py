"""The watcher's periodic consistency check, done while the service is idle.

A watching Store trusts events to say what changed, and checks that trust every
``consistency_interval`` with a full walk compared against what the events led it to believe
(ops.snapshot.incremental). Done by a checkpoint, that walk is the checkpoint's cost: the whole
tree (~20 s at a million files) once every five minutes, on whichever tool call comes then.

A service does it when idle instead. The walk runs in a thread while the service keeps
answering; its result is then compared, between requests, with the kept state as it is at
that moment. A path that any event named since the walk began (a snapshot took it, or it is
pending) is left out: its state may have moved for a reason the watcher knows. So are the
files every snapshot re-stats anyway (hard links, files mapped shared). What differs in the rest
changed without an event: counted as divergences, as a checkpoint's check counts them, and handed
back to the watcher, so the next checkpoint examines those paths. The walk keeps no record of
its own: each is compared with the kept state as it is found (one dictionary lookup), and only
the paths it finds and each directory's listing are held (~70 bytes a file, against ~250 for a
walk's records), so the check does not raise the service's memory on a big tree. A check that
fails (the walk raised, the queue overflowed meanwhile) changes nothing: the next idle time tries again, and a
checkpoint still walks for it when none passed for several intervals (tree.watcher).

The walk holds the interpreter most of the time it runs (~20 s at a million files): a request
served beside it waits for the interpreter at each system call it makes (a 1-file checkpoint at
a million files took 2.5 times as long, up to ~0.5 s).  So the service holds the walk while it
serves a request (:meth:`IdleCheck.held`): the walk stops at its next file until the request is
answered.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from snapstore.tree import scan
from snapstore.tree.paths import iter_parents

if TYPE_CHECKING:
    from snapstore.ops.context import StageContext
    from snapstore.tree.watcher import Changes

log = logging.getLogger("snapstore.watcher")


class IdleCheck:
    """One watching Store's idle consistency check: :meth:`step` starts a due one and finishes
    one whose walk is done (call it between requests, when idle)."""

    def __init__(self, ctx: StageContext) -> None:
        self._ctx = ctx
        self._thread: threading.Thread | None = None
        self._walked: _Comparing | None = None
        self.passed = 0
        #: Set while the walk may go on (cleared while a request is served: :meth:`held`).
        self._go = threading.Event()
        self._go.set()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold the walk (if one runs) while the caller serves a request: it stops at its next
        file and goes on once the request is answered."""
        self._go.clear()
        try:
            yield
        finally:
            self._go.set()

    @property
    def walking(self) -> bool:
        return self._thread is not None

    def step(self) -> None:
        """Start the check when it is due, or compare a finished walk with the kept state."""
        watcher = self._ctx.watcher
        if watcher is None:
            return
        watcher.checks_when_idle = True
        state = self._ctx.tree_state
        if self._thread is None:
            if state is None or not watcher.consistency_due():
                return
            watcher.mark()
            self._walked = None
            self._thread = threading.Thread(
                target=self._walk, args=(state.found, state.listings), name="snapstore idle check", daemon=True
            )
            self._thread.start()
            return
        if self._thread.is_alive():
            return
        self._thread = None
        since = watcher.since_mark()
        walked, self._walked = self._walked, None
        if walked is None or since.full or state is None or state.listings is not walked.compared:
            return  # (nothing learnt: the next idle time tries again)
        candidates = set(walked.differ) | walked.gone  # (O(changed) here: the walk's thread compared)
        missed = sorted(p for p in candidates if not excused(p, since, set(state.links) | watcher.last_mapped))
        watcher.checked()
        self.passed += 1
        if missed:
            self._report(missed)

    def _report(self, missed: list[bytes]) -> None:
        """Count and log what changed without an event, and hand it to the next checkpoint."""
        from snapstore.ops.snapshot.incremental import note_divergences
        from snapstore.tree.watcher import Changes

        watcher = self._ctx.watcher
        assert watcher is not None
        note_divergences(watcher, missed, "consistency check (idle)")

        dirs = {p.rsplit(b"/", 1)[0] if b"/" in p else b"" for p in missed}
        watcher.give_back(Changes(full=False, dirs=dirs, paths=set(missed)))

    def _walk(self, kept: Mapping[bytes, scan.Found], listings: scan.Listings) -> None:
        walked = _Comparing(kept, self._go)
        try:
            scan.walk(self._ctx.root_bytes, self._ctx.excluded, scan.ScanReport(), walked.listings, walked)
            # The kept listings as they are now (a change since the walk began is excused by
            # the step that reads this): a pass over every name, here rather than between
            # requests (~0.2 s at a million files).
            walked.gone, walked.compared = gone(walked.listings, listings, self._go), listings
        except Exception as exc:  # (a thread's error must not vanish: the check is retried)
            log.info("idle consistency walk failed: %s", exc)
            return
        self._walked = walked


class _Comparing(scan.KeptPaths):
    """Where the idle walk puts its records (a :class:`scan.WalkSink`): each compared with the
    kept state's as it is found and dropped; the paths that differ are kept."""

    __slots__ = ("kept", "differ", "listings", "go", "gone", "compared")

    def __init__(self, kept: Mapping[bytes, scan.Found], go: threading.Event | None = None) -> None:
        super().__init__()
        self.kept = kept
        self.differ: list[bytes] = []
        self.listings: scan.Listings = {}
        #: Cleared while the walk must wait (IdleCheck.held).
        self.go = go
        #: The kept listings' paths the walk did not find (:func:`gone`), once it is done, and
        #: those listings (the state's: a state replaced since teaches nothing).
        self.gone: set[bytes] = set()
        self.compared: scan.Listings | None = None

    def append(self, f: scan.Found, /) -> None:
        go = self.go
        if go is not None and not go.is_set():
            go.wait()  # (a request is being served: let it have the interpreter)
        self.paths.append(f.path)
        k = self.kept.get(f.path)
        if k is None or k.kind != f.kind or k.st != f.st or k.target != f.target:
            self.differ.append(f.path)


def gone(walked: scan.Listings, kept: scan.Listings, go: threading.Event | None = None) -> set[bytes]:
    """The paths the kept listings hold and the walk's do not (deleted, or no longer recorded).
    ``go``: cleared while a request is served (IdleCheck.held): wait between directories."""
    out: set[bytes] = set()
    empty: tuple[bytes, ...] = ()
    for directory, listing in list(kept.items()):  # (a copy: a request may patch them meanwhile)
        if go is not None and not go.is_set():
            go.wait()
        now = walked.get(directory)
        out.update(set(listing.names) - set(now.names if now is not None else empty))
    return out


def excused(path: bytes, since: Changes, skip: set[bytes]) -> bool:
    """Whether an event since the walk began (or a re-stat at every snapshot: ``skip``) accounts
    for ``path``: named itself, its directory listed again, or a directory above it appeared or
    is blind."""
    if path in since.paths or path in skip:
        return True
    parent = path.rsplit(b"/", 1)[0] if b"/" in path else b""
    whole = since.subtrees | since.blind
    if parent in since.dirs or b"" in whole:
        return True
    return any(p in whole for p in iter_parents(path))
