"""Automatic maintenance keeps a store as agents leave it near its compacted size (issue 40,
requirement 4): a conversation growing by one message a checkpoint, each checkpoint taken by a
process of its own (a fresh Store, as the CLI without a service does), with the detached pass
on; the store directory as left (the LMDB file included) is at most 1.5x what
``gc --compact`` makes of it.  And the copy that compaction is (under the writer lock) is
bounded: no automatic compaction of a file larger than ``maintenance_due.COMPACT_MAX``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from snapstore.errors import LockedError
from snapstore.ops import background, maintenance_due, schedule
from snapstore.storage.lock import WriterLock
from snapstore.store import Store
from snapstore.testing import build_tree


def allocated(path: str) -> int:
    """Bytes allocated below ``path`` (``du``: st_blocks)."""
    return sum(os.lstat(os.path.join(d, n)).st_blocks * 512 for d, _, names in os.walk(path) for n in names)


def messages(steps: int) -> list[dict[str, str]]:
    import random

    rng = random.Random(5)
    tests = [f"tests/test_{w}.py::test_{v}" for w in ("store", "gc", "diff") for v in "abcde"]
    return [
        {"role": "tool" if n % 2 else "assistant",
         "content": "\n".join(f"{rng.choice(tests)} {'PASSED' if rng.random() < 0.9 else 'FAILED'}" for _ in range(rng.randint(15, 80)))}
        for n in range(steps)
    ]


def settle(store_dir: str, seconds: float = 120.0, idle: Store | None = None) -> None:
    """Wait for a detached maintenance pass to end (it holds the maintenance flock); ``idle``:
    a Store that, meanwhile, does what an idle service does every second."""
    guard = WriterLock(os.path.join(store_dir, background.LOCK_NAME))
    deadline = time.monotonic() + seconds
    time.sleep(0.5)  # (a pass just spawned takes its flock within its start-up)
    while True:
        try:
            with guard.held(0):
                return
        except LockedError:
            assert time.monotonic() < deadline, "the detached pass did not end"
            time.sleep(0.1)
            if idle is not None:
                idle.follow_compaction()


def test_a_growing_conversation_store_as_left_stays_within_1_5x_of_compacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(background.ENV, "1")
    root = tmp_path / "chat"
    build_tree(root, {"notes.txt": b"start\n"})
    Store.init(root).close()
    store_dir = str(root / ".snapstore")
    chat = messages(60)
    for n in range(len(chat)):
        with open(root / "notes.txt", "a") as f:
            f.write(f"step {n}\n")
        with Store.open(root) as store:  # (a process of its own each time, as the CLI's)
            store.snapshot(f"s{n}", conversation=chat[: n + 1])
        if n % 10 == 9:
            settle(store_dir)  # (as an agent's thinking time between tool calls would)
    settle(store_dir)
    left = allocated(store_dir)
    with Store.open(root) as store:
        store.gc(compact=True)
    compacted = allocated(store_dir)
    assert left <= 1.5 * compacted, (left, compacted)


def test_a_service_never_idle_keeps_the_store_within_1_5x_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The resident service reads no pass's plan in a checkpoint (it maintains when idle); an
    agent that keeps it busy still gets the detached pass once the file has grown."""
    monkeypatch.setenv(background.ENV, "1")
    root = tmp_path / "chat"
    build_tree(root, {"notes.txt": b"start\n"})
    chat = messages(60)
    with Store.init(root) as store:
        store.maintain_after_snapshot = False  # (as the service's Store)
        for n in range(len(chat)):
            with open(root / "notes.txt", "a") as f:
                f.write(f"step {n}\n")
            store.snapshot(f"s{n}", conversation=chat[: n + 1])
            if n % 10 == 9:
                settle(str(store.store_dir), idle=store)
    store_dir = str(root / ".snapstore")
    settle(store_dir)
    left = allocated(store_dir)
    with Store.open(root) as store:
        store.gc(compact=True)
    assert left <= 1.5 * allocated(store_dir), (left, allocated(store_dir))


def test_the_fast_path_floor_is_the_modules():
    assert schedule.FILE_GROWN_FLOOR == maintenance_due.GROWTH * maintenance_due.GROWTH_FLOOR


def test_automatic_compaction_is_bounded_by_the_file_size():
    """Compaction copies the file under the writer lock: above COMPACT_MAX, however free the
    file, automatic maintenance leaves it to ``gc --compact``."""
    big = maintenance_due.COMPACT_MAX
    assert maintenance_due.compaction_due(big, big // 2)
    assert not maintenance_due.compaction_due(big + 4096, big // 2)
    assert not maintenance_due.compaction_due(1 << 20, (1 << 20) - (32 << 10))  # (a few free pages)
    assert not maintenance_due.compaction_due(10 << 20, 95 * (1 << 20) // 10)  # (5% free)


def test_the_growth_base_is_the_compacted_size_plus_the_threshold_where_compaction_may_run():
    """A pass that left free pages below the compaction threshold must not raise the base by
    them: from the base, a file grown a quarter has enough free pages to compact."""
    small, used = 256 << 10, 100 << 10
    base = maintenance_due.growth_base(small, used)
    assert base == used + maintenance_due.COMPACT_ABOVE
    grown = int(maintenance_due.GROWTH * base) + 4096
    assert maintenance_due.compaction_due(grown, used)
    assert maintenance_due.growth_base(used, used) == used  # (never above the file)
    big = maintenance_due.COMPACT_MAX + 4096  # (not compacted automatically: the file's own size)
    assert maintenance_due.growth_base(big, big // 2) == big


def test_a_grown_file_makes_maintenance_due_and_a_maintained_one_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The check after a snapshot: due once the file outgrew GROWTH x its size at the last
    maintenance, whatever ``maintenance.checkpoints`` says; the pass records the new size."""
    monkeypatch.setenv(background.ENV, "0")
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n"})
    with Store.init(root) as store:
        store.config_set("maintenance.checkpoints", "1000000")
        n = 0
        while store.backend.disk_size() <= maintenance_due.GROWTH * maintenance_due.GROWTH_FLOOR:
            build_tree(root, {f"f{n}.bin": os.urandom(20_000)})
            store.snapshot(f"s{n}")
            n += 1
            assert n < 500
        with store.backend.read() as view:
            recorded = view.get("meta", maintenance_due.SIZE_KEY)
        assert recorded is not None  # the check ran, by size
        # (its base: the tables' pages plus COMPACT_ABOVE, at most the file's size)
        assert int(recorded) <= store.backend.disk_size()
        assert not maintenance_due.grown(int(recorded), recorded)
