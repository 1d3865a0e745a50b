"""The library loop (issue 40's row) of two or more snapstore revisions against each other and
pygit2, interleaved per commit.

``python -m benchmarks.loop_ab [--repo PATH] [--commits N] [--runs K] --snapstore-at REV ...``:
the tree of each of the last N first-parent commits of PATH is laid out in a scratch directory
(as ``benchmarks.replay --repo`` does), and a ``Store(watch=True)`` child per revision (each
``--snapstore-at REV`` exported; ``.`` is the checkout itself) and a pygit2 child checkpoint it,
the order rotating per commit.  Printed per run: each contestant's median, its ratio to pygit2,
and each revision's ratio to the first one; then the medians of those ratios over the runs.
Separate processes, as the replay's ``snap-watch``: each holds its own caches and threads.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from typing import Any

from . import competitors
from .repo_replay import Layout, first_parent_commits
from .restore_profile import export

HERE = os.path.dirname(os.path.abspath(__file__))


def one_run(repo: str, commits: int, sources: dict[str, str | None]) -> dict[str, Any]:
    """One interleaved pass: ``{name: median seconds}`` (and pygit2's)."""
    shas = first_parent_commits(repo, commits + 1)
    work = tempfile.mkdtemp(prefix="loop-ab.")
    tree = os.path.join(work, "tree")
    os.makedirs(tree)
    layout = Layout(repo, tree, os.path.join(work, "index"))
    workers: list[Any] = []
    try:
        for name, src in sources.items():
            competitors.SNAPSTORE_SRC = src  # (read by setup and start: each child its own code)
            w = competitors.LibWorker("snapwatch", tree, os.path.join(work, f"store-{len(workers)}"))
            w.name = name
            w.setup()
            w.start()
            workers.append(w)
        competitors.SNAPSTORE_SRC = None
        git = competitors.LibWorker("pygit2", tree, os.path.join(work, "pygit2"))
        git.setup()
        git.start()
        workers.append(git)
        times: dict[str, list[float]] = {w.name: [] for w in workers}
        layout.checkout(shas[0])
        for w in workers:
            w.checkpoint("initial")
        for i, sha in enumerate(shas[1:], 1):
            layout.checkout(sha)
            order = workers[i % len(workers):] + workers[: i % len(workers)]
            for w in order if i % 2 else order[::-1]:
                seconds, _ = w.checkpoint(f"commit {sha[:12]}")
                times[w.name].append(seconds)
    finally:
        competitors.SNAPSTORE_SRC = None
        for w in workers:
            w.close()
        shutil.rmtree(work, ignore_errors=True)
    return {name: statistics.median(xs) for name, xs in times.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repo", default=".")
    p.add_argument("--commits", type=int, default=150)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--snapstore-at", action="append", required=True, metavar="REV",
                   help="a git revision of this checkout (exported), or '.' for the checkout itself")
    a = p.parse_args(argv)
    os.environ.setdefault("SNAPSTORE_AUTOSTART", "0")
    work = tempfile.mkdtemp(prefix="loop-ab-src.")
    try:
        sources = {rev: None if rev == "." else export(rev, work) for rev in a.snapstore_at}
        first = a.snapstore_at[0]
        ratios: dict[str, list[float]] = {rev: [] for rev in a.snapstore_at}
        for _ in range(a.runs):
            m = one_run(a.repo, a.commits, sources)
            line = ", ".join(f"{rev} {m[rev] * 1e3:.2f} ms ({m[rev] / m['pygit2']:.2f}x pygit2)" for rev in sources)
            print(f"load {os.getloadavg()[0]:.1f}: {line}, pygit2 {m['pygit2'] * 1e3:.2f} ms", flush=True)
            for rev in sources:
                ratios[rev].append(m[rev] / m[first])
        for rev, xs in ratios.items():
            print(f"{rev}: median {statistics.median(xs):.3f}x {first} over {len(xs)} runs {[round(x, 3) for x in xs]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
