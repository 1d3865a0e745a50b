"""Replay a git repository's first-parent history as one checkpoint per commit (issue 24 req 5).

``python -m benchmarks.replay --repo PATH [--commits N] [--restores K] [--out FILE.json]``:
the tree of each of the last N first-parent commits of PATH is laid out in a scratch directory
(``git read-tree -u --reset`` with a private index: untimed, PATH is only read), and every
contestant checkpoints it, the order alternating per commit:

- ``snap-cli``: ``snapstore snapshot`` processes without a service (``SNAPSTORE_AUTOSTART=0``);
- ``snap-auto``: the same as a person at a shell gets it by default: the first command starts
  the store's service (``service.autostart``), the next ones use it;
- ``snap-svc``: the same with the store's resident service (through the native client when
  ``make setup`` built it);
- ``git-cli``: a shadow git repository driven as Cline drives it (``add -A`` + ``commit``);
- ``snap-watch`` and ``pygit2``: library calls in a resident child process each.

Then K random commits are restored by every contestant (``snap-cli`` and ``snap-svc`` against
``git-cli``'s ``reset --hard`` + ``clean -fdq``, ``snap-watch``'s ``Store.restore`` against
pygit2's hard reset + removal of untracked files), the order alternating, the tree put back at
the newest commit (untimed) before each; then the store sizes are compared with ``git gc``.
The snapstore stores use the default durability setting (``storage.durability``, see
docs/reliability.md), which the report names.
Reported: per-checkpoint median and p95 per contestant, each snapstore contestant's median
ratio to its git counterpart (CLI to git-cli, library to pygit2), restore medians and ratios,
sizes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any

from . import competitors
from .measure import fmt_bytes, output, run


def first_parent_commits(repo: str, n: int) -> list[str]:
    """The last ``n`` first-parent commits of ``repo``'s HEAD, oldest first."""
    shas = output(["git", "-C", repo, "rev-list", "--first-parent", "--reverse", "HEAD"]).split()
    return shas[-n:]


class Layout:
    """Lays the tree of a commit of ``repo`` out in ``tree`` (files of earlier commits removed)."""

    def __init__(self, repo: str, tree: str, index: str):
        self.env = dict(os.environ, GIT_DIR=output(["git", "-C", repo, "rev-parse", "--absolute-git-dir"]).strip(),
                        GIT_WORK_TREE=tree, GIT_INDEX_FILE=index)
        self.tree = tree
        self.newest = ""
        #: Set once the replay is done: restores lay out ``newest`` and leave it as is.
        self.frozen = False

    def checkout(self, sha: str) -> None:
        subprocess.run(["git", "read-tree", "-u", "--reset", sha], env=self.env, check=True, capture_output=True)
        if not self.frozen:
            self.newest = sha  # (the last commit the replay laid out: restores start from it)


def p95(xs: list[float]) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


class SnapAuto(competitors.SnapCLI):
    """``snapstore snapshot`` as a person at a shell runs it by default: the first command runs
    in-process and starts the store's service (``service.autostart``), the next ones use it."""

    name = "snap-auto"

    @staticmethod
    def env() -> dict[str, str]:
        return {**competitors.snap_env(), "SNAPSTORE_AUTOSTART": "1"}

    def checkpoint(self, msg: str) -> tuple[float, int | None]:
        p = run(self._cmd("snapshot", "-m", msg, "-q"), cwd=self.tree, env=self.env())
        return p.seconds, p.rss_kib

    def close(self) -> None:
        subprocess.run(self._cmd("serve", "--stop"), cwd=self.tree, env=self.env(), capture_output=True)


def replay(repo: str, commits: int, restores: int, seed: int) -> dict[str, Any]:
    shas = first_parent_commits(repo, commits)
    work = tempfile.mkdtemp(prefix="replay.")
    tree = os.path.join(work, "tree")
    os.makedirs(tree)
    layout = Layout(repo, tree, os.path.join(work, "replay.index"))
    svc = competitors.SnapSvc(tree, os.path.join(work, "snap-svc"))
    contestants: list[Any] = [
        competitors.SnapCLI(tree, os.path.join(work, "snap-cli")),
        SnapAuto(tree, os.path.join(work, "snap-auto")),
        svc,
        competitors.GitCLI(tree, os.path.join(work, "git-cli")),
        competitors.LibWorker("snapwatch", tree, os.path.join(work, "snap-watch")),
        competitors.LibWorker("pygit2", tree, os.path.join(work, "pygit2")),
    ]
    times: dict[str, list[float]] = {c.name: [] for c in contestants}
    ids: dict[str, list[str]] = {c.name: [] for c in contestants}
    try:
        for c in contestants:
            c.setup()
        layout.checkout(shas[0])
        for c in contestants:  # the initial checkpoint (not in the per-commit figures)
            c.checkpoint("initial")
        svc.start_service()
        for i, sha in enumerate(shas[1:], 1):
            layout.checkout(sha)
            order = contestants if i % 2 else contestants[::-1]
            for c in order:
                seconds, _ = c.checkpoint(f"commit {sha[:12]}")
                times[c.name].append(seconds)
            for c in contestants:
                ids[c.name].append(c.latest_id())
        served = svc.requests()
        layout.frozen = True
        restore_times = _restores(layout, contestants, ids, restores, seed)
        sizes = _sizes(contestants)
    finally:
        for c in contestants:
            c.close()
        svc.stop_service()
        shutil.rmtree(work, ignore_errors=True)
    return _report(repo, shas, times, restore_times, sizes, served)


def _restores(layout: Layout, contestants: list[Any], ids: dict[str, list[str]], k: int, seed: int) -> dict[str, list[float]]:
    """``k`` random commits restored by every contestant, the order alternating, each from the
    newest commit's tree (laid out untimed)."""
    rng = random.Random(seed)
    picks = [rng.randrange(len(ids["git-cli"]) - 1) for _ in range(k)] if len(ids["git-cli"]) > 1 else []
    out: dict[str, list[float]] = {c.name: [] for c in contestants}
    for n, step in enumerate(picks):
        for contestant in contestants if n % 2 else contestants[::-1]:
            layout.checkout(layout.newest)
            seconds, _ = contestant.restore(ids[contestant.name][step])
            out[contestant.name].append(seconds)
            competitors.let_sync_settle(contestant.name)
    layout.checkout(layout.newest)
    return out


def _sizes(contestants: list[Any]) -> dict[str, int]:
    sizes = {c.name: c.disk_bytes() for c in contestants if c.name in ("snap-svc", "git-cli")}
    sizes["git gc"] = next(c for c in contestants if c.name == "git-cli").gc_bytes()[0]
    return sizes


def _report(repo: str, shas: list[str], times: dict[str, list[float]], restores: dict[str, list[float]],
            sizes: dict[str, int], served: int | None) -> dict[str, Any]:
    med = {k: statistics.median(v) for k, v in times.items() if v}
    peer = {"snap-cli": "git-cli", "snap-auto": "git-cli", "snap-svc": "git-cli", "snap-watch": "pygit2"}
    rows = [{"contestant": k, "median_ms": med[k] * 1000, "p95_ms": p95(times[k]) * 1000,
             "vs": peer.get(k), "ratio": med[k] / med[peer[k]] if k in peer and med.get(peer[k]) else None}
            for k in med]
    rmed = {k: statistics.median(v) for k, v in restores.items() if v}
    restore_rows = {k: {"median_ms": v * 1000, "n": len(restores[k]), "vs": peer.get(k) or None,
                        "ratio": v / rmed[peer[k]] if k in peer and rmed.get(peer[k]) else None}
                    for k, v in rmed.items()}
    return {
        "repo": os.path.abspath(repo), "commits": len(shas), "first": shas[0], "last": shas[-1],
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}, {platform.platform()}",
        "checkpoints": rows, "served_by_service": served,
        "restore": restore_rows, "durability": _durability(),
        "restore_ratio": rmed["snap-svc"] / rmed["git-cli"] if rmed.get("git-cli") and "snap-svc" in rmed else None,
        "sizes": sizes, "size_ratio": sizes["snap-svc"] / sizes["git gc"] if sizes.get("git gc") else None,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _durability() -> str:
    """The durability setting the snapstore contestants ran with (the default)."""
    from snapstore.storage import lmdb_durability

    return lmdb_durability.DEFAULT


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"Replay of {doc['commits']} first-parent commits of `{os.path.basename(doc['repo'])}` "
             f"({doc['first'][:12]}..{doc['last'][:12]}), {doc['when']}; {doc['machine']}.", "",
             "| contestant | per checkpoint, median | p95 | ratio |", "| --- | --- | --- | --- |"]
    for r in doc["checkpoints"]:
        ratio = f"{r['ratio']:.2f}x {r['vs']}" if r["ratio"] is not None else ""
        lines.append(f"| {r['contestant']} | {r['median_ms']:.1f} ms | {r['p95_ms']:.1f} ms | {ratio} |")
    rs = doc["restore"]
    if rs:
        lines += ["", "| restore of a random commit | median | ratio |", "| --- | --- | --- |"]
        lines += [f"| {k} | {v['median_ms']:.1f} ms (n={v['n']}) | "
                  f"{'' if v.get('ratio') is None else format(v['ratio'], '.2f') + 'x ' + v['vs']} |" for k, v in rs.items()]
    sz = doc["sizes"]
    lines += ["", "| store | bytes |", "| --- | --- |"] + [f"| {k} | {fmt_bytes(v)} |" for k, v in sz.items()]
    if doc["size_ratio"] is not None:
        lines.append(f"| ratio snap-svc / git gc | {doc['size_ratio']:.2f}x |")
    lines += ["", f"(snapstore stores: durability `{doc.get('durability', '?')}`, the default; see docs/reliability.md."
              f" After each restore by {', '.join(competitors.DEFERS_SYNC)} the harness waits, untimed, for the"
              " tree sync those restores leave to a flusher within a second, so it lands on no other's timed restore)"]
    if doc["served_by_service"] is not None:
        lines += ["", f"(snap-svc: {doc['served_by_service']} requests answered by the service)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.replay", description=__doc__)
    parser.add_argument("--repo", required=True, help="a git repository (only read)")
    parser.add_argument("--commits", type=int, default=150)
    parser.add_argument("--restores", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", help="write the JSON report here")
    parser.add_argument("--md", help="write the markdown report here (e.g. docs/benchmarks-replay.md)")
    args = parser.parse_args(argv)
    doc = replay(args.repo, args.commits, args.restores, args.seed)
    text = markdown(doc)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    if args.md:
        from .mdfile import write_generated

        write_generated(args.md, ("# Replaying a real history\n\n`python -m benchmarks.replay --repo . --commits 150` (run by `make bench`): "
                    "this project's own first-parent history, one checkpoint per commit, side by side with a shadow git "
                    "repository; see benchmarks/repo_replay.py for what each contestant does.\n\n" + text),
                        "benchmarks.replay")
    return 0
