"""A ``normal`` restore's tree syncs left for later (ops/restore/settle.py, ops/restore/powerfail.py).

A watching (long-lived) Store's restore leaves its journal in the store marked *applied* (with
the boot id) until one ``syncfs`` is made: by the process's tree flusher, the next restore, or the next writer of
another process.  A real child process restores and exits at once (``os._exit``: no flusher
ran), leaving such a journal; then:

* another process reads (leaves the tree and the journal alone, warns of nothing) and writes
  (one ``syncfs``, then the journal is gone);
* a power failure is simulated (another boot id; planned files emptied, torn, missing, or back
  as before; one changed by the user): recovery writes the restore's own files again from the
  store, keeps the user's, and the safety checkpoint still holds every file the restore replaced;
* a power failure while the restore ran (journal not applied): the restore's torn files, written
  before that boot ended, are written again; a file written since the reboot is the user's and
  recovery refuses, as after a process crash.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import run_snapstore, subprocess_env
from platform_marks import needs_syncfs
from restore_helpers import read_tree, write_tree

from snapstore.errors import ConflictError
from snapstore.ops.restore import journal
from snapstore.platform import sync
from snapstore.storage.backend import JOURNAL_KEY
from snapstore.store import Store

STRACE = shutil.which("strace")

CHILD = r"""
import os, sys
from snapstore.ops.restore import apply
from snapstore.store import Store
kill_at, real, renamed = int(sys.argv[1]), apply.rename, [0]
def rename(tmp, name, dir_fd):
    if renamed[0] == kill_at:
        os.kill(os.getpid(), 9)
    real(tmp, name, dir_fd)
    renamed[0] += 1
apply.rename = rename
Store.open(".", durability="normal", watch=True).restore("A")  # (a long-lived, watching Store's)
os._exit(0)  # no flusher, no close: the journal stays applied, the tree unsynced
"""


def _spec(tag: bytes) -> dict[str, object]:
    return {f"d{i % 3}/f{i}.txt": tag + b" %d\n" % i * (i + 3) for i in range(12)}


@pytest.fixture
def states(tree: Path) -> tuple[dict, dict]:
    """Checkpoint A; then B (every file rewritten, one added) checkpointed: (A's tree, B's)."""
    write_tree(tree, _spec(b"A"))
    with Store.init(tree) as store:
        store.config_set("maintenance.auto", "false")
        store.snapshot("A", tags=["A"])
        a = read_tree(tree)
        write_tree(tree, _spec(b"B"))
        (tree / "d0/added.txt").write_bytes(b"added in B\n")
        store.snapshot("B")
        b = read_tree(tree)
    return a, b


def _restore_in_a_child(tree: Path, kill_at: int = -1) -> int:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(kill_at)], cwd=tree, env=subprocess_env(),
                          capture_output=True, timeout=120)
    assert b"Traceback" not in proc.stderr, proc.stderr
    return proc.returncode


def _journal(tree: Path) -> journal.Journal | None:
    with Store.open(tree) as store, store.backend.read() as view:
        return journal.read(view)


@needs_syncfs
def test_another_process_reads_past_an_applied_journal_and_its_first_write_syncs_and_clears_it(tree: Path, states):
    a, _ = states
    assert _restore_in_a_child(tree) == 0
    j = _journal(tree)
    assert j is not None and j.applied is not None and j.boot == sync.boot_id()
    assert read_tree(tree) == a
    proc = run_snapstore("list", cwd=tree)
    assert proc.returncode == 0 and b"interrupted" not in proc.stderr, proc.stderr
    assert read_tree(tree) == a and _journal(tree) is not None  # a reader leaves both alone
    cmd = [sys.executable, "-m", "snapstore", "snapshot", "-m", "next", "-q"]
    if STRACE is not None:
        log = tree.parent / "strace.log"
        cmd = [STRACE, "-f", "-qq", "-e", "trace=syncfs", "-o", str(log), *cmd]
    proc = subprocess.run(cmd, cwd=tree, env={**subprocess_env(), "SNAPSTORE_AUTOSTART": "0"},
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert _journal(tree) is None
    assert read_tree(tree) == a
    if STRACE is not None:
        assert len(re.findall(r"\bsyncfs\(\d+\) += 0", log.read_text())) == 1


def _keep_identity(p: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Change ``p``'s bytes in place, its inode and mtime kept (what a power failure leaves of a
    file whose metadata reached the disk and whose data did not)."""
    st = os.lstat(p)
    change(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))


@needs_syncfs
def test_a_power_failure_after_an_applied_restore_is_repaired_from_the_store(tree: Path, states, monkeypatch):
    a, b = states
    assert _restore_in_a_child(tree) == 0
    j = _journal(tree)
    assert j is not None and j.applied is not None
    _keep_identity(tree / "d0/f0.txt", lambda p: os.truncate(p, 0))  # empty
    _keep_identity(tree / "d1/f1.txt", lambda p: p.write_bytes(b"\0" * p.stat().st_size))  # torn
    (tree / "d2/f2.txt").unlink()  # the rename never reached the disk
    (tree / "d0/f3.txt").unlink()
    (tree / "d0/f3.txt").write_bytes(b[os.path.join("d0", "f3.txt")][1])  # as before the restore
    (tree / "d0/added.txt").write_bytes(b"added in B\n")  # its deletion never reached the disk
    (tree / "d1/f4.txt").unlink()
    (tree / "d1/f4.txt").write_bytes(b"the user's own, written since\n")  # another inode
    monkeypatch.setattr(sync, "boot_id", lambda: "another-boot-00000000")
    with Store.open(tree) as store:
        assert "power failure" in (store.pending_restore() or "")
        report = store.recover()
        assert report.pending and any("d1/f4.txt" in w for w in report.warnings), report.warnings
        # The user's bytes: every file the restore replaced is whole in the safety checkpoint.
        for i in range(12):
            rel = f"d{i % 3}/f{i}.txt"
            assert store.read_bytes(j.before.hex(), rel) == b[os.path.join(f"d{i % 3}", f"f{i}.txt")][1]
        assert store.pending_restore() is None and store.verify().ok
    expected = dict(a)
    expected[os.path.join("d1", "f4.txt")] = ("file", b"the user's own, written since\n", False)
    assert read_tree(tree) == expected
    assert _journal(tree) is None
    assert not list(tree.rglob(".snapstore-tmp.*"))


@needs_syncfs
def test_a_power_failure_while_the_restore_ran_rewrites_its_torn_files_and_refuses_the_users(
    tree: Path, states, monkeypatch
):
    a, b = states
    code = _restore_in_a_child(tree, kill_at=6)  # (before its 7th rename)
    assert code == -signal.SIGKILL
    j = _journal(tree)
    assert j is not None and j.applied is None and j.boot == sync.boot_id()
    now = read_tree(tree)
    done = sorted(p for p, v in now.items() if p.endswith(".txt") and v == a.get(p) and v != b.get(p))
    assert done, "some files were renamed into place before the kill"
    torn = tree / done[0]
    _keep_identity(torn, lambda p: os.truncate(p, 0))
    user = tree / done[-1]
    user.write_bytes(b"written after the reboot\n")
    later = time.time_ns() + 20 * 10**9
    os.utime(user, ns=(later, later))
    monkeypatch.setattr(sync, "boot_id", lambda: "another-boot-00000000")
    monkeypatch.setattr(sync, "boot_time_ns", lambda: time.time_ns() + 10 * 10**9)
    with Store.open(tree) as store:
        with pytest.raises(ConflictError, match=re.escape(done[-1])):
            store.recover()
        user.unlink()  # the user moves their version aside
        report = store.recover()
        assert report.pending and report.conflicts == []
    assert read_tree(tree) == a
    assert _journal(tree) is None


def test_journal_key_is_the_one_recovery_reads():
    assert JOURNAL_KEY == journal.JOURNAL_KEY


@needs_syncfs
def test_sync_pending_settles_a_waiting_restore_in_the_calling_thread(tree: Path, states, monkeypatch):
    """``settle.sync_pending`` (the suite's fixture calls it after each test) makes the waiting
    ``syncfs`` and clears the applied journal at once, in the calling thread; the flusher's turn,
    a second later, does nothing more."""
    from snapstore.ops.restore import batch, settle

    real = batch.syncfs
    assert real is not None
    calls: list[str] = []

    def syncfs(fd):
        calls.append(threading.current_thread().name)
        real(fd)

    hooks: list[str] = []
    with Store.open(tree, durability="normal", watch=True) as store:
        store.restore("A")
        with store.backend.read() as view:  # type: ignore[attr-defined]
            assert view.get("journal", JOURNAL_KEY) is not None  # (applied, its tree not yet synced)
        monkeypatch.setattr(batch, "syncfs", syncfs)
        monkeypatch.setattr(settle, "step_hook", lambda step: hooks.append(threading.current_thread().name))
        settle.sync_pending()
        assert calls == hooks == [threading.current_thread().name]
        with store.backend.read() as view:  # type: ignore[attr-defined]
            assert view.get("journal", JOURNAL_KEY) is None
        time.sleep(settle.DELAY + 0.5)  # (the flusher's turn, had it kept one)
    assert calls == hooks == [threading.current_thread().name]
