"""Edit-100 only: snapstore through its service vs git CLI, interleaved, with before/after trees.

``python -m benchmarks.edit_profile [--runs N] [--snapstore-at REV ...] [--decodes]``

Builds the stdlib corpus, checkpoints it with every contestant, starts the services, then N
times: inserts a line in 100 files not edited before (``make bench``'s edit-100) and checkpoints
with each contestant, in alternating order, timed.  The worktree's snapstore answers through its
native client (as ``make bench`` measures it); each ``--snapstore-at REV`` (exported) through
the Python thin client: give both revisions (``--snapstore-at main --snapstore-at BRANCH``) for a
before/after comparison in the same session on the same client.  Then prints the medians,
each store's growth over the N checkpoints and its size after ``gc --compact``.  ``--decodes``
then counts, in process on a copy of the worktree's store, the frames one more edit-100 decodes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys

from . import corpora
from .competitors import GitCLI, SnapSvc
from .restore_profile import SvcAt, export


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    corpora.interleaved_args(p, "/tmp/snapstore-edit-bench")
    p.add_argument("--decodes", action="store_true")
    a = p.parse_args(argv)
    work = a.workdir
    tree = corpora.fresh_stdlib(work)
    comps: list = [SnapSvc(tree, os.path.join(work, "svc-native"))]
    comps[0].name = "svc(worktree)"
    srcs = {rev: export(rev, work) for rev in a.snapstore_at}
    for rev, src in srcs.items():
        comps.append(SvcAt(tree, os.path.join(work, f"svc-{rev.replace('/', '_')}"), f"svc-py({rev})", src))
    comps.append(GitCLI(tree, os.path.join(work, "git")))
    for c in comps:
        c.setup()
        c.checkpoint("initial")
    start = {c.name: c.disk_bytes() for c in comps}
    for c in comps:
        if isinstance(c, SnapSvc):
            c.start_service()
    editor = corpora.Editor(tree, a.seed)
    times: dict[str, list[float]] = {c.name: [] for c in comps}
    try:
        for i in range(a.runs):
            editor.edit(100)
            for c in comps if i % 2 == 0 else comps[::-1]:
                times[c.name].append(c.checkpoint(f"edit {i}")[0])
        served = {c.name: c.requests() for c in comps if isinstance(c, SnapSvc)}
    finally:
        for c in comps:
            if isinstance(c, SnapSvc):
                c.stop_service()
    report(a, comps, times, start, served)
    if a.decodes:
        decodes(tree, comps[0].store, editor, work)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def report(a, comps, times, start, served) -> None:
    git = statistics.median(times["git-cli"])
    print(f"edit-100 checkpoint, stdlib ({a.runs} runs, interleaved), load {os.getloadavg()[0]:.2f}")
    for c in comps:
        med = statistics.median(times[c.name])
        grown = c.disk_bytes() - start[c.name]
        via = f", service answered {served[c.name]} requests" if c.name in served else ""
        print(f"  {c.name:24s} median {med * 1000:7.1f} ms  min {min(times[c.name]) * 1000:7.1f}  "
              f"{med / git:5.2f}x git  grew {grown / 1e6:6.2f} MB{via}")
    for c in comps:
        if isinstance(c, SnapSvc):
            left = c.disk_bytes()
            c.retention(10_000)
            print(f"  {c.name:24s} as left {left / 1e6:6.2f} MB, after gc --compact {c.disk_bytes() / 1e6:6.2f} MB")


def decodes(tree: str, store: str, editor: corpora.Editor, work: str, rounds: int = 3) -> None:
    """More edit-100s, in process on a copy of the store, watched as the service watches: the
    frames each checkpoint decodes (its delta bases' and its parent manifest's)."""
    import time

    from snapstore import Store
    from snapstore.storage import entries

    copy = os.path.join(work, "decodes-store")
    shutil.copytree(store, copy)
    seen: list[int] = []
    real = entries.inflate

    def counting(cid, frame, limit, dictionary=None, *, upto=None):  # type: ignore[no-untyped-def]
        out = real(cid, frame, limit, dictionary, upto=upto)
        seen.append(len(out))
        return out

    s = Store.open(tree, store=copy, watch=True)
    s.maintain_after_snapshot = False
    entries.inflate = counting  # type: ignore[assignment]
    try:
        s.snapshot(message="settle")
        for r in range(rounds):
            editor.edit(100)
            time.sleep(0.1)  # (the watcher's events)
            seen.clear()
            cp = s.snapshot(message=f"decodes {r}")
            print(f"  in process, edit-100 #{r}: {len(seen)} frame decodes, {sum(seen) / 2**20:.1f} MiB out, "
                  f"{cp.stats.get('new_bytes', 0) / 1e3:.0f} KB stored")
    finally:
        s.close()
        entries.inflate = real  # type: ignore[assignment]


if __name__ == "__main__":
    sys.exit(main())
