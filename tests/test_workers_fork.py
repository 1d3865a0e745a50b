"""The process's kept thread pools (ops/workers.py) in a forked child.

A library user may fork after snapstore made its pools (``multiprocessing``'s default start
on Linux).  The child inherits the pools without their threads: a job submitted to such a pool
is never run, and the child's restore or checkpoint would wait forever.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from snapstore.ops import workers
from snapstore.store import Store

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _wait(pid: int, seconds: float) -> int | None:
    """The child's exit status, or None (the child killed) when it outlives ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def test_a_pool_used_before_a_fork_runs_jobs_in_the_child():
    assert workers.pool("fork-test", 2).submit(lambda: 1).result(timeout=10) == 1
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when its job ran
        try:
            ok = workers.pool("fork-test", 2).submit(lambda: 7).result(timeout=5) == 7
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    assert _wait(pid, 20) == 0


def test_a_restore_of_many_files_in_a_forked_child_finishes(tmp_path: Path):
    """The restore's writer pool (more than a handful of files) made in the parent first; the
    child opens the store itself (an LMDB environment is not to be used across a fork)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    with Store.init(tree) as store:
        for i in range(20):
            (tree / f"f{i}.txt").write_bytes(b"A %d\n" % i)
        store.snapshot("A", tags=["A"])
        for i in range(20):
            (tree / f"f{i}.txt").write_bytes(b"B %d\n" % i)
        store.snapshot("B", tags=["B"])
        store.restore("A")  # the parent's pools now exist
        pid = os.fork()
        if pid == 0:
            try:
                with Store.open(tree) as own:
                    own.restore("B")
                ok = (tree / "f3.txt").read_bytes() == b"B 3\n"
            except BaseException:
                ok = False
            os._exit(0 if ok else 1)
        assert _wait(pid, 30) == 0
