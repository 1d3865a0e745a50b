"""The durability setting (``storage.durability``, ``Store.open(durability=...)``): what each
mode syncs, counted on a real process's system calls (strace), and how the setting is chosen.

Crash and power-loss tests are in test_durability_crash.py and test_durability_power.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_snapstore, subprocess_env
from platform_marks import needs_syncfs

from snapstore.errors import CorruptError, UsageError
from snapstore.storage import lmdb_durability
from snapstore.store import Store

STRACE = shutil.which("strace")

CHILD = r"""
import os, sys
from snapstore.store import Store
mode, n = sys.argv[1], int(sys.argv[2])
store = Store.open(".", durability=None if mode == "config" else mode)
os.write(1, b"mode %s\n" % store.backend.durability.encode())
for i in range(n):
    with open("f.txt", "w") as f:
        f.write("version %d\n" % i)
    os.write(1, b"BEGIN\n")
    store.snapshot("s%d" % i)
    os.write(1, b"END\n")
os._exit(0)  # no close: what a checkpoint syncs before it returns, nothing after
"""


def _syncs_per_checkpoint(root: Path, mode: str, n: int = 4) -> tuple[str, list[int]]:
    """Run ``n`` checkpoints in a child under strace; the fsync-family calls each made."""
    log = root.parent / f"strace-{mode}.log"
    subprocess.run(
        [STRACE, "-f", "-qq", "-e", "trace=fsync,fdatasync,msync,sync_file_range,syncfs,write",
         "-o", str(log), sys.executable, "-c", CHILD, mode, str(n)],
        cwd=root, env=subprocess_env(), check=True, capture_output=True, timeout=120,
    )
    out = (root.parent / f"strace-{mode}.log").read_text()
    counts: list[int] = []
    inside = False
    effective = re.search(r'write\(1, "mode (\w+)', out)
    for line in out.splitlines():
        if 'write(1, "BEGIN' in line:
            inside, syncs = True, 0
        elif 'write(1, "END' in line:
            inside = False
            counts.append(syncs)
        elif inside and re.search(r"\b(fsync|fdatasync|msync|sync_file_range|syncfs)\(", line):
            syncs += 1
    return (effective.group(1) if effective else "?"), counts


@pytest.mark.skipif(STRACE is None, reason="needs strace")
@pytest.mark.parametrize(("mode", "syncs"), [("full", 2), ("normal", 1), ("off", 0)])
def test_each_mode_syncs_what_it_says_before_a_checkpoint_returns(project: Path, mode: str, syncs: int):
    """full: the commit's data pages and the meta page; normal: the data pages only (the meta
    page waits for the flusher); off: nothing."""
    root = project
    effective, counts = _syncs_per_checkpoint(root, mode)
    assert effective == mode
    # The first checkpoint past maintenance's size floor also records the store file's size,
    # once (ops/schedule.py: the base of the growth rule): one more commit, synced as any.
    assert counts[1:] == [syncs] * 3 and syncs <= counts[0] <= 2 * syncs, counts


@pytest.mark.skipif(STRACE is None, reason="needs strace")
def test_the_stored_setting_is_followed_by_a_new_process(project: Path):
    root = project
    proc = run_snapstore("config", "storage.durability", "off", cwd=root)
    assert proc.returncode == 0, proc.stderr
    effective, counts = _syncs_per_checkpoint(root, "config", 2)
    assert effective == "off" and counts == [0, 0]


def test_normal_flushes_the_meta_page_within_the_delay(project: Path):
    root = project
    with Store.open(root, durability="normal") as store:
        env = store.backend._shared  # type: ignore[attr-defined]
        (root / "f.txt").write_text("changed\n")
        store.snapshot("one")
        assert lmdb_durability.flusher.pending(env)
        deadline = time.monotonic() + lmdb_durability.FLUSH_DELAY + 2
        while lmdb_durability.flusher.pending(env) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not lmdb_durability.flusher.pending(env)


def test_closing_flushes_a_pending_meta_page(project: Path, monkeypatch):
    root = project
    store = Store.open(root, durability="normal")
    env = store.backend._shared  # type: ignore[attr-defined]
    flushed: list[bool] = []
    real = env.env.sync
    monkeypatch.setattr(env, "env", _SyncSpy(env.env, flushed, real))
    (root / "f.txt").write_text("changed\n")
    store.snapshot("one")
    assert lmdb_durability.flusher.pending(env)
    store.close()
    assert flushed == [True]
    assert not lmdb_durability.flusher.pending(env)


class _SyncSpy:
    def __init__(self, env, seen: list[bool], real) -> None:  # type: ignore[no-untyped-def]
        self._env, self._seen, self._real = env, seen, real

    def sync(self, force: bool = False) -> None:
        self._seen.append(force)
        self._real(force)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._env, name)


def test_setting_default_argument_config_and_damage(project: Path):
    root = project
    with Store.open(root) as store:
        assert store.backend.durability == lmdb_durability.DEFAULT  # type: ignore[attr-defined]
        assert store.config_get("storage.durability") == lmdb_durability.DEFAULT
        assert store.config_set("storage.durability", "FULL") == "full"
        assert store.backend.durability == "full"  # type: ignore[attr-defined]  # at once
        with pytest.raises(UsageError):
            store.config_set("storage.durability", "sometimes")
    with Store.open(root) as store:
        assert store.backend.durability == "full"  # type: ignore[attr-defined]
    with Store.open(root, durability="off") as store:  # the argument wins over the config
        assert store.backend.durability == "off"  # type: ignore[attr-defined]
        assert store.backend._shared.synced_commits is False  # type: ignore[attr-defined]
    with pytest.raises(UsageError):
        Store.open(root, durability="fast")
    with Store.open(root) as store, store.backend.write() as batch:
        batch.put("meta", lmdb_durability.CONFIG_KEY, b"\xffbad")
    with pytest.raises(CorruptError, match="storage.durability"):
        Store.open(root)


def test_a_second_store_object_cannot_turn_off_syncs_under_the_first(project: Path):
    """MDB_NOSYNC is fixed when LMDB opens the file: while another Store of the process has
    it open with synced commits, ``off`` keeps them (its mode in effect says ``normal``)."""
    root = project
    with Store.open(root, durability="full") as first, Store.open(root, durability="off") as second:
        assert second.backend.durability == "normal"  # type: ignore[attr-defined]
        assert first.backend._shared.synced_commits is True  # type: ignore[attr-defined]


def test_cli_config_sets_and_shows_durability(project: Path):
    root = project
    proc = run_snapstore("config", "storage.durability", "full", cwd=root)
    assert proc.returncode == 0 and proc.stdout.strip() == b"storage.durability = full", proc.stderr
    proc = run_snapstore("config", "storage.durability", "sometimes", cwd=root)
    assert proc.returncode == 2 and b"storage.durability" in proc.stderr


RESTORE_CHILD = r"""
import os, sys, time
from snapstore.ops.restore import settle
from snapstore.store import Store
mode, watch = sys.argv[1], sys.argv[2] == "watch"
store = Store.open(".", durability=mode, watch=watch)
first = store.snapshot("first").id
for i in range(6):
    with open("f%d.txt" % i, "w") as f:
        f.write("edited %d\n" % i * 40)
store.snapshot("second")
os.write(1, b"BEGIN\n")
store.restore(first)
os.write(1, b"END\n")
time.sleep(settle.DELAY + 1.5)  # the tree flusher's turn
os._exit(0)
"""


def _syncfs_around_a_restore(root: Path, mode: str, watch: str) -> tuple[int, int]:
    """A restore in a child under strace: the ``syncfs`` calls it made before it returned, and
    after (within the tree flusher's delay)."""
    for i in range(6):
        (root / f"f{i}.txt").write_text(f"start {i}\n")
    log = root.parent / f"strace-restore-{mode}.log"
    subprocess.run(
        [STRACE, "-f", "-qq", "-e", "trace=syncfs,write", "-o", str(log), sys.executable, "-c", RESTORE_CHILD, mode, watch],
        cwd=root, env=subprocess_env(), check=True, capture_output=True, timeout=120,
    )
    inside, after, where = 0, 0, "before"
    for line in log.read_text().splitlines():
        if 'write(1, "BEGIN' in line:
            where = "inside"
        elif 'write(1, "END' in line:
            where = "after"
        elif re.search(r"\bsyncfs\(\d+\) += 0", line):
            inside += where == "inside"
            after += where == "after"
    return inside, after


@pytest.mark.skipif(STRACE is None, reason="needs strace")
@needs_syncfs
@pytest.mark.parametrize(
    ("mode", "watch", "inline", "later"),
    [("normal", "watch", 0, 1), ("normal", "plain", 2, 0), ("full", "watch", 2, 0), ("off", "watch", 0, 0)],
)
def test_a_normal_restore_makes_no_syncfs_inline_and_one_later(
    project: Path, mode: str, watch: str, inline: int, later: int
):
    """``normal`` in a watching (long-lived) Store: the tree's syncs are left to the tree
    flusher (one ``syncfs``, after the restore returned; the journal waits for it); in a plain
    Store (a CLI process's, which exits at once) both inline, as ``full``; ``off``: none."""
    assert _syncfs_around_a_restore(project, mode, watch) == (inline, later)
