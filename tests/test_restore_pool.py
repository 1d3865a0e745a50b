"""A restore's file work, trimmed: the writer pool's jobs, and the system calls a replaced file
costs (each a metadata change the file system journals; counted through seams, never timed)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from restore_helpers import write_tree

from snapstore.ops.restore import apply as apply_mod
from snapstore.ops.restore import batch
from snapstore.store import Store

N = 30  # (above batch.POOL_MIN_FILES: the pool writes them)


def test_the_pool_runs_every_job_and_raises_the_first_error_once_all_ended():
    ran: list[int] = []
    running = [0]
    lock = threading.Lock()

    def job(i: int) -> Any:
        def run() -> None:
            with lock:
                running[0] += 1
            time.sleep(0.001)
            with lock:
                running[0] -= 1
                ran.append(i)
            if i % 5 == 3:  # (more failing jobs than workers)
                raise OSError(f"job {i} failed")

        return run

    with pytest.raises(OSError, match="failed"):
        batch._in_pool([job(i) for i in range(40)])
    assert running[0] == 0  # (none left running once the error is out)
    assert sorted(ran) == list(range(40))


class _Counting:
    """The apply module's ``os``, counting the calls named in ``counted``."""

    def __init__(self, counted: tuple[str, ...]):
        self.calls = dict.fromkeys(counted, 0)

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in self.calls:
            return real

        def counted(*args: Any, **kw: Any) -> Any:
            self.calls[name] += 1
            return real(*args, **kw)

        return counted


def _restore_counting(tree: Path, store: Store, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    files = {f"d/f{i:02d}.txt": b"old %d\n" % i for i in range(N)}
    write_tree(tree, files)
    for name in files:
        os.chmod(tree / name, 0o644)
    store.snapshot("A", tags=["A"])
    write_tree(tree, {name: b"new\n" for name in files})
    counting = _Counting(("fchmod", "stat"))
    monkeypatch.setattr(apply_mod, "os", counting)
    store.restore("A")
    monkeypatch.undo()
    assert {name: (tree / name).read_bytes() for name in files} == files
    return counting.calls


def test_a_restored_file_whose_mode_the_umask_keeps_gets_no_fchmod(tree: Path, store: Store, monkeypatch):
    old = os.umask(0o022)
    try:
        calls = _restore_counting(tree, store, monkeypatch)
    finally:
        os.umask(old)
    assert calls["fchmod"] == 0


def test_a_replaced_file_costs_the_check_and_the_stat_after_its_rename(tree: Path, store: Store, monkeypatch):
    """Setting a replaced file aside reuses the lstat its concurrent-edit check just made: its
    stats are that check, the check that its path is still clear before the rename, and the
    stat after the rename (for the stat cache)."""
    calls = _restore_counting(tree, store, monkeypatch)
    assert calls["stat"] == 3 * N
