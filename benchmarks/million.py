"""A million files (issue 24 req 3): ``python -m benchmarks.million [--files N] [--md FILE]``.

Generates a tree of N small files (directories of 1,000; seeded contents, ~30 bytes each), takes the initial checkpoint with the CLI (timed, peak RSS), starts the store's service
and times, through the ``snapstore`` on the PATH (the native client when built), its first
checkpoint (the walk) and the 1-file checkpoint after it (an agent's first tool call: a few
services started afresh, medians), a no-change checkpoint, a 1-file and a 100-file one (medians), then reads the service's peak RSS: the
memory per file the service needs to answer in O(changed).  `make bench` runs it at 1,000,000.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import statistics
import subprocess
import tempfile
import time

from .competitors import snap_env, snapstore_argv
from .measure import run

#: Targets of the issue, in seconds (absolute: git is not run at this size).
TARGETS = {"no-change": 0.010, "1-file": 0.015}


def generate(root: str, n: int) -> None:
    rng = random.Random(7)
    per = 1000
    for d in range(0, n, per):
        folder = os.path.join(root, f"d{d // per:04d}")
        os.makedirs(folder)
        for i in range(d, min(d + per, n)):
            with open(os.path.join(folder, f"f{i:07d}.txt"), "w") as f:
                f.write(f"file {i} {rng.random():.12f}\n")


def timed(argv: list[str], cwd: str, runs: int, before=None) -> list[float]:
    out = []
    for i in range(runs):
        if before is not None:
            before(i)
        out.append(run(argv, cwd=cwd, env=snap_env()).seconds)
    return out


def prepare_tree(tree: str, n: int, keep: bool) -> float:
    """Generate the tree (seconds taken); with ``keep``, reuse one a previous ``--keep-tree`` run
    left (its store removed: the initial checkpoint is measured anew)."""
    marker = os.path.join(tree, f".generated-{n}")
    if keep and os.path.exists(marker):
        shutil.rmtree(os.path.join(tree, ".snapstore"), ignore_errors=True)
        with open(marker) as f:
            return float(f.read())
    shutil.rmtree(tree, ignore_errors=True)
    t0 = time.perf_counter()
    generate(tree, n)
    took = time.perf_counter() - t0
    if keep:
        with open(marker, "w") as f:
            f.write(str(took))
    return took


def measure(n: int, workdir: str, runs: int, keep: bool = False, first_runs: int = 3) -> dict:
    tree = os.path.join(workdir, "million")
    gen_s = prepare_tree(tree, n, keep)
    snap = snapstore_argv()
    env = snap_env()
    run([*snap, "init", "-q"], cwd=tree, env=env)
    initial = run([*snap, "snapshot", "-q", "-m", "initial"], cwd=tree, env=env)
    rng = random.Random(3)
    names = [os.path.join(tree, f"d{i // 1000:04d}", f"f{i:07d}.txt") for i in range(n)]

    def edit(k: int):
        def before(i: int) -> None:
            for p in rng.sample(names, k):
                with open(p, "a") as f:
                    f.write(f"edit {i}\n")
            time.sleep(0.05)  # (let the watcher see the events, as between tool calls)
        return before

    walks: list[float] = []
    after_open: list[float] = []
    try:
        for r in range(first_runs):  # (each run a service started afresh: its walk, then a 1-file checkpoint)
            if r:
                run([*snap, "serve", "--stop"], cwd=tree, env=env, ok=())
            run([*snap, "serve", "--detach", "--idle-timeout", "3600"], cwd=tree, env=env)
            walks.append(run([*snap, "snapshot", "-q", "--skip-unchanged"], cwd=tree, env=env).seconds)
            after_open += timed([*snap, "snapshot", "-q", "-m", "first after open"], tree, 1, edit(1))
        no_change = timed([*snap, "snapshot", "-q", "--skip-unchanged"], tree, runs)
        one = timed([*snap, "snapshot", "-q", "-m", "one"], tree, runs, edit(1))
        hundred = timed([*snap, "snapshot", "-q", "-m", "hundred"], tree, max(3, runs // 2), edit(100))
        status = subprocess.run([*snap, "serve", "--status"], cwd=tree, env=env, capture_output=True, text=True)
        import json

        pid = json.loads(status.stdout)["pid"]
        with open(f"/proc/{pid}/status") as f:
            hwm_kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
    finally:
        run([*snap, "serve", "--stop"], cwd=tree, env=env, ok=())
        shutil.rmtree(os.path.join(tree, ".snapstore") if keep else tree, ignore_errors=True)
    return {
        "files": n, "generate_s": gen_s, "initial_s": initial.seconds, "initial_rss_kib": initial.rss_kib,
        "service_first_s": statistics.median(walks), "first_after_open_s": statistics.median(after_open),
        "first_after_open_runs": len(after_open), "no_change_s": statistics.median(no_change), "one_file_s": statistics.median(one),
        "hundred_files_s": statistics.median(hundred), "service_peak_rss_kib": hwm_kib,
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, Python {platform.python_version()}",
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(doc: dict) -> str:
    kb_per_file = doc["service_peak_rss_kib"] * 1024 / doc["files"] / 1000
    rows = [
        ("initial checkpoint (CLI)", f"{doc['initial_s']:.1f} s, peak RSS {doc['initial_rss_kib'] / 1024:.0f} MiB", ""),
        ("the service's first checkpoint (its walk)", f"{doc['service_first_s']:.2f} s", ""),
        (f"the first 1-file checkpoint after it (a service started afresh: median of {doc.get('first_after_open_runs', 1)})",
         f"{doc['first_after_open_s'] * 1000:.1f} ms" if "first_after_open_s" in doc else "(not measured)", "<= 15 ms"),
        ("no-change checkpoint, through the service", f"{doc['no_change_s'] * 1000:.1f} ms", "<= 10 ms"),
        ("1-file checkpoint, through the service", f"{doc['one_file_s'] * 1000:.1f} ms", "<= 15 ms"),
        ("100-file checkpoint, through the service", f"{doc['hundred_files_s'] * 1000:.1f} ms", ""),
        ("the service's peak RSS", f"{doc['service_peak_rss_kib'] / 1024:.0f} MiB = {kb_per_file:.2f} KB a file", "~0.5 KB a file"),
    ]
    lines = [
        "# A million files", "",
        f"`python -m benchmarks.million --files {doc['files']}` (run by `make bench`), {doc['when']}; {doc['machine']}. "
        f"A generated tree of {doc['files']:,} small files in {-(-doc['files'] // 1000):,} directories (generated in {doc['generate_s']:.0f} s); "
        "medians; the commands are `snapstore` processes (the native client when built) answered by the store's service. "
        "Durability: the store's default (`storage.durability` = `normal`: one sync a commit, docs/reliability.md).", "",
        "| what | measured | target |", "| --- | --- | --- |",
    ]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.million", description=__doc__)
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    parser.add_argument("--keep-tree", action="store_true", help="keep the generated tree in WORKDIR for the next run (and reuse one left there)")
    parser.add_argument("--first-runs", type=int, default=3, help="services started afresh, each timed on its walk and the 1-file checkpoint after it")
    parser.add_argument("--md", help="write the markdown report here (e.g. docs/benchmarks-million.md)")
    args = parser.parse_args(argv)
    doc = measure(args.files, args.workdir, args.runs, args.keep_tree, max(1, args.first_runs))
    text = markdown(doc)
    print(text)
    if args.md:
        from .mdfile import write_generated

        write_generated(args.md, text, "benchmarks.million")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
