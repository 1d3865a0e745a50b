"""Per-event latency of ``snapstore hook claude-code`` for a no-change PreToolUse (issue 13).

``python -m benchmarks.hook_latency [--runs N] [--tree DIR]``: copies the Python standard
library (the "stdlib tree") to a temporary directory unless ``--tree`` is given, records a first
checkpoint, then times N hook processes (the console script, event on stdin) without the service
(in-process) and with it.  Prints the median and the 90th percentile of each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

CLIENT = [sys.executable, "-c", "from snapstore.service.client import run; run()"]


def stdlib_tree(dest: str) -> str:
    src = sysconfig.get_paths()["stdlib"]
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("site-packages", "__pycache__", "*.pyc"), symlinks=True)
    return dest


def time_events(tree: str, runs: int, env: dict[str, str]) -> list[float]:
    event = json.dumps({
        "session_id": "bench", "hook_event_name": "PreToolUse", "transcript_path": "/nonexistent",
        "cwd": tree, "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t",
    })
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([*CLIENT, "hook", "claude-code"], input=event, text=True, capture_output=True, cwd=tree, env=env)
        out.append(time.perf_counter() - start)
        if done.returncode != 0 or done.stdout:
            raise SystemExit(f"hook failed: {done.returncode} {done.stdout} {done.stderr}")
    return out


def time_command(tree: str, runs: int, env: dict[str, str], *argv: str) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([*CLIENT, *argv], cwd=tree, env=env, check=True, capture_output=True)
        out.append(time.perf_counter() - start)
    return out


def report(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"{name:<30} median {statistics.median(samples) * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms   (n={len(samples)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tree", help="an existing tree to use (a store is created in it)")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="hookbench.")
    try:
        tree = args.tree or stdlib_tree(os.path.join(tmp, "stdlib"))
        files = sum(len(f) for _, _, f in os.walk(tree))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "CLAUDE_"))}
        env["CLAUDE_PROJECT_DIR"] = tree
        subprocess.run([*CLIENT, "init", "-q"], cwd=tree, check=True, env=env)
        subprocess.run([*CLIENT, "snapshot", "-q", "-m", "base"], cwd=tree, check=True, env=env)
        print(f"tree: {tree} ({files} files)")
        local = time_events(tree, args.runs, {**env, "SNAPSTORE_NO_SERVICE": "1"})
        print(report("without the service", local))
        subprocess.run([*CLIENT, "serve", "--detach"], cwd=tree, check=True, env=env, capture_output=True)
        try:
            time_events(tree, 3, env)  # warm the service's caches
            served = time_events(tree, args.runs, env)
            print(report("with the service", served))
            # What the hook costs beyond the service's own snapshot and a bare round trip.
            print(report("  snapshot --skip-unchanged", time_command(tree, args.runs, env, "snapshot", "-q", "--skip-unchanged")))
            print(report("  list -n 1 (round trip)", time_command(tree, args.runs, env, "list", "-n", "1")))
        finally:
            subprocess.run([*CLIENT, "serve", "--stop"], cwd=tree, env=env, capture_output=True)
        python_only = [time.perf_counter()]
        subprocess.run([sys.executable, "-c", "pass"])
        print(f"(a bare python start: {(time.perf_counter() - python_only[0]) * 1000:.1f} ms)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
