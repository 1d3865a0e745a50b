"""Crash consistency of restore: real processes killed with SIGKILL at random moments.

After each kill, a reader (``snapstore list``) must work and leave the tree alone; then a writer
(``Store.recover``, what ``snapstore recover`` and every writing command run) finishes the
interrupted restore, so the tree is exactly the before state or exactly the after state, and the
store verifies clean.  A few deterministic kills run in ``make test-fast``; the random ones are
marked slow.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from restore_helpers import read_tree, sample_spec, write_tree

from snapstore.store import Store

TRIALS = int(os.environ.get("SNAPSTORE_CRASH_TRIALS", "32"))

CHILD = r"""
import os, sys, time
from snapstore.ops import restore
from snapstore.store import Store
action, kill_step = sys.argv[1], int(sys.argv[2])
def hook(i):
    if i == kill_step:
        os.kill(os.getpid(), 9)
    time.sleep(0.001)  # widen the window a timed kill can land in
restore.step_hook = hook
store = Store.open(".")
print("go", flush=True)
t = time.perf_counter()
store.undo() if action == "undo" else store.restore("A")
print("done %.6f" % (time.perf_counter() - t), flush=True)
"""


def _edit(root: Path) -> None:
    rng = random.Random(7)
    files = sorted(p for p in root.rglob("*.txt") if ".snapstore" not in p.parts)
    for p in rng.sample(files, 15):
        p.write_bytes(b"edited " + p.name.encode() + b"\n" * rng.randint(1, 50))
    for p in rng.sample([f for f in files if f.exists()], 8):
        if p.exists():
            p.unlink()
    (root / "added/deeper").mkdir(parents=True)
    for i in range(8):
        (root / f"added/deeper/n{i}.py").write_bytes(f"new {i}\n".encode() * 100)
    (root / "big.bin").write_bytes(os.urandom(200_000))
    (root / "bin/tool").chmod(0o644)
    shutil.rmtree(root / "empty")
    (root / "empty").write_bytes(b"a file where a directory was\n")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, dict, dict]:
    base = tmp_path_factory.mktemp("crash-template")
    root = base / "tree"
    root.mkdir()
    write_tree(root, sample_spec(60, seed=3))
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        after = read_tree(root)
        _edit(root)
        before = read_tree(root)
        store.snapshot("B")
    return root, before, after


def _run_child(tree: Path, action: str, kill_step: int, kill_after: float | None):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, action, str(kill_step)],
        cwd=tree,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    line = proc.stdout.readline()
    assert line.strip() == b"go", proc.stderr.read()
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def _next_command(tree: Path) -> bool:
    """A reader leaves the tree alone; then a writer recovers.  True if a restore was pending."""
    untouched = read_tree(tree)
    proc = subprocess.run(
        [sys.executable, "-m", "snapstore", "list"], cwd=tree, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert read_tree(tree) == untouched, "a read-only command changed the tree"
    with Store.open(tree) as store:
        return store.recover().pending


@pytest.mark.parametrize(
    ("action", "kill_step"), [("restore", 0), ("restore", 9), ("restore", 25), ("undo", 1), ("undo", 25)]
)
def test_killed_restore_or_undo_is_finished_by_recover(template, tmp_path: Path, action: str, kill_step: int):
    """Fast: a real process SIGKILLed at a fixed step; recovery rolls it forward."""
    root, before, after = template
    tree = tmp_path / "t"
    shutil.copytree(root, tree, symlinks=True)
    if action == "undo":
        with Store.open(tree) as store:
            store.restore("A")
        before, after = after, before  # the undo goes from the restored state back to the edits
    code, _, err = _run_child(tree, action, kill_step, None)
    assert code == -signal.SIGKILL, err  # killed mid-restore, not finished
    with Store.open(tree) as store:
        assert store.pending_restore() is not None
    assert _next_command(tree) is True
    assert read_tree(tree) == after
    with Store.open(tree) as store:
        assert store.pending_restore() is None
        assert store.verify().ok
        assert store.operations()[0].kind == action


@pytest.mark.slow
def test_restore_killed_at_random_moments_leaves_before_or_after(template, tmp_path: Path):
    root, before, after = template
    # Calibrate: how long does an uninterrupted restore take in a child?
    probe = tmp_path / "probe"
    shutil.copytree(root, probe, symlinks=True)
    code, out, err = _run_child(probe, "restore", -1, None)
    assert code == 0, err
    duration = float(out.split()[-1])
    assert read_tree(probe) == after

    rng = random.Random(12345)
    outcomes = {"before": 0, "after": 0}
    for trial in range(TRIALS):
        tree = tmp_path / f"t{trial}"
        shutil.copytree(root, tree, symlinks=True)
        if trial % 3 == 0:
            code, _, err = _run_child(tree, "restore", rng.randrange(0, 60), None)
        else:
            code, _, err = _run_child(tree, "restore", -1, rng.uniform(0, duration * 1.3))
        assert b"Traceback" not in err, err
        _next_command(tree)
        state = read_tree(tree)
        assert state in (before, after), f"trial {trial}: the tree is neither before nor after"
        outcomes["after" if state == after else "before"] += 1
        with Store.open(tree) as store:
            assert store.verify().ok
            assert store.resolve("A").message == "A"
            # The journal is gone: the next restore and undo work normally.
            store.restore("A")
            assert read_tree(tree) == after
        shutil.rmtree(tree)
    # Both outcomes must occur, or the kills did not land inside the restore.
    assert outcomes["before"] > 0 and outcomes["after"] > 0, outcomes


@pytest.mark.slow
def test_undo_killed_at_random_moments_leaves_before_or_after(template, tmp_path: Path):
    root, before, after = template
    prepared = tmp_path / "prepared"
    shutil.copytree(root, prepared, symlinks=True)
    with Store.open(prepared) as store:
        store.restore("A")
    assert read_tree(prepared) == after
    rng = random.Random(999)
    seen = set()
    recovered = 0
    for trial in range(max(10, TRIALS // 3)):
        tree = tmp_path / f"u{trial}"
        shutil.copytree(prepared, tree, symlinks=True)
        if trial % 2:
            code, _, err = _run_child(tree, "undo", rng.randrange(0, 60), None)
        else:
            code, _, err = _run_child(tree, "undo", -1, rng.uniform(0, 0.08))
        assert b"Traceback" not in err, err
        recovered += _next_command(tree)
        state = read_tree(tree)
        assert state in (before, after), f"trial {trial}"
        seen.add("before" if state == before else "after")
        with Store.open(tree) as store:
            assert store.verify().ok
        shutil.rmtree(tree)
    # Kills landed inside undos (a journal was left, and recovery finished it: "before").
    assert "before" in seen, seen
    assert recovered > 0
