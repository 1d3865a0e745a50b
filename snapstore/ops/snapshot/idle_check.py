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
back to the watcher, so the next checkpoint examines those paths. A check that fails (the walk
raised, the queue overflowed meanwhile) changes nothing: the next idle time tries again, and a
checkpoint still walks for it when none passed for several intervals (tree.watcher).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
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
        self._found: list[scan.Found] | None = None
        self.passed = 0
        self.missed = 0

    @property
    def walking(self) -> bool:
        return self._thread is not None

    def step(self) -> None:
        """Start the check when it is due, or compare a finished walk with the kept state."""
        watcher = self._ctx.watcher
        if watcher is None:
            return
        watcher.checks_when_idle = True
        if self._thread is None:
            if self._ctx.tree_state is None or not watcher.consistency_due():
                return
            watcher.mark()
            self._found = None
            self._thread = threading.Thread(target=self._walk, name="snapstore idle check", daemon=True)
            self._thread.start()
            return
        if self._thread.is_alive():
            return
        self._thread = None
        since = watcher.since_mark()
        state = self._ctx.tree_state
        if self._found is None or since.full or state is None:
            return  # (nothing learnt: the next idle time tries again)
        skip = set(state.links) | watcher.last_mapped
        missed = missed_paths(self._found, state.found, since, skip)
        self._found = None
        watcher.checked()
        self.passed += 1
        if not missed:
            return
        self.missed += len(missed)
        watcher.divergences += len(missed)
        shown = ", ".join(p.decode("utf-8", "replace") for p in missed[:5])
        watcher.last_divergence = f"{len(missed)} path(s) changed without an event: {shown}"
        log.warning("consistency check (idle): %s", watcher.last_divergence)
        from snapstore.tree.watcher import Changes

        dirs = {p.rsplit(b"/", 1)[0] if b"/" in p else b"" for p in missed}
        watcher.give_back(Changes(full=False, dirs=dirs, paths=set(missed)))

    def _walk(self) -> None:
        try:
            self._found = scan.walk(self._ctx.root_bytes, self._ctx.excluded, scan.ScanReport())
        except Exception as exc:  # (a thread's error must not vanish: the check is retried)
            log.info("idle consistency walk failed: %s", exc)
            self._found = None


def missed_paths(
    found: list[scan.Found], kept: Mapping[bytes, scan.Found], since: Changes, skip: set[bytes]
) -> list[bytes]:
    """Paths where the walk and the kept state disagree although no event since the walk began
    named them (nor a directory above them that appeared or is blind), sorted."""
    whole = since.subtrees | since.blind

    def excused(path: bytes) -> bool:
        if path in since.paths or path in skip:
            return True
        parent = path.rsplit(b"/", 1)[0] if b"/" in path else b""
        if parent in since.dirs or (b"" in whole):
            return True
        return any(p in whole for p in iter_parents(path))

    seen = {f.path: f for f in found}
    out = []
    for path in seen.keys() | kept.keys():
        a, b = seen.get(path), kept.get(path)
        if a is not None and b is not None and a.kind == b.kind and a.st == b.st and a.target == b.target:
            continue
        if not excused(path):
            out.append(path)
    return sorted(out)
