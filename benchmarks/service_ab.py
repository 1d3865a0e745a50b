"""Interleaved A/B of two installations' CLI + service: the fixed cost of a command through the
native client and the resident service (issue 40).

``python -m benchmarks.service_ab --a EXE --b EXE [--repo PATH] [--commits N] [--repeat K]``:
each ``EXE`` is an installation's console script (``.venv/bin/snapstore``: the native client
when ``make setup`` built it; its service runs that installation's code).  Each side gets its
own tree and store; the last N first-parent commits of ``--repo`` are laid out in both trees
(``git read-tree -u --reset``, untimed, in alternating order), and per commit, the sides
alternating first:

- ``snapshot -m MSG -q``: a checkpoint per commit, as benchmarks.replay's snap-svc row;
- ``list -n 1``: a read whose work is small beside the path (client, round trip, service);
- a Claude Code pre+post pair of a no-change shell call (``hook claude-code``, event on stdin),
  as ``benchmarks.hook_latency --pairs`` times it.

A ``git status`` of ``--repo`` runs before each timed command, as the other contestants of the
replay run between snap-svc's commands (the service is timed with cold caches, as there).
Reported per row: each side's median, the ratio of medians, and the median of the per-commit
paired ratios B/A (pairing removes most of the commit-to-commit spread); with ``--repeat K``
the roles swap every run (A's installation on tree B), which cancels a bias of the tree or the
position.  ``serve --status`` must show every timed command answered by the service through the
native client, or the run fails (a silent fallback would measure the Python client).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any

from .hook_latency import EVENTS, POST_EVENTS, QUIET

ROWS = ("snapshot", "list -n 1", "hook pair")


class Side:
    """One installation's tree, store and service."""

    def __init__(self, exe: str, work: str, name: str, gitdir: str):
        self.exe, self.name = exe, name
        self.tree, self.store = os.path.join(work, name, "tree"), os.path.join(work, name, "store")
        os.makedirs(self.tree)
        self.git_env = dict(os.environ, GIT_DIR=gitdir, GIT_WORK_TREE=self.tree,
                            GIT_INDEX_FILE=os.path.join(work, name, "index"))
        self.env = {k: v for k, v in os.environ.items()
                    if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith(("SNAPSTORE_", "CLAUDE_"))}
        self.env["CLAUDE_PROJECT_DIR"] = self.tree
        self.times: dict[str, list[float]] = {row: [] for row in ROWS}
        self.commands = 0

    def checkout(self, sha: str) -> None:
        subprocess.run(["git", "read-tree", "-u", "--reset", sha], env=self.git_env, check=True, capture_output=True)

    def command(self, *args: str, stdin: bytes | None = None, timed: bool = True) -> tuple[float, bytes]:
        argv = [self.exe, "--store", self.store, *args]
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=self.tree, env=self.env, input=stdin, capture_output=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode(errors='replace')[:500]}")
        self.commands += timed
        return seconds, done.stdout

    def start(self, first: str) -> None:
        local = dict(self.env, SNAPSTORE_AUTOSTART="0")
        subprocess.run([self.exe, "init", "--store", self.store, "-q"], cwd=self.tree, env=local, check=True)
        self.checkout(first)
        subprocess.run([self.exe, "--store", self.store, "snapshot", "-q", "-m", "initial"], cwd=self.tree, env=local, check=True)
        subprocess.run([self.exe, "--store", self.store, "serve", "--detach", "--idle-timeout", "7200"],
                       cwd=self.tree, env=self.env, check=True, capture_output=True)

    def status(self) -> dict[str, Any]:
        done = subprocess.run([self.exe, "--store", self.store, "serve", "--status"], cwd=self.tree, env=self.env,
                              capture_output=True, text=True)
        return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else {}

    def stop(self) -> None:
        subprocess.run([self.exe, "--store", self.store, "serve", "--stop"], cwd=self.tree, env=self.env, capture_output=True)

    def hook_pair(self) -> float:
        total = 0.0
        for events in (EVENTS, POST_EVENTS):
            event = json.dumps({"session_id": "ab", "transcript_path": "/nonexistent", "cwd": self.tree,
                                **events["claude-code"]}).encode()
            seconds, out = self.command("hook", "claude-code", stdin=event)
            if out.decode().strip() not in QUIET:
                raise SystemExit(f"hook answered {out[:200]!r}")
            total += seconds
        return total


def run_once(exe_a: str, exe_b: str, repo: str, commits: int) -> dict[str, dict[str, list[float]]]:
    """Per-row timings of each side (keyed by its exe's label, "a" or "b")."""
    shas = subprocess.run(["git", "-C", repo, "rev-list", "--first-parent", "--reverse", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.split()[-commits:]
    gitdir = subprocess.run(["git", "-C", repo, "rev-parse", "--absolute-git-dir"], capture_output=True, text=True,
                            check=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="service-ab.")
    sides = [Side(exe_a, work, "a", gitdir), Side(exe_b, work, "b", gitdir)]
    try:
        for side in sides:
            side.start(shas[0])
        for i, sha in enumerate(shas[1:], 1):
            order = sides if i % 2 else sides[::-1]
            for side in order[::-1]:
                side.checkout(sha)
            for row in ROWS:
                for side in order:
                    subprocess.run(["git", "-C", repo, "status", "--short"], capture_output=True)
                    if row == "snapshot":
                        side.times[row].append(side.command("snapshot", "-m", f"commit {sha[:12]}", "-q")[0])
                    elif row == "list -n 1":
                        side.times[row].append(side.command("list", "-n", "1")[0])
                    else:
                        side.times[row].append(side.hook_pair())
        for side in sides:
            status = side.status()
            native = (status.get("clients") or {}).get("native", 0)
            if native < side.commands:
                raise SystemExit(f"side {side.name}: {side.commands} commands, {native} answered through the native "
                                 f"client ({status.get('clients')}, refused {status.get('refused')})")
    finally:
        for side in sides:
            side.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {side.name: side.times for side in sides}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.service_ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="installation A's console script (e.g. main's .venv/bin/snapstore)")
    p.add_argument("--b", required=True, help="installation B's console script")
    p.add_argument("--repo", default=".", help="a git repository whose history is replayed (only read)")
    p.add_argument("--commits", type=int, default=150)
    p.add_argument("--repeat", type=int, default=2, help="runs, the trees swapped between the installations each run")
    args = p.parse_args(argv)
    args.a, args.b = os.path.abspath(args.a), os.path.abspath(args.b)  # (run from each side's tree)
    paired: dict[str, list[float]] = {row: [] for row in ROWS}
    medians: dict[str, dict[str, list[float]]] = {row: {"a": [], "b": []} for row in ROWS}
    for run in range(args.repeat):
        swap = run % 2 == 1
        got = run_once(args.b, args.a, args.repo, args.commits) if swap else run_once(args.a, args.b, args.repo, args.commits)
        a, b = (got["b"], got["a"]) if swap else (got["a"], got["b"])
        for row in ROWS:
            paired[row].append(statistics.median(y / x for x, y in zip(a[row], b[row])))
            medians[row]["a"].append(statistics.median(a[row]))
            medians[row]["b"].append(statistics.median(b[row]))
        print(f"run {run + 1}/{args.repeat} done, load {os.getloadavg()[0]:.2f}", flush=True)
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nA = {args.a}\nB = {args.b}\n{args.commits - 1} commits of {os.path.abspath(args.repo)}, {args.repeat} runs "
          f"(trees swapped each run); load average at the end {load}\n")
    print("| row | A median (per run) | B median (per run) | B/A of medians | B/A paired per commit (per run) |")
    print("| --- | --- | --- | --- | --- |")
    for row in ROWS:
        ma, mb = medians[row]["a"], medians[row]["b"]
        print(f"| {row} | {', '.join(f'{x * 1e3:.2f}' for x in ma)} ms | {', '.join(f'{x * 1e3:.2f}' for x in mb)} ms | "
              f"{statistics.median(mb) / statistics.median(ma):.3f} | {', '.join(f'{r:.3f}' for r in paired[row])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
