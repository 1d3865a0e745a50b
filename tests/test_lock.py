"""One writer at a time: a held lock makes writers fail with LockedError (exit 5), not readers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import assert_one_line_error, run_snapstore, subprocess_env

from snapstore.errors import LockedError
from snapstore.storage.lock import WriterLock
from snapstore.store import Store
from snapstore.testing import build_tree

_HOLDER = r"""
import sys
from snapstore.storage.lock import WriterLock
lock = WriterLock(sys.argv[1], timeout=5)
with lock.held():
    print("locked", flush=True)
    sys.stdin.read()  # hold until the test closes our stdin
"""


@pytest.fixture
def held_lock(tree, store):
    """A second process holding the store's writer lock; yields its pid."""
    build_tree(tree, {"a.txt": b"hello"})
    store.snapshot("before the lock")
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, os.path.join(store.store_dir, "lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=subprocess_env(),
    )
    try:
        assert proc.stdout.readline() == b"locked\n"
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_second_writer_fails_naming_the_holder(tree, held_lock):
    with Store.open(tree, lock_timeout=0.2) as other:
        with pytest.raises(LockedError) as info:
            other.snapshot("blocked")
    assert f"process {held_lock}" in str(info.value)
    assert info.value.exit_code == 5
    with Store.open(tree) as s:
        assert len(s.checkpoints()) == 1  # nothing was written


def test_cli_snapshot_exits_5_while_locked(tree, held_lock):
    proc = run_snapstore("--lock-timeout", "0.2", "snapshot", "-m", "blocked", cwd=tree)
    assert proc.returncode == 5
    assert_one_line_error(proc.stderr)
    assert str(held_lock).encode() in proc.stderr


def test_readers_are_not_blocked_while_locked(tree, held_lock):
    listed = run_snapstore("--lock-timeout", "0.2", "list", "--json", cwd=tree)
    assert listed.returncode == 0, listed.stderr
    assert b"before the lock" in listed.stdout
    cat = run_snapstore("--lock-timeout", "0.2", "cat", "latest", "a.txt", cwd=tree)
    assert (cat.returncode, cat.stdout) == (0, b"hello")
    verify = run_snapstore("--lock-timeout", "0.2", "verify", "-q", cwd=tree)
    assert verify.returncode == 0, verify.stderr
    with Store.open(tree, lock_timeout=0.2) as s:
        assert s.read_bytes("latest", "a.txt") == b"hello"


def test_lock_is_released_when_the_holder_exits(tree, store):
    build_tree(tree, {"a": b"a"})
    proc = subprocess.run(
        [sys.executable, "-c", _HOLDER, os.path.join(store.store_dir, "lock")],
        input=b"", capture_output=True, env=subprocess_env(), timeout=30,
    )  # fmt: skip
    assert proc.returncode == 0
    with Store.open(tree, lock_timeout=0.5) as s:
        assert s.snapshot("after").stats["files"] == 1


def test_two_lock_objects_conflict_in_one_process(tmp_path):
    path = str(tmp_path / "lock")
    first, second = WriterLock(path, timeout=5), WriterLock(path, timeout=0.05)
    with first.held():
        with first.held():  # re-entrant for its owner
            pass
        with pytest.raises(LockedError) as info:
            with second.held():
                pass
        assert f"process {os.getpid()}" in str(info.value)
    with second.held():  # free again
        pass


def test_a_waiter_tries_again_soon_then_backs_off_to_the_poll(tmp_path, monkeypatch):
    """A lock held for a moment costs its waiter about that moment: the first retry comes after
    a millisecond, the pauses then double up to POLL (never more), and the last one ends at the
    deadline."""
    from snapstore.storage import lock as lock_mod

    path = str(tmp_path / "lock")
    holder = WriterLock(path)
    pauses: list[float] = []
    clock = [1000.0]
    monkeypatch.setattr(lock_mod.time, "monotonic", lambda: clock[0])

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(lock_mod.time, "sleep", sleep)
    with holder.held(), pytest.raises(LockedError):
        WriterLock(path).held(timeout=0.1).__enter__()
    assert pauses[:6] == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.016, 0.02])
    assert max(pauses) <= lock_mod.POLL
    assert sum(pauses) == pytest.approx(0.1)
