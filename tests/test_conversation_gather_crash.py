"""Rewriting older conversation records in the compact form, killed with SIGKILL at every step.

A template store holds a chat of 40 checkpoints and a rewound branch of it, with every
conversation record turned back into the forms older versions wrote (inline; the first ones
naming a chunk, as a gc of those days left them).  A real process opens a copy and runs what
rewrites them (the maintenance passes a detached process runs, or gc), a few records per
transaction; before each transaction it says so and waits for the parent, which kills it there
(every step boundary) or lets the step start and kills it a moment later (inside or just after
the write).  Afterwards: verify is clean, every checkpoint's conversation reads back
byte-exact, and a second run finishes the job.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers import subprocess_env

from snapstore.store import Store
from snapstore.testing import build_tree
from tests.conversation_legacy import forms, grow, make_legacy

#: Records per transaction in the child: many steps to kill.
STEP = 6

_CHILD = r"""
import sys
from snapstore.ops import maintenance_conversations as mc
from snapstore.store import Store

mc.STEP = int(sys.argv[2])
real = mc._write
count = [0]

def write(*args, **kwargs):
    print("step", count[0], flush=True)
    if sys.stdin.readline() != "go\n":
        sys.exit(3)
    count[0] += 1
    return real(*args, **kwargs)

mc._write = write
with Store.open(".") as store:
    if sys.argv[1] == "gc":
        store.gc()
    else:
        store.maintain_all()
print("done", count[0], flush=True)
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    base = tmp_path_factory.mktemp("gather-template")
    root = base / "tree"
    build_tree(root, {"f.txt": b"x\n"})
    with Store.init(root) as store:
        history = grow(store, 40)
        rewound = history[11][1] + [{"role": "user", "content": "again " * 80}]
        cp = store.snapshot("rewound", conversation=rewound)
        expected = {ref: messages for ref, messages in history}
        expected[cp.id] = rewound
        assert make_legacy(store, chunked=8) == 41
    return root, {k: json.dumps(v) for k, v in expected.items()}


def check(root, expected, *, finish: str) -> None:
    with Store.open(root) as store:
        report = store.verify()
        assert report.ok, [str(p) for p in report.problems[:5]]
        for ref, messages in expected.items():
            assert json.dumps(store.conversation(ref)) == messages, ref
        if finish == "gc":
            store.gc()
            assert forms(store) == {"compact": 41, "inline": 0, "chunks": 0}
        else:
            store.maintain_all()
            assert forms(store)["inline"] == 0
        assert store.verify().ok
        for ref, messages in expected.items():
            assert json.dumps(store.conversation(ref)) == messages, ref


def run_child(root, mode: str, target: int, inside: bool, rng: random.Random) -> bool:
    """Run the child, kill it at step ``target`` (before its write, or ``inside`` it);
    whether it was killed there."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, mode, str(STEP)], cwd=root, env=subprocess_env(),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    killed = False
    try:
        for line in proc.stdout:
            if line.startswith("done"):
                break
            assert line == f"step {line.split()[1]}\n", line
            if int(line.split()[1]) == target:
                if inside:
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
                    time.sleep(rng.uniform(0, 0.01))
                proc.send_signal(signal.SIGKILL)
                killed = True
                break
            proc.stdin.write("go\n")
            proc.stdin.flush()
    finally:
        proc.wait(timeout=120)
    if not killed:
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    return killed


@pytest.mark.parametrize("mode", ["maintain", "gc"])
def test_rewriting_records_killed_at_every_step_loses_nothing(template, tmp_path, mode):
    src, expected = template
    rng = random.Random(7)
    steps = -(-(33 if mode == "maintain" else 41) // STEP)  # inline records; gc: all of them
    for target in range(steps):
        for inside in (False, True):
            root = tmp_path / f"t{target}-{int(inside)}"
            shutil.copytree(src, root)
            assert run_child(root, mode, target, inside, rng), (target, inside)
            check(root, expected, finish=mode)
            shutil.rmtree(root)
