"""The detached maintenance pass a snapshot starts, and ``snapstore maintain``.

Its crash safety is tested where kills are exact: ``make torture``'s maintenance trials SIGKILL
``maintain_all`` (this process's loop) before and after each of its write transactions.
"""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from snapstore.ops import background, consolidate, maintenance, maintenance_due
from snapstore.storage.lock import WriterLock
from snapstore.store import Store
from snapstore.testing import tree_from_store
from tests.helpers import assert_one_line_error, run_snapstore
from tests.test_maintenance import loose, steps


@pytest.fixture(autouse=True)
def _by_checkpoints_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count checkpoints to the pass: the check due because the store file grew
    (tests/test_maintenance_size.py) would start passes in between."""
    monkeypatch.setattr(maintenance_due, "GROWTH", 1e9)


def _full_mark(store_dir) -> bytes | None:
    with Store.open(store=store_dir) as store, store.backend.read() as view:
        return view.get("meta", maintenance.FULL_KEY)


def _wait_settled(store_dir, timeout: float = 60.0) -> None:
    """Until a detached pass has written its mark and let go of the maintenance lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _full_mark(store_dir) is not None:
            with contextlib.suppress(Exception), WriterLock(os.path.join(store_dir, background.LOCK_NAME)).held(0):
                return
        time.sleep(0.1)
    raise AssertionError("the detached pass did not finish")


def test_a_due_full_pass_runs_in_a_process_of_its_own(tree, store, monkeypatch):
    """The snapshot that finds the full pass due starts it and returns: the pass runs in
    another process, which leaves the store as the service's full pass would."""
    monkeypatch.setenv(background.ENV, "1")
    store.config_set("maintenance.checkpoints", "6")
    started: list[int | None] = []
    spawn = background.spawn
    monkeypatch.setattr(background, "spawn", lambda *a: started.append(spawn(*a)) or started[-1])
    ids = steps(tree, store, 6)
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    assert len(started) == 1 and started[0] not in (None, os.getpid())
    # The snapshot did not run the pass itself: the store is as its checkpoints wrote it (a
    # process that only started cannot have finished a level-19 rewrite and written its mark).
    assert _full_mark(store.store_dir) is None and loose(store) >= 6
    store.close()
    _wait_settled(store.store_dir)
    with Store.open(store=store.store_dir) as after:
        assert loose(after) == 0
        assert all(consolidate.is_consolidated(h) for _, _, h in after.backend.value_sizes("packs"))
        assert after.verify().ok
        for cid, spec in specs.items():
            assert tree_from_store(after, cid) == spec


@pytest.mark.parametrize(
    ("env", "config", "due", "spawned"),
    [
        (None, "true", True, True),
        ("1", "false", True, True),
        ("0", "true", True, False),
        (None, "false", True, False),
        ("1", "true", False, False),
    ],
)
def test_the_detached_pass_starts_only_when_allowed_and_due(tree, store, monkeypatch, env, config, due, spawned):
    if env is None:
        monkeypatch.delenv(background.ENV, raising=False)
    else:
        monkeypatch.setenv(background.ENV, env)
    store.config_set("maintenance.detach", config)
    store.config_set("maintenance.checkpoints", "4")
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(background, "spawn", lambda *a: calls.append(a) or 4242)
    monkeypatch.setattr(maintenance, "full_due", lambda *a, **k: due)
    monkeypatch.setattr(maintenance_due, "compaction_due", lambda *a: False)  # (due: the full pass alone)
    steps(tree, store, 4)
    assert calls == ([(store.store_dir, store.root)] if spawned else [])


def test_loose_packs_enough_for_a_pass_are_detached_too(tree, store, monkeypatch):
    """Not only the full pass: the loose-pack pass a snapshot would run within its budget is
    left to the detached process (no budget there, and the file compacted after)."""
    monkeypatch.setenv(background.ENV, "1")
    monkeypatch.setattr(maintenance, "full_due", lambda *a, **k: False)
    monkeypatch.setattr(maintenance_due, "compaction_due", lambda *a: False)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(background, "spawn", lambda *a: calls.append(a) or 4242)
    store.config_set("maintenance.checkpoints", "4")
    store.config_set("maintenance.loose-packs", "50")
    steps(tree, store, 4)
    assert calls == [] and loose(store) >= 4  # fewer than 50: not yet
    store.config_set("maintenance.loose-packs", "4")
    steps(tree, store, 4, start=4)
    assert calls == [(store.store_dir, store.root)] and loose(store) >= 8  # left to the process


def test_without_the_detached_pass_the_snapshot_keeps_its_own_bounded_pass(tree, store, monkeypatch):
    monkeypatch.setenv(background.ENV, "0")
    store.config_set("maintenance.checkpoints", "6")
    store.config_set("maintenance.loose-packs", "4")
    steps(tree, store, 6)
    assert loose(store) == 0 and _full_mark(store.store_dir) is None  # the loose-pack pass ran


def test_maintain_runs_the_due_passes_and_says_when_none_is(tree, store):
    ids = steps(tree, store, 10)
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    store.close()
    first = run_snapstore("maintain", cwd=tree)
    assert first.returncode == 0, first.stderr
    assert first.stdout.decode().startswith("1 maintenance pass(es) (1 full): ")
    second = run_snapstore("maintain", cwd=tree)
    assert second.returncode == 0 and second.stdout.decode() == "no maintenance pass is due\n"
    with Store.open(store=store.store_dir) as after:
        assert loose(after) == 0 and after.verify().ok
        for cid, spec in specs.items():
            assert tree_from_store(after, cid) == spec


def test_one_maintenance_pass_at_a_time(tree, store):
    steps(tree, store, 10)
    store.close()
    packs_before = sorted(pid for pid, _, _ in Store.open(store=store.store_dir).backend.value_sizes("packs"))
    guard = WriterLock(os.path.join(store.store_dir, background.LOCK_NAME))
    with guard.held(0):
        busy = run_snapstore("maintain", cwd=tree)
        quiet = run_snapstore("maintain", "--background", cwd=tree)
    assert busy.returncode == 5
    assert_one_line_error(busy.stderr)
    assert b"another maintenance pass is running" in busy.stderr
    assert quiet.returncode == 0 and quiet.stdout == b"" and quiet.stderr == b""
    with Store.open(store=store.store_dir) as after:
        assert sorted(pid for pid, _, _ in after.backend.value_sizes("packs")) == packs_before


def test_a_step_whose_chunks_gc_moved_meanwhile_is_dropped(tree, store):
    """Steps compress without the lock; a chunk that another writer removed between the read
    and the write must not come back (its entry would name bytes gc meant to drop)."""
    steps(tree, store, 10)
    the_plan = maintenance.plan_full(store.backend)
    assert the_plan is not None
    victim = the_plan.chunks[0][0]

    @contextlib.contextmanager
    def locked():
        with store.backend.write() as batch:  # "a gc" between the compression and the write
            batch.delete("chunks", victim)
        yield

    report = maintenance.run(store.backend, the_plan, level=3, locked=locked)
    assert report.packs_written == 0
    with store.backend.read() as view:
        assert view.get("chunks", victim) is None


def test_the_idle_service_detaches_its_pass_and_compresses_nothing_itself(tree, store, monkeypatch):
    from tests.test_maintenance import _service

    monkeypatch.setenv(background.ENV, "1")
    store.config_set("maintenance.checkpoints", "1000")  # no check from the snapshots
    steps(tree, store, 5)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(background, "spawn", lambda *a: calls.append(a) or 4242)
    svc, close = _service(store)
    try:
        svc._maintain()
    finally:
        close()
    assert calls == [(store.store_dir, store.root)]
    assert loose(store) >= 5  # left to the process it started
