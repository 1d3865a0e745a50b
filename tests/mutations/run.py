"""``make mutate``: apply each mutation of mutations.toml to a copy of the repository, run its
tests there, and fail when one survives.

    python -m tests.mutations.run [--only ID[,ID...]] [--keep]

The copy holds what git tracks plus the untracked files it does not ignore, as they are in the
working tree (so uncommitted work is swept too); the checkout itself is never modified.  Tests
run with the copy first on ``PYTHONPATH``, so the processes they start (the CLI, the service)
import the mutated code as well.  Exit 0 when every mutation was caught, 1 when one survived,
2 when the list is stale (an ``old`` text not found exactly once) or a run could not start.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
LIST = Path(__file__).with_name("mutations.toml")


@dataclass(frozen=True)
class Mutation:
    id: str
    behaviour: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


def load(path: Path = LIST) -> list[Mutation]:
    """The mutations of ``path``, in order."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    return [
        Mutation(m["id"], m["behaviour"], m["file"], m["old"], m["new"], tuple(m["tests"]))
        for m in doc["mutation"]
    ]


def problems(mutations: list[Mutation], root: Path = REPO) -> list[str]:
    """Why the list cannot be applied to ``root`` as it is (empty when it can)."""
    out = []
    seen = set()
    for m in mutations:
        if m.id in seen:
            out.append(f"{m.id}: the id is used twice")
        seen.add(m.id)
        try:
            text = (root / m.file).read_text(encoding="utf-8")
        except OSError as exc:
            out.append(f"{m.id}: {m.file}: {exc.strerror}")
            continue
        if text.count(m.old) != 1:
            out.append(f"{m.id}: its old text occurs {text.count(m.old)} times in {m.file}, not once")
        if m.old == m.new:
            out.append(f"{m.id}: old and new are the same")
        for t in m.tests:
            if not (root / t.split("::")[0]).exists():
                out.append(f"{m.id}: no test file {t}")
    return out


def _copy(dest: Path) -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True,
    ).stdout.split(b"\0")
    for rel in filter(None, listed):
        src = REPO / os.fsdecode(rel)
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        target = dest / os.fsdecode(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def run_one(m: Mutation, copy: Path) -> tuple[str, float]:
    """``caught``, ``survived`` or ``error``, and the seconds it took."""
    path = copy / m.file
    original = path.read_text(encoding="utf-8")
    path.write_text(original.replace(m.old, m.new, 1), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(copy) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("SNAPSTORE_STORE", None)
    start = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-n", "2", *m.tests],
            cwd=copy, env=env, capture_output=True, timeout=1800,
        )
    finally:
        path.write_text(original, encoding="utf-8")
    took = time.monotonic() - start
    tail = done.stdout.decode(errors="replace").strip().splitlines()[-3:]
    if done.returncode == 0:
        return "survived", took
    # (with -x, xdist ends a failed run as "Interrupted", exit 2: the summary line says failed)
    if done.returncode in (1, 2) and tail and re.search(r"\b\d+ failed\b", tail[-1]):
        return "caught", took
    print(f"  {m.id}: pytest exit {done.returncode}: {' | '.join(tail)}", file=sys.stderr)
    return "error", took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated mutation ids")
    parser.add_argument("--keep", action="store_true", help="keep the copy (its path is printed)")
    args = parser.parse_args(argv)
    mutations = load()
    bad = problems(mutations)
    if bad:
        print("the mutation list does not match the code:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 2
    if args.only:
        wanted = set(args.only.split(","))
        mutations = [m for m in mutations if m.id in wanted]
    copy = Path(tempfile.mkdtemp(prefix="snapstore-mutate-"))
    results: dict[str, list[str]] = {"caught": [], "survived": [], "error": []}
    try:
        _copy(copy)
        for m in mutations:
            outcome, took = run_one(m, copy)
            results[outcome].append(m.id)
            print(f"{m.id:<6} {outcome:<8} {took:6.1f} s  {m.behaviour}", flush=True)
    finally:
        if args.keep:
            print(f"(copy kept: {copy})")
        else:
            shutil.rmtree(copy, ignore_errors=True)
    print(f"{len(results['caught'])} caught, {len(results['survived'])} survived, {len(results['error'])} errors")
    if results["survived"]:
        print("survived (no test pins these behaviours): " + ", ".join(results["survived"]))
        return 1
    return 2 if results["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
