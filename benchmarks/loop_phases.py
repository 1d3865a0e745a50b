"""Where a watched library checkpoint's time goes (issue 40's library-loop row).

``python -m benchmarks.loop_phases [--repo PATH] [--commits N] [--durability MODE]``: the tree
of each of the last N first-parent commits of PATH is laid out in a scratch directory (as
``benchmarks.replay --repo`` does), and one process checkpoints it with ``Store(watch=True)``
and with pygit2 (``index.add_all`` + ``write_tree`` + ``create_commit``), the order alternating.
Printed: both medians and their ratio, the median CPU time of the process (all its threads)
a snapshot took (steadier than the wall clock on a shared machine, for A/B runs), then the
median and mean of each phase of the snapshot (the functions of ``snapstore.ops.snapshot``
timed in place).
Medians of phases do not add up to the median of the whole (each is over its own calls).

Both contestants run in this one process, so the shared-mapping scan (made inline, in
``blind_spots``) asks about this busy process at every checkpoint, as an agent's is.  The automatic maintenance pass
is off (it runs now and then, not per checkpoint).
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .repo_replay import Layout, first_parent_commits

Timings = dict[str, list[float]]


def _wrap(owner: Any, name: str, label: str, timings: Timings) -> None:
    real: Callable[..., Any] = getattr(owner, name)
    timings.setdefault(label, [])

    @functools.wraps(real)
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            timings[label].append(time.perf_counter() - t0)

    setattr(owner, name, timed)


def instrument(timings: Timings) -> None:
    """Time the snapshot's phases (module attributes replaced in place: this process only)."""
    from snapstore.ops import schedule
    from snapstore.ops.snapshot import commit, encode, incremental, pipeline, read, walk, write
    from snapstore.tree import watcher

    for owner, name, label in (
        (walk, "Start", "start (parent, keys)"),
        (walk, "inputs", "inputs (watcher + patch)"),
        (watcher.Watcher, "take", "  of which: drain events"),
        (incremental, "blind_spots", "  of which: links, the mapping scan"),
        (incremental, "patch", "  of which: patch (rescan)"),
        (read, "read_changed", "read changed files"),
        (write.Sink, "_delta_frames", "  of which: delta frames"),
        (incremental, "settle", "wait for a scan the service began, patch"),
        (pipeline, "order", "order"),
        (encode, "manifest_of", "manifest"),
        (encode, "compress_lacking", "compress manifest leaves"),
        (commit, "commit", "commit (LMDB txn + sync)"),
        (pipeline, "release_memory", "release memory"),
        (schedule, "retention_after_snapshot", "retention check"),
        (schedule, "maintenance_after_snapshot", "maintenance check"),
    ):
        _wrap(owner, name, label, timings)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", default=".")
    p.add_argument("--commits", type=int, default=80)
    p.add_argument("--durability", default=None, help="full|normal|off (default: the store's)")
    args = p.parse_args()
    os.environ.setdefault("SNAPSTORE_AUTOSTART", "0")
    import pygit2

    from snapstore.store import Store

    timings: Timings = collections.defaultdict(list)
    instrument(timings)
    work = tempfile.mkdtemp(prefix="loop-phases.")
    try:
        tree = os.path.join(work, "tree")
        os.makedirs(tree)
        shas = first_parent_commits(args.repo, args.commits + 1)
        layout = Layout(args.repo, tree, os.path.join(work, "index"))
        gitdir = os.path.join(work, "git")
        subprocess.run(["git", "init", "-q", "--bare", gitdir], check=True)
        repo = pygit2.Repository(gitdir)
        repo.workdir = tree
        sig = pygit2.Signature("bench", "bench@example.invalid")

        def git_checkpoint(msg: str) -> None:
            index = repo.index
            index.add_all()
            index.write()
            oid = index.write_tree()
            parents = [] if repo.head_is_unborn else [repo.head.target]
            repo.create_commit("HEAD", sig, sig, msg, oid, parents)

        Store.init(tree, store=os.path.join(work, "store")).close()
        store = Store.open(tree, store=os.path.join(work, "store"), watch=True, durability=args.durability)
        store.maintain_after_snapshot = False
        layout.checkout(shas[0])
        store.snapshot("initial")
        git_checkpoint("initial")
        for xs in timings.values():
            xs.clear()
        snap: list[float] = []
        cpu: list[float] = []
        git: list[float] = []
        for i, sha in enumerate(shas[1:]):
            layout.checkout(sha)
            for which in (0, 1) if i % 2 else (1, 0):
                t0 = time.perf_counter()
                if which == 0:
                    c0 = time.process_time()
                    store.snapshot(f"commit {sha[:12]}")
                    snap.append(time.perf_counter() - t0)
                    cpu.append(time.process_time() - c0)
                else:
                    git_checkpoint(f"commit {sha[:12]}")
                    git.append(time.perf_counter() - t0)
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ms, mg = statistics.median(snap) * 1e3, statistics.median(git) * 1e3
    print(f"{len(snap)} commits, load {os.getloadavg()[0]:.1f}: snap-watch {ms:.2f} ms, pygit2 {mg:.2f} ms, "
          f"ratio {ms / mg:.2f} (durability {args.durability or 'the store default'}); "
          f"snap-watch CPU {statistics.median(cpu) * 1e3:.2f} ms")
    for label, xs in timings.items():  # (in the order instrument() names them)
        if not xs:
            continue
        print(f"  {label:42s} median {statistics.median(xs) * 1e3:6.2f} ms  mean {statistics.mean(xs) * 1e3:6.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
