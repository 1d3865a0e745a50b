"""A process crash loses nothing under any durability setting: real processes SIGKILLed at
every step of their writes (before and after each commit, before each flush, before each file
a restore touches).

The child opens the store with the setting, takes checkpoints (printing ``ACK <id>`` when each
returns) and restores the first one (``RESTORED``).  It is killed at its k-th storage step, for
every k (under ``normal`` also once the restore's journal is marked applied, and between the
deferred ``syncfs`` and the journal's clearing: ops/restore/settle.py).  Then the store must
open and verify clean, hold every acknowledged checkpoint, and the
next writer must leave the tree exactly as before the restore or exactly as the restore left it.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env
from restore_helpers import read_tree

from snapstore.platform import sync
from snapstore.storage.backend import JOURNAL_KEY
from snapstore.store import Store

CHILD = r"""
import os, sys
from snapstore.ops import restore
from snapstore.ops.restore import journal, settle
from snapstore.storage import lmdb_backend
from snapstore.store import Store
mode, kill_at = sys.argv[1], int(sys.argv[2])
steps = [0]
def hook(what):
    steps[0] += 1
    if steps[0] == kill_at:
        os.kill(os.getpid(), 9)
lmdb_backend.step_hook = hook
restore.step_hook = hook  # and before each file the restore touches
settle.step_hook = hook  # and once its journal is marked applied, and between its syncfs and clearing
store = Store.open(".", durability=mode, watch=True)  # (watching: normal defers the tree's syncs)
first = None
for i in range(2):
    with open("f%d.txt" % i, "w") as f:
        f.write("edit %d\n" % i * 50)
    cp = store.snapshot("s%d" % i)
    first = first or cp.id
    os.write(1, b"ACK " + cp.id.encode() + b"\n")
store.restore(first)
os.write(1, b"RESTORED\n")
with store.backend.read() as view:
    j = journal.read(view)
os.write(1, b"APPLIED %d\n" % (j is not None and j.applied is not None))
store.recover()  # (under normal: the deferred syncfs and the journal's clearing, here, counted)
os.write(1, b"STEPS %d\n" % steps[0])
os._exit(0)
"""


def _template(tmp_path: Path) -> Path:
    root = tmp_path / "template"
    root.mkdir()
    for i in range(4):
        (root / f"f{i}.txt").write_text(f"start {i}\n")
    (root / "sub").mkdir()
    (root / "sub" / "g.txt").write_text("g\n")
    with Store.init(root) as store:
        store.config_set("maintenance.auto", "false")  # nothing but the child writes
        store.snapshot("initial")
    return root


def _child(tree: Path, mode: str, kill_at: int) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(kill_at)], cwd=tree, env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout.splitlines()


@pytest.mark.parametrize("mode", ["full", "normal", "off"])
def test_sigkill_at_every_storage_step_loses_nothing(tmp_path: Path, mode: str):
    template = _template(tmp_path)
    probe = tmp_path / "probe"
    shutil.copytree(template, probe)
    code, lines = _child(probe, mode, 0)
    assert code == 0, lines
    total = int(lines[-1].split()[1])
    # Under normal the restore leaves its tree's syncs for later, the journal marked applied (only
    # where syncfs exists: without it every file is fsynced before its rename, nothing is left).
    assert f"APPLIED {int(mode == 'normal' and sync.available())}" in lines, lines
    after_restore = read_tree(probe)
    edited = tmp_path / "edited"  # the tree after the child's two edits, before its restore
    shutil.copytree(template, edited)
    for i in range(2):
        (edited / f"f{i}.txt").write_text(f"edit {i}\n" * 50)
    before_restore = read_tree(edited)
    assert before_restore != after_restore
    assert total >= 6
    for k in range(1, total + 1):
        tree = tmp_path / f"k{k}"
        shutil.copytree(template, tree)
        code, lines = _child(tree, mode, k)
        assert code == -signal.SIGKILL, (k, lines)
        acked = [x.split()[1] for x in lines if x.startswith("ACK ")]
        with Store.open(tree) as store:
            store.recover()  # what the next writer does first
            with store.backend.read() as view:
                assert view.get("journal", JOURNAL_KEY) is None, (mode, k)  # settled or finished
            ids = {c.id for c in store.checkpoints()}
            assert set(acked) <= ids, (mode, k)
            assert store.verify().ok, (mode, k)
        if len(acked) == 2:  # killed in the restore: before it or after it, nothing between
            assert read_tree(tree) in (before_restore, after_restore), (mode, k)
        shutil.rmtree(tree)
