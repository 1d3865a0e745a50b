"""Restore-100 only: snapstore CLI vs git CLI, interleaved, and an in-process profile.

``python -m benchmarks.restore_profile [--runs N] [--snapstore-at REV ...] [--service] [--settled] [--profile] [--phases]``

Builds the stdlib corpus, checkpoints it (X), edits 100 files, checkpoints again (Y), then
alternates: put the tree back at Y (untimed), restore X with each contestant (timed).  Each
``--snapstore-at REV`` adds a snapstore contestant measured at that git revision (exported), so
a before/after comparison runs in the same interleaved session; with ``--service`` too, this
checkout is also measured through the Python client (``svc(worktree, py client)``), as the
revisions' services are answered by theirs: compare those two, not the native client's side.  ``--profile`` then runs one
in-process restore under cProfile and prints where the time goes, and the next snapshot's reads.
``--phases`` then runs ``--runs`` restores in-process through a watching Store (the service's
path, without the client) with each phase of the restore timed in place, and prints the median
of each (the record after a restore is what the service makes after its answer).  With
``--relayout`` those restores alternate between X and Y, each after the 100 files were written
again with the bytes they hold (a checkout or a formatter laying out the same content): the
safety checkpoint's tree is then the latest checkpoint's.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import time

from . import competitors, corpora
from .competitors import GitCLI, SnapCLI

HERE = os.path.dirname(os.path.abspath(__file__))


class _At:
    """The snapstore CLI as of one source tree (PYTHONPATH), named after it."""

    src: str | None

    def __init__(self, tree: str, store: str, name: str, src: str | None):
        self.src = src
        old = competitors.SNAPSTORE_SRC
        competitors.SNAPSTORE_SRC = src
        try:
            super().__init__(tree, store)  # type: ignore[call-arg]
        finally:
            competitors.SNAPSTORE_SRC = old
        self.name = name

    def _with_src(self, fn, *args):
        old = competitors.SNAPSTORE_SRC
        competitors.SNAPSTORE_SRC = self.src
        try:
            return fn(*args)
        finally:
            competitors.SNAPSTORE_SRC = old

    def setup(self) -> None:
        self._with_src(super().setup)

    def checkpoint(self, msg: str):
        return self._with_src(super().checkpoint, msg)

    def latest(self) -> dict:
        return self._with_src(super().latest)

    def restore(self, ref: str):
        return self._with_src(super().restore, ref)

    def status(self):
        return self._with_src(super().status)

    def start_service(self) -> None:
        self._with_src(super().start_service)

    def stop_service(self) -> None:
        self._with_src(super().stop_service)

    def service_status(self) -> dict:  # (its own client: another version's would not be answered)
        return self._with_src(super().service_status)


class SnapAt(_At, SnapCLI):
    pass


class SvcAt(_At, competitors.SnapSvc):
    """The same, answered by its resident service (started after the checkpoints)."""


def export(rev: str, work: str) -> str:
    root = os.path.dirname(HERE)
    src = os.path.join(work, f"src-{rev.replace('/', '_')}")
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", root, "archive", rev, "snapstore"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    return src


def export_worktree(work: str) -> str:
    """This checkout's package as it is (uncommitted edits too), for a contestant run like the
    exported revisions: through the Python client, as ``--snapstore-at`` sides are."""
    src = os.path.join(work, "src-worktree")
    shutil.copytree(os.path.join(os.path.dirname(HERE), "snapstore"), os.path.join(src, "snapstore"),
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return src


def put(root: str, contents: dict[str, bytes]) -> None:
    for rel, data in contents.items():
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    corpora.interleaved_args(p, "/tmp/snapstore-restore-bench")
    p.add_argument("--profile", action="store_true")
    p.add_argument("--phases", action="store_true", help="then time a watching Store's restore phase by phase")
    p.add_argument("--relayout", action="store_true",
                   help="--phases: write the 100 files again with their own bytes before each restore, "
                        "restoring X and Y in turn")
    p.add_argument("--service", action="store_true", help="also each snapstore through its service")
    p.add_argument("--settled", action="store_true",
                   help="sync (untimed) after laying out the tree: the replaced files are on disk, as in a "
                        "project whose files were written a while ago (freeing them then waits on the disk)")
    a = p.parse_args(argv)
    work = a.workdir
    tree = corpora.fresh_stdlib(work)
    comps: list = [SnapAt(tree, os.path.join(work, "snap-wt"), "snap(worktree)", None)]
    srcs = {rev: export(rev, work) for rev in a.snapstore_at}
    for rev, src in srcs.items():
        comps.append(SnapAt(tree, os.path.join(work, f"snap-{rev}"), f"snap({rev})", src))
    if a.service:
        comps.append(SvcAt(tree, os.path.join(work, "svc-wt"), "svc(worktree)", None))
        if srcs:  # (the revisions' services answer their Python client: this one's too, to compare)
            comps.append(SvcAt(tree, os.path.join(work, "svc-wt-py"), "svc(worktree, py client)", export_worktree(work)))
        for rev, src in srcs.items():
            comps.append(SvcAt(tree, os.path.join(work, f"svc-{rev}"), f"svc({rev})", src))
    comps.append(GitCLI(tree, os.path.join(work, "git")))
    for c in comps:
        c.setup()
    x_ids, y_ids = {}, {}
    for c in comps:
        c.checkpoint("X")
        x_ids[c.name] = c.latest()["id"] if isinstance(c, SnapCLI) else c.latest_id()
    editor = corpora.Editor(tree, a.seed)
    old = editor.edit(100)
    y = {rel: open(os.path.join(tree, rel), "rb").read() for rel in old}
    for c in comps:
        c.checkpoint("Y")
        y_ids[c.name] = c.latest()["id"] if isinstance(c, SnapCLI) else c.latest_id()
    for c in comps:
        if isinstance(c, SvcAt):
            c.start_service()
    try:
        return measure(a, comps, tree, x_ids, y, old, work)
    finally:
        for c in comps:
            if isinstance(c, SvcAt):
                c.stop_service()
        shutil.rmtree(work, ignore_errors=True)


def measure(a, comps, tree, x_ids, y, old, work) -> int:
    times: dict[str, list[float]] = {c.name: [] for c in comps}
    for i in range(a.runs):
        order = comps if i % 2 == 0 else comps[::-1]
        for c in order:
            put(tree, y)
            if a.settled:
                os.sync()
            t, _ = c.restore(x_ids[c.name])
            times[c.name].append(t)
            bad = sum(open(os.path.join(tree, rel), "rb").read() != data for rel, data in old.items())
            if bad:
                print(f"RESTORE CHECK FAILED: {c.name} run {i}: {bad} files", file=sys.stderr)
                return 1
    git = statistics.median(times["git-cli"])
    settled = ", the tree synced before each restore" if a.settled else ""
    print(f"restore-100, stdlib ({a.runs} runs, interleaved{settled}), load {os.getloadavg()[0]:.2f}")
    for c in comps:
        med = statistics.median(times[c.name])
        via = f" (service answered {c.requests()} requests)" if isinstance(c, SvcAt) else ""
        print(f"  {c.name:24s} median {med * 1000:7.1f} ms  min {min(times[c.name]) * 1000:7.1f}  "
              f"{med / git:5.2f}x git{via}")
    if a.profile:
        profile(tree, os.path.join(work, "snap-wt"), x_ids["snap(worktree)"], y, old)
    if a.phases:
        phases(tree, os.path.join(work, "snap-wt"), x_ids["snap(worktree)"], y, a.runs, a.relayout)
    return 0


def phases(tree: str, store: str, x_id: str, y: dict[str, bytes], runs: int, relayout: bool = False) -> None:
    """Restores of X through a watching Store, each phase timed in place (this process only);
    with ``relayout``, of X and Y in turn, each after the files were written again as they are."""
    from snapstore.facade import base
    from snapstore.ops import restore
    from snapstore.ops.restore import batch, journal, watching
    from snapstore.store import Store

    from .loop_phases import Timings, _wrap

    timings: Timings = {}
    for owner, name, label in (
        (base.StoreBase, "_take_safety", "safety checkpoint"),
        (restore, "_target_from_difference", "target (manifest difference)"),
        (restore, "plan", "plan"),
        (restore, "skip_ignored", "ignore checks"),
        (restore, "verify_sources", "chunk verification"),
        (restore, "_journal", "journal (+ store sync)"),
        (restore, "_apply", "apply"),
        (batch, "_stage_all", "  of which: temp files"),
        (batch, "_set_aside_all", "  of which: set aside + unlink"),
        (journal, "finish", "operation's commit"),
        (watching, "keep_state", "watcher state's patch"),
        (base.StoreBase, "_restore", "whole restore"),
        (base.StoreBase, "_record_tree", "  of which: record after"),
    ):
        _wrap(owner, name, label, timings)
    s = Store.open(tree, store=store, watch=True)
    safety_kept = 0
    try:
        y_id = s.checkpoints()[0].id
        for i in range(runs + 1):
            if relayout:
                put(tree, {rel: open(os.path.join(tree, rel), "rb").read() for rel in y})
            else:
                put(tree, y)
            time.sleep(1.2)  # (the tree flusher's deferred sync of the last restore, untimed)
            latest = s.checkpoints(include_safety=True)[0].id
            report = s.restore(y_id if relayout and i % 2 else x_id)
            safety_kept += report.safety is not None and report.safety.id == latest
            if i == 0:  # (the first walks the tree: the service's state is warm)
                for xs in timings.values():
                    xs.clear()
    finally:
        s.close()
    how = ", the files written again as they were before each" if relayout else ""
    print(f"a watching Store's restore-100, {runs} runs{how}, medians (load {os.getloadavg()[0]:.2f}; "
          f"{safety_kept} of {runs + 1} safety checkpoints were the latest one):")
    for label, xs in timings.items():
        if xs:
            print(f"  {label:36s} {statistics.median(xs) * 1000:7.2f} ms")


def profile(tree: str, store: str, x_id: str, y: dict[str, bytes], old: dict[str, bytes]) -> None:
    from snapstore import Store
    from snapstore.ops.snapshot import read as snapshot_read

    put(tree, y)
    s = Store.open(store=store)
    try:
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        s.restore(x_id)
        prof.disable()
        print(f"in-process restore: {(time.perf_counter() - t0) * 1000:.1f} ms")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(35)
        opened = []
        real = snapshot_read._open

        def counting(*args, **kw):
            opened.append(args[1])
            return real(*args, **kw)

        snapshot_read._open = counting
        try:
            s.snapshot(message="after restore")
        finally:
            snapshot_read._open = real
        print(f"next snapshot read {len(opened)} files")
    finally:
        s.close()


if __name__ == "__main__":
    sys.exit(main())
