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

Then K random commits are restored by ``snap-svc`` and ``git-cli``, and K more by ``snap-cli``
and ``git-cli`` (the tree is put back at the
newest commit, untimed, before each), and the store sizes are compared with ``git gc``.
Reported: per-checkpoint median and p95 per contestant, each snapstore contestant's median
ratio to its git counterpart (CLI to git-cli, library to pygit2), restore medians, sizes.
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

    def checkout(self, sha: str) -> None:
        subprocess.run(["git", "read-tree", "-u", "--reset", sha], env=self.env, check=True, capture_output=True)


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


def _cli_ids(cli: Any, shas: list[str]) -> list[str]:
    """The ids of the no-service CLI's checkpoints of ``shas[1:]`` (one ``list``, untimed)."""
    doc = json.loads(output(cli._cmd("list", "--json", "-n", str(len(shas) + 1)), cwd=cli.tree, env=competitors.snap_env()))
    by_message = {c["message"]: c["id"] for c in doc["checkpoints"]}
    return [by_message[f"commit {sha[:12]}"] for sha in shas[1:]]


def _no_service_restores(layout: Layout, shas: list[str], cli: Any, git: Any, ids: dict[str, list[str]], k: int, seed: int) -> dict[str, list[float]]:
    """Restores of random commits by the CLI without a service and by git, interleaved (the
    tree put back at the newest commit, untimed, before each)."""
    rng = random.Random(seed + 1)
    picks = [rng.randrange(len(ids["git-cli"]) - 1) for _ in range(k)] if len(ids["git-cli"]) > 1 else []
    out: dict[str, list[float]] = {"snap-cli": [], "git-cli (vs snap-cli)": []}
    for n, step in enumerate(picks):
        pair = [("snap-cli", cli, ids["snap-cli"][step]), ("git-cli (vs snap-cli)", git, ids["git-cli"][step])]
        for name, contestant, ref in pair if n % 2 else pair[::-1]:
            layout.checkout(shas[-1])
            seconds, _ = contestant.restore(ref)
            out[name].append(seconds)
    layout.checkout(shas[-1])
    return out


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
    ids: dict[str, list[str]] = {"snap-svc": [], "git-cli": []}
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
            ids["snap-svc"].append(svc.latest_id())
            ids["git-cli"].append(contestants[3].latest_id())
        served = svc.requests()
        restore_times = _restores(layout, shas, svc, contestants[3], ids, restores, seed)
        ids["snap-cli"] = _cli_ids(contestants[0], shas)
        restore_times.update(_no_service_restores(layout, shas, contestants[0], contestants[3], ids, restores, seed))
        sizes = _sizes(contestants)
    finally:
        for c in contestants:
            c.close()
        svc.stop_service()
        shutil.rmtree(work, ignore_errors=True)
    return _report(repo, shas, times, restore_times, sizes, served)


def _restores(layout: Layout, shas: list[str], svc: Any, git: Any, ids: dict[str, list[str]], k: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    picks = [rng.randrange(len(ids["git-cli"]) - 1) for _ in range(k)] if len(ids["git-cli"]) > 1 else []
    out: dict[str, list[float]] = {"snap-svc": [], "git-cli": []}
    for n, step in enumerate(picks):
        pair = [("snap-svc", svc, ids["snap-svc"][step]), ("git-cli", git, ids["git-cli"][step])]
        for name, contestant, ref in pair if n % 2 else pair[::-1]:
            layout.checkout(shas[-1])  # every restore starts from the newest commit's tree
            seconds, _ = contestant.restore(ref)
            out[name].append(seconds)
    layout.checkout(shas[-1])
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
    return {
        "repo": os.path.abspath(repo), "commits": len(shas), "first": shas[0], "last": shas[-1],
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}, {platform.platform()}",
        "checkpoints": rows, "served_by_service": served,
        "restore": {k: {"median_ms": v * 1000, "n": len(restores[k])} for k, v in rmed.items()},
        "restore_ratio": rmed["snap-svc"] / rmed["git-cli"] if rmed.get("git-cli") and "snap-svc" in rmed else None,
        "sizes": sizes, "size_ratio": sizes["snap-svc"] / sizes["git gc"] if sizes.get("git gc") else None,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(doc: dict[str, Any]) -> str:
    lines = [f"Replay of {doc['commits']} first-parent commits of `{os.path.basename(doc['repo'])}` "
             f"({doc['first'][:12]}..{doc['last'][:12]}), {doc['when']}; {doc['machine']}.", "",
             "| contestant | per checkpoint, median | p95 | ratio |", "| --- | --- | --- | --- |"]
    for r in doc["checkpoints"]:
        ratio = f"{r['ratio']:.2f}x {r['vs']}" if r["ratio"] is not None else ""
        lines.append(f"| {r['contestant']} | {r['median_ms']:.1f} ms | {r['p95_ms']:.1f} ms | {ratio} |")
    rs = doc["restore"]
    if rs:
        lines += ["", "| restore of a random commit | median |", "| --- | --- |"]
        lines += [f"| {k} | {v['median_ms']:.1f} ms (n={v['n']}) |" for k, v in rs.items()]
        if doc["restore_ratio"] is not None:
            lines.append(f"| ratio snap-svc / git-cli | {doc['restore_ratio']:.2f}x |")
        lines += _no_service_lines(doc)
    sz = doc["sizes"]
    lines += ["", "| store | bytes |", "| --- | --- |"] + [f"| {k} | {fmt_bytes(v)} |" for k, v in sz.items()]
    if doc["size_ratio"] is not None:
        lines.append(f"| ratio snap-svc / git gc | {doc['size_ratio']:.2f}x |")
    if doc["served_by_service"] is not None:
        lines += ["", f"(snap-svc: {doc['served_by_service']} requests answered by the service)"]
    return "\n".join(lines) + "\n"


def _no_service_lines(doc: dict[str, Any]) -> list[str]:
    """The restore ratio of the CLI without a service (its restores interleaved with git's)."""
    rs = doc["restore"]
    if "snap-cli" not in rs or not rs.get("git-cli (vs snap-cli)"):
        return []
    return [f"| ratio snap-cli / git-cli (no service, interleaved) | "
                f"{rs['snap-cli']['median_ms'] / rs['git-cli (vs snap-cli)']['median_ms']:.2f}x |"]


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
        with open(args.md, "w") as f:
            f.write("# Replaying a real history\n\n`python -m benchmarks.replay --repo . --commits 150` (run by `make bench`): "
                    "this project's own first-parent history, one checkpoint per commit, side by side with a shadow git "
                    "repository; see benchmarks/repo_replay.py for what each contestant does.\n\n" + text)
    return 0
