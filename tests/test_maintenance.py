"""The automatic maintenance pass: small loose packs gathered after N checkpoints, in steps."""

from __future__ import annotations

import contextlib

import pytest

from snapstore.ops import consolidate, maintenance, maintenance_due, schedule
from snapstore.storage.backend import CONFIG_PREFIX
from snapstore.store import Store
from snapstore.testing import build_tree, tree_from_store
from tests.helpers import word_text as text


def steps(tree, store: Store, n: int, start: int = 0) -> list[str]:
    """``n`` checkpoints, each changing two of eight files."""
    ids = []
    for k in range(start, start + n):
        build_tree(tree, {f"d/f{i}.py": text(4_000, 1000 * k + i if i in (k % 8, (k + 3) % 8) else i) for i in range(8)})
        ids.append(store.snapshot(f"step {k}").id)
    return ids


@pytest.fixture(autouse=True)
def _by_checkpoints_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count checkpoints to the pass: the check due because the store file grew
    (tests/test_maintenance_size.py) would run passes in between."""
    monkeypatch.setattr(maintenance_due, "GROWTH", 1e9)


def loose(store: Store) -> int:
    return len(maintenance.small_loose(store.backend))


def consolidated(store: Store) -> int:
    return sum(1 for _, _, h in store.backend.value_sizes("packs") if consolidate.is_consolidated(h))


def test_after_n_checkpoints_a_snapshot_gathers_the_small_loose_packs(tree, store):
    store.config_set("maintenance.checkpoints", "6")
    store.config_set("maintenance.loose-packs", "4")
    ids = steps(tree, store, 5)
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    assert loose(store) >= 5 and consolidated(store) == 0  # not yet: 5 checkpoints
    ids += steps(tree, store, 1, start=5)  # the 6th checkpoint runs the pass
    specs[ids[-1]] = tree_from_store(store, ids[-1])
    assert loose(store) == 0 and consolidated(store) >= 1
    assert store.verify().ok
    for cid in ids:
        assert tree_from_store(store, cid) == specs[cid]


def test_maintenance_auto_false_gathers_nothing(tree, store):
    store.config_set("maintenance.checkpoints", "3")
    store.config_set("maintenance.loose-packs", "2")
    store.config_set("maintenance.auto", "false")
    steps(tree, store, 7)
    assert consolidated(store) == 0


def test_fewer_loose_packs_than_the_threshold_wait_for_the_next_check(tree, store):
    store.config_set("maintenance.checkpoints", "3")
    store.config_set("maintenance.loose-packs", "50")
    steps(tree, store, 7)
    assert consolidated(store) == 0 and loose(store) >= 7


def test_the_pass_moves_dead_chunks_too_and_removes_nothing(tree, store):
    ids = steps(tree, store, 6)
    store.delete(ids[1])
    with store.backend.read() as view:
        chunks_before = view.count("chunks")
    report = store.maintain()
    assert report is not None and report.packs_gathered == report.loose >= 6
    with store.backend.read() as view:
        assert view.count("chunks") == chunks_before  # liveness is gc's business
    assert store.verify().ok
    assert store.gc().chunks_removed > 0
    assert store.verify().ok


def test_a_chunk_reused_between_the_plan_and_the_moves_survives(tree, store):
    ids = steps(tree, store, 6)
    spec = tree_from_store(store, ids[1])
    store.delete(ids[1])  # its chunks are now dead...
    the_plan = maintenance.plan(store.backend, min_packs=2, max_chunks=10**6)
    assert the_plan is not None
    build_tree(tree, {p.decode(): body for p, body in spec.items()})
    again = store.snapshot("the same files again")  # ...and reused by a new checkpoint
    maintenance.run(store.backend, the_plan, level=3, locked=contextlib.nullcontext)
    assert store.verify().ok
    assert tree_from_store(store, again.id) == spec
    store.gc()
    assert tree_from_store(store, again.id) == spec
    assert store.verify().ok


def test_each_step_holds_the_lock_on_its_own(tree, store, monkeypatch):
    monkeypatch.setattr(maintenance, "STEP_BYTES", 8_000)
    ids = steps(tree, store, 6)
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    held = []

    @contextlib.contextmanager
    def locked():
        held.append(1)
        yield

    the_plan = maintenance.plan(store.backend, min_packs=2, max_chunks=10**6)
    assert the_plan is not None
    report = maintenance.run(store.backend, the_plan, level=3, locked=locked)
    assert report.steps >= 3 and len(held) == report.steps + 1  # the steps, then the drop
    assert store.verify().ok
    for cid in ids:
        assert tree_from_store(store, cid) == specs[cid]


def test_the_fast_path_keys_are_the_modules(tree, store):
    assert maintenance.SEQ_KEY == b"maintenance:at"
    defaults = store.config()
    assert defaults["maintenance.checkpoints"] == str(maintenance.EVERY) == str(schedule.EVERY)
    assert defaults["maintenance.loose-packs"] == str(maintenance.LOOSE_PACKS)
    assert defaults["maintenance.budget-ms"] == str(maintenance.BUDGET_MS)
    assert CONFIG_PREFIX + b"maintenance.auto" == b"config:maintenance.auto"


def _service(store: Store):
    import os

    from snapstore.service.server import Service

    svc = Service(store.store_dir)
    return svc, lambda: (svc.store.close(), os.close(svc._dir_fd))


def test_the_idle_service_gathers_the_small_loose_packs(tree, store):
    store.config_set("maintenance.checkpoints", "1000")  # no pass from the snapshots themselves
    ids = steps(tree, store, 5)
    assert loose(store) >= 5
    svc, close = _service(store)
    try:
        svc._maintain()
    finally:
        close()
    assert loose(store) == 0 and consolidated(store) >= 1
    assert store.verify().ok
    assert all(tree_from_store(store, cid) for cid in ids)


def test_the_idle_service_leaves_a_store_alone_when_auto_is_off_or_another_writer_holds_it(tree, store):
    store.config_set("maintenance.checkpoints", "1000")
    steps(tree, store, 5)
    store.config_set("maintenance.auto", "false")
    svc, close = _service(store)
    try:
        svc._maintain()
        assert consolidated(store) == 0
        store.config_set("maintenance.auto", "true")
        with store._lock.held():  # another writer: the pass waits 0.2 s, then gives up
            svc._maintain()
        assert consolidated(store) == 0
        svc._maintain()
        assert consolidated(store) >= 1
    finally:
        close()


def test_a_store_with_more_chunks_than_the_bound_is_left_to_gc(tree, store, monkeypatch):
    """Finding a pack's chunks reads every entry: after a snapshot only small stores pay it."""
    monkeypatch.setattr(maintenance, "SNAPSHOT_CHUNKS", 5)
    store.config_set("maintenance.checkpoints", "4")
    store.config_set("maintenance.loose-packs", "2")
    steps(tree, store, 6)
    assert consolidated(store) == 0 and loose(store) >= 6
    assert store.maintain(max_chunks=5) is None
    assert store.maintain() is not None  # the service's bound is higher
    assert loose(store) == 0


def test_a_pass_asked_to_stop_moves_no_more_and_loses_nothing(tree, store, monkeypatch):
    """The resident service stops its idle pass as soon as a request waits: the steps done stay
    done, the rest waits for the next pass, and every checkpoint is whole."""
    monkeypatch.setattr(maintenance, "STEP_BYTES", 8_000)
    ids = steps(tree, store, 6)
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    asked = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 1  # one step, then a request is waiting

    the_plan = maintenance.plan(store.backend, min_packs=2, max_chunks=10**6)
    assert the_plan is not None
    report = maintenance.run(store.backend, the_plan, level=3, locked=contextlib.nullcontext, stop=stop)
    assert report.steps == 1 and 0 < report.chunks_moved < len(the_plan.chunks)
    assert store.verify().ok
    for cid in ids:
        assert tree_from_store(store, cid) == specs[cid]
    assert loose(store) > 0  # (what was not moved waits for the next pass)
    assert store.maintain(min_packs=2) is not None and store.verify().ok


def test_the_services_checkpoints_leave_the_pass_to_its_idle_time(tree, store):
    """A checkpoint through the service never pays for the pass's plan (which reads every chunk
    entry: 0.1-0.7 s at 10k files, measured); the service runs it when idle.  The same store
    opened in-process still runs it after a snapshot when due."""
    store.config_set("maintenance.checkpoints", "2")
    svc, close = _service(store)
    try:
        for k in range(5):
            build_tree(tree, {"d/a.py": text(4_000, 50 + k), "d/b.py": text(4_000, 90 + k)})
            svc.store.snapshot(f"through the service {k}")
        with store.backend.read() as view:
            assert view.get("meta", maintenance.SEQ_KEY) is None  # no pass ran in a checkpoint
    finally:
        close()
    ids = steps(tree, store, 3, start=10)
    with store.backend.read() as view:
        assert view.get("meta", maintenance.SEQ_KEY) is not None
    assert store.verify().ok and all(tree_from_store(store, cid) for cid in ids)


def test_the_pass_after_a_snapshot_keeps_to_its_time_budget(tree, store, monkeypatch):
    """Past ``maintenance.budget-ms`` no new step starts (one always runs): the snapshot that
    runs the pass waits a bounded time, and later passes go on where it stopped."""
    monkeypatch.setattr(maintenance, "STEP_BYTES", 8_000)
    ticks = iter(range(10**6))
    monkeypatch.setattr(maintenance, "_clock", lambda: float(next(ticks)))  # 1 s per question
    store.config_set("maintenance.checkpoints", "6")
    store.config_set("maintenance.loose-packs", "2")
    store.config_set("maintenance.budget-ms", "500")
    ids = steps(tree, store, 6)  # the 6th runs the pass: one step, then the budget is spent
    assert consolidated(store) == 1 and loose(store) >= 3
    ids += steps(tree, store, 30, start=6)  # five more passes, one step each
    assert consolidated(store) == 6
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    assert store.verify().ok
    store.config_set("maintenance.budget-ms", "3600000")
    ids += steps(tree, store, 6, start=36)
    assert loose(store) == 0  # a budget that is not spent: every small loose pack gathered
    for cid, spec in specs.items():
        assert tree_from_store(store, cid) == spec


def _payload(store: Store) -> int:
    from snapstore.storage.backend import TABLES

    with store.backend.read() as view:
        return sum(len(k) + len(v) for t in TABLES for k, v in view.items(t))


def _stored(store: Store) -> int:
    return sum(n for _, n, _ in store.backend.value_sizes("packs"))


def test_the_full_pass_gathers_a_small_store_as_gc_does_and_compacts_it(tree, store, tmp_path, monkeypatch):
    """Batches of checkpoints gathered on their own never share frames; the idle service's full
    pass rewrites every pack in gc's order and level, then compacts the file, as ``gc --compact``
    would, and is not due again until the packs grow by FULL_GROWTH."""
    import shutil

    monkeypatch.setattr(maintenance_due, "COMPACT_ABOVE", 0)  # (a test store is tiny)
    store.config_set("maintenance.checkpoints", "8")
    store.config_set("maintenance.loose-packs", "4")
    ids = steps(tree, store, 40)  # loose-pack passes every 8 checkpoints, at the store's level
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    assert consolidated(store) >= 2
    store.close()
    shutil.copytree(store.store_dir, tmp_path / "copy")
    store = Store.open(store=store.store_dir)
    with Store.open(store=tmp_path / "copy") as other:
        other.gc(compact=True)
        by_gc, gc_file = _stored(other), other.backend.disk_size()
    before = _stored(store)
    report = store.maintain()
    assert report is not None and report.full and not report.stopped and report.compacted
    assert loose(store) == 0 and _stored(store) < before
    assert _stored(store) <= by_gc * 1.05
    assert store.backend.disk_size() <= gc_file + 8 * 4096  # compacted as gc --compact does
    assert store.verify().ok
    for cid, spec in specs.items():
        assert tree_from_store(store, cid) == spec
    store.config_set("maintenance.auto", "false")  # (no loose-pack pass in between)
    grown = steps(tree, store, 1, start=40)
    with store.backend.read() as view:
        base = int(view.get("meta", maintenance.FULL_KEY) or b"0")
    assert len(list(store.backend.value_sizes("packs"))) >= 2
    assert base > 0 and _stored(store) < maintenance.FULL_GROWTH * base
    assert store.maintain(min_packs=100) is None  # not grown enough since (nor 100 loose packs)
    grown += steps(tree, store, 12, start=41)
    assert _stored(store) >= maintenance.FULL_GROWTH * base
    again = store.maintain()
    assert again is not None and again.full
    for cid in grown:
        specs[cid] = tree_from_store(store, cid)
    for cid, spec in specs.items():
        assert tree_from_store(store, cid) == spec
    store.close()


def test_a_stopped_full_pass_loses_nothing_and_the_next_one_finishes(tree, store, monkeypatch):
    monkeypatch.setattr(maintenance, "FULL_STEP", 8_000)
    ids = steps(tree, store, 10)
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    asked = []
    report = store.maintain(stop=lambda: bool(asked.append(1)) or len(asked) > 1)
    assert report is not None and report.full and report.stopped and report.steps == 1
    assert not report.compacted
    with store.backend.read() as view:
        assert view.get("meta", maintenance.FULL_KEY) is None  # not done: still due
    assert store.verify().ok
    for cid, spec in specs.items():
        assert tree_from_store(store, cid) == spec
    done = store.maintain()
    assert done is not None and done.full and not done.stopped and loose(store) == 0
    assert store.verify().ok
    for cid, spec in specs.items():
        assert tree_from_store(store, cid) == spec


def test_no_full_pass_on_a_store_past_full_max_or_when_asked_not_to(tree, store, monkeypatch):
    steps(tree, store, 6)
    monkeypatch.setattr(maintenance, "FULL_MAX", 1_000)
    report = store.maintain()
    assert report is not None and not report.full  # the loose-pack pass instead
    monkeypatch.setattr(maintenance, "FULL_MAX", 1 << 30)
    steps(tree, store, 6, start=6)
    report = store.maintain(full=False)
    assert report is not None and not report.full


def test_a_pass_that_leaves_the_file_mostly_free_compacts_it(tree, store, monkeypatch):
    """LMDB never shrinks its file: the gathered packs' pages stay free in it until compacted."""
    from snapstore.storage.backend import TABLES

    monkeypatch.setattr(maintenance_due, "COMPACT_ABOVE", 0)
    ids = steps(tree, store, 12)
    specs = {cid: tree_from_store(store, cid) for cid in ids}
    monkeypatch.setattr(maintenance_due, "FREE_COMPACT", 0.999)  # nothing is that free
    report = store.maintain(full=False)
    assert report is not None and report.packs_gathered and not report.compacted
    used = sum(store.backend.table_pages(t) for t in TABLES)
    assert store.backend.disk_size() > 1.2 * used  # the moved packs' pages, free
    steps(tree, store, 12, start=12)
    monkeypatch.setattr(maintenance_due, "FREE_COMPACT", 0.2)
    report = store.maintain(full=False)
    assert report is not None and report.compacted
    used = sum(store.backend.table_pages(t) for t in TABLES)
    assert store.backend.disk_size() <= used + 16 * 4096
    assert store.verify().ok
    for cid, spec in specs.items():
        assert tree_from_store(store, cid) == spec


def test_the_idle_pass_is_told_a_request_waits_as_soon_as_one_connects(tree, store, monkeypatch):
    """The service's loop hands its idle pass a ``waiting`` test that looks at its own socket:
    false while nobody connects, true once a client does (so the pass stops after the step it is
    in).  The review's mutation M8a (``waiting`` always false) survived every test."""
    import os
    import socket
    import threading

    from snapstore.service import protocol, server

    monkeypatch.setattr(server, "MAINTAIN_AFTER", 0.0)
    svc, close = _service(store)
    answers: list[bool] = []
    asked = threading.Event()

    def maintain(waiting) -> None:
        try:
            answers.append(waiting())
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.connect(os.path.join(svc.store_dir, protocol.SOCKET_NAME))
            try:
                answers.append(waiting())
            finally:
                client.close()
        finally:
            svc._stop = True
            asked.set()

    monkeypatch.setattr(svc, "_maintain", maintain)
    svc.requests = 1  # (a pass is due only after a request)
    thread = threading.Thread(target=svc.serve, daemon=True)
    thread.start()
    try:
        assert asked.wait(30), "the idle pass never ran"
        thread.join(30)
    finally:
        if thread.is_alive():
            close()  # (a service that returned from serve closed its store and fd itself)
    assert answers == [False, True]
