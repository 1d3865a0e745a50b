"""The service's O(changed) paths against git, interleaved, before/after in one session.

``python -m benchmarks.watch_bench [--runs N] [--snapstore-at REV ...]``

On the stdlib corpus, each snapstore contestant answered by its resident service (the working
tree's code, and each ``--snapstore-at REV`` exported), against the git CLI:

* ``new-file``: one new file in a random directory (untimed), then a checkpoint;
* ``status``: ``snapstore diff`` (latest vs the tree) / ``git status --porcelain``, with 10
  files edited and one created since the last checkpoint;
* ``restore-100``: the tree put back at Y (untimed), then a restore of X, 100 files away, as
  in benchmarks.restore_profile (which also has the in-process profile).

Every contestant works on the same tree, so each one's restore changes the tree under the others'
services: the case where a watcher that only knew modifications had to walk.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys

from . import corpora
from .competitors import GitCLI
from .restore_profile import SvcAt, export, put


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    corpora.interleaved_args(p, "/tmp/snapstore-watch-bench")
    a = p.parse_args(argv)
    work = a.workdir
    tree = corpora.fresh_stdlib(work)
    comps: list = [SvcAt(tree, os.path.join(work, "svc-wt"), "svc(worktree)", None)]
    for rev in a.snapstore_at:
        comps.append(SvcAt(tree, os.path.join(work, f"svc-{rev}"), f"svc({rev})", export(rev, work)))
    comps.append(GitCLI(tree, os.path.join(work, "git")))
    for c in comps:
        c.setup()
        c.checkpoint("initial")
    for c in comps:
        if isinstance(c, SvcAt):
            c.start_service()
    try:
        return measure(a, comps, tree)
    finally:
        for c in comps:
            if isinstance(c, SvcAt):
                c.stop_service()
        shutil.rmtree(work, ignore_errors=True)


def _ids(comps) -> dict[str, str]:
    return {c.name: (c.latest()["id"] if isinstance(c, SvcAt) else c.latest_id()) for c in comps}


def measure(a, comps, tree: str) -> int:
    rng = random.Random(a.seed)
    dirs = sorted({os.path.dirname(os.path.join(d, f)) for d, _, fs in os.walk(tree) for f in fs if f.endswith(".py")})
    times: dict[str, dict[str, list[float]]] = {s: {c.name: [] for c in comps} for s in ("new-file", "status", "restore-100")}
    requests0 = {c.name: c.requests() for c in comps if isinstance(c, SvcAt)}
    calls = 0
    for i in range(a.runs):  # a new file, then every contestant checkpoints it
        with open(os.path.join(rng.choice(dirs), f"watch_bench_new_{i}.py"), "w") as f:
            f.write(f"x = {i}\n")
        for c in comps if i % 2 == 0 else comps[::-1]:
            times["new-file"][c.name].append(c.checkpoint(f"new file {i}")[0])
        calls += 1
    editor = corpora.Editor(tree, a.seed)
    editor.edit(10)
    with open(os.path.join(rng.choice(dirs), "watch_bench_status.py"), "w") as f:
        f.write("status = 1\n")
    for i in range(a.runs):
        for c in comps if i % 2 == 0 else comps[::-1]:
            times["status"][c.name].append(c.status()[0])
        calls += 1
    for c in comps:
        c.checkpoint("X")
    x_ids = _ids(comps)
    old = editor.edit(100)
    y = {rel: open(os.path.join(tree, rel), "rb").read() for rel in old}
    for c in comps:
        c.checkpoint("Y")
    calls += 3  # (the two checkpoints and one `list`)
    for i in range(a.runs):
        for c in comps if i % 2 == 0 else comps[::-1]:
            put(tree, y)
            times["restore-100"][c.name].append(c.restore(x_ids[c.name])[0])
            bad = sum(open(os.path.join(tree, rel), "rb").read() != data for rel, data in old.items())
            if bad:
                print(f"RESTORE CHECK FAILED: {c.name} run {i}: {bad} files", file=sys.stderr)
                return 1
        calls += 1
    print(f"stdlib, {a.runs} runs interleaved, load {os.getloadavg()[0]:.2f}; medians (min)")
    for scenario, by in times.items():
        git = statistics.median(by["git-cli"])
        print(f"  {scenario}")
        for c in comps:
            med = statistics.median(by[c.name])
            print(f"    {c.name:22s} {med * 1000:7.1f} ms ({min(by[c.name]) * 1000:6.1f})  {med / git:5.2f}x git")
    for c in comps:
        if isinstance(c, SvcAt):
            st = c.service_status()
            got = (st.get("requests") or 0) - (requests0[c.name] or 0)
            w = st.get("watcher") or {}
            print(f"  {c.name}: {got} requests (>= {calls} expected), {w.get('walks', '?')} walks, "
                  f"{w.get('patched', '?')} patched, {w.get('looks', '?')} looks, "
                  f"{w.get('events')} events, {w.get('divergences')} divergences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
