"""The watcher's periodic consistency check runs while the service is idle, not on a checkpoint
(issue 40: no silent slow path; at a million files that walk is ~20 s). A change no event named is
still found, counted, and recorded by the next checkpoint; a path an event named while the check
walked is not called a divergence; a checkpoint walks for the check only when no idle check has
passed for several intervals."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import subprocess_env
from platform_marks import needs_inotify

from snapstore.ops.snapshot.idle_check import IdleCheck, excused, gone
from snapstore.service import daemon
from snapstore.store import Store
from snapstore.testing import build_tree
from snapstore.tree import ignore, scan
from snapstore.tree.watcher import IDLE_CHECK_GRACE, Changes

pytest.importorskip("inotify_simple")


def _until_checked(check: IdleCheck, passed: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while check.passed < passed:
        assert time.monotonic() < deadline, check.passed
        check.step()
        time.sleep(0.01)


@pytest.fixture
def watched(tmp_path: Path):
    root = tmp_path / "t"
    build_tree(root, {f"d{i}/f{i}.txt": b"%d\n" % i for i in range(20)})
    Store.init(root).close()
    store = Store.open(root, watch=True)
    store.snapshot("start")
    yield root, store, IdleCheck(store.context)
    store.close()


@needs_inotify
def test_a_change_no_event_named_is_found_when_idle_and_recorded_by_the_next_checkpoint(watched):
    root, store, check = watched
    watcher = store.context.watcher
    (root / "d3" / "f3.txt").write_bytes(b"changed, its event lost\n")
    watcher.take()  # (the event is dropped, as a lost one would be)
    watcher.consistency_interval = 0
    walks = watcher.walks
    _until_checked(check, 1)
    status = store.watch_status()
    assert status["divergences"] == 1 and "d3/f3.txt" in status["last_divergence"], status
    watcher.consistency_interval = 300
    cp = store.snapshot("after the check")
    assert store.read_bytes(cp.id, "d3/f3.txt") == b"changed, its event lost\n"
    assert watcher.walks == walks  # patched from the check's paths: no walk of the whole tree


@needs_inotify
def test_a_path_an_event_named_during_the_walk_is_no_divergence(watched):
    root, store, check = watched
    watcher = store.context.watcher
    watcher.consistency_interval = 0
    check.step()  # the walk starts (in a thread)
    assert check.walking
    (root / "d5" / "f5.txt").write_bytes(b"edited while the check walked\n")
    (root / "new.txt").write_bytes(b"made meanwhile\n")
    store.snapshot("meanwhile")  # takes those events
    (root / "d6" / "f6.txt").write_bytes(b"pending at the compare\n")
    _until_checked(check, 1)
    assert store.watch_status()["divergences"] == 0, store.watch_status()


@needs_inotify
def test_after_an_idle_check_a_checkpoint_does_not_walk_for_it(watched):
    root, store, check = watched
    watcher = store.context.watcher
    watcher.consistency_interval = 0.2
    _until_checked(check, 1)
    walks = watcher.walks
    time.sleep(0.3)  # due again, but idle checks run: a checkpoint waits GRACE intervals
    (root / "d1" / "f1.txt").write_bytes(b"one edit\n")
    store.snapshot("edit")
    assert watcher.walks == walks
    time.sleep(0.2 * IDLE_CHECK_GRACE + 0.1)  # none passed for GRACE intervals: the checkpoint walks
    (root / "d1" / "f1.txt").write_bytes(b"two edits\n")
    store.snapshot("edit again")
    assert watcher.walks == walks + 1


def test_the_idle_walk_waits_while_a_request_is_served(watched):
    """The walk thread holds the interpreter most of its time: while the service serves a
    request (IdleCheck.held) it stops at its next file, and goes on once the request is done."""
    root, store, check = watched
    watcher = store.context.watcher
    watcher.consistency_interval = 0
    with check.held():
        check.step()  # (the walk starts, and stops at its first file)
        assert check.walking
        time.sleep(0.3)
        store.snapshot("served beside the held walk")  # (a request: nothing waits on the walk)
        assert check._thread is not None and check._thread.is_alive()
        assert check._walked is None  # (not one file walked: the walk has not finished)
    _until_checked(check, 1)  # then it goes on, and the check passes
    assert store.watch_status()["divergences"] == 0


@needs_inotify
def test_the_kept_listings_are_compared_in_the_walks_thread(watched, monkeypatch):
    """What the walk did not find is computed beside the walk (a pass over every name: ~0.2 s
    at a million files), not by the step that runs between requests; a path deleted with its
    event lost is still found."""
    import threading

    from snapstore.ops.snapshot import idle_check

    root, store, check = watched
    watcher = store.context.watcher
    threads: list[threading.Thread] = []
    real = idle_check.gone

    def recording(*args, **kwargs):
        threads.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(idle_check, "gone", recording)
    (root / "d5" / "f5.txt").unlink()
    watcher.take()  # (the event is dropped, as a lost one would be)
    watcher.consistency_interval = 0
    _until_checked(check, 1)
    assert threads and all(t is not threading.main_thread() for t in threads), threads
    status = store.watch_status()  # (the file, and its directory now empty: a new DIR entry)
    assert status["divergences"] == 2 and "d5/f5.txt" in status["last_divergence"], status


def test_which_paths_are_excused_and_which_are_gone():
    since = Changes(full=False, dirs={b"d"}, subtrees={b"e"}, paths={b"h"})
    candidates = [b"a", b"d/b", b"e/f/g", b"h", b"link", b"x/new"]
    assert [p for p in candidates if not excused(p, since, {b"link"})] == [b"a", b"x/new"]
    assert not any(excused(p, Changes(full=False), set()) for p in candidates)
    assert all(excused(p, Changes(full=False, blind={b""}), set()) for p in candidates)  # all of it blind

    def listing(*names: bytes) -> scan.Listing:
        return scan.Listing(ignore.NO_RULES, names, ())

    kept = {b"": listing(b"a", b"b"), b"d": listing(b"d/x"), b"gone": listing(b"gone/y")}
    walked = {b"": listing(b"a"), b"d": listing(b"d/x", b"d/new")}
    assert gone(walked, kept) == {b"b", b"gone/y"}


@needs_inotify
def test_a_service_checks_when_idle(tmp_path: Path):
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n"})
    env = subprocess_env()

    def cli(*args: str, client: bool = False) -> subprocess.CompletedProcess[str]:
        # (python -m snapstore runs in-process; the client's path goes to the service)
        head = ["-c", "from snapstore.service.client import run; run()"] if client else ["-m", "snapstore"]
        return subprocess.run([sys.executable, *head, *args], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)

    assert cli("init", "-q").returncode == 0
    assert cli("config", "watch.check-interval", "1").returncode == 0
    daemon.start_detached(str(root / ".snapstore"), 60)
    try:
        assert cli("snapshot", "-q", "-m", "one", client=True).returncode == 0
        deadline = time.monotonic() + 30
        while True:
            status = json.loads(cli("serve", "--status").stdout)["watcher"]
            if status.get("idle_checks", 0) >= 2:
                break
            assert time.monotonic() < deadline, json.dumps(status)
            time.sleep(2.5)  # (idle: a second with no request, a status request included)
        assert status["full_rescans"] == 1, status  # the first walk only: no checkpoint walked for a check
    finally:
        daemon.stop(str(root / ".snapstore"))


@needs_inotify
def test_the_idle_walk_holds_no_record_a_file(tmp_path: Path):
    """On a big tree the check must not raise the service's memory by a walk's records (~250
    bytes a file): it holds the paths and listings only."""
    import tracemalloc

    n = 20_000
    root = tmp_path / "t"
    build_tree(root, {f"d{i % 100}/f{i}.txt": b"x" for i in range(n)})
    Store.init(root).close()
    with Store.open(root, watch=True) as store:
        store.snapshot("start")
        check = IdleCheck(store.context)
        store.context.watcher.consistency_interval = 0
        tracemalloc.start()
        try:
            check.step()
            while check.walking:
                time.sleep(0.01)
                check.step()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert check.passed == 1
    assert peak / n < 160, peak / n


@pytest.mark.parametrize("bad", ["0", "0.5", "abc", "1e99", "\x01", "9" * 40])
def test_a_bad_check_interval_is_one_line_and_exit_2(tmp_path: Path, bad: str):
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n"})
    env = subprocess_env()
    assert subprocess.run([sys.executable, "-m", "snapstore", "init", "-q"], cwd=root, env=env).returncode == 0
    done = subprocess.run([sys.executable, "-m", "snapstore", "config", "watch.check-interval", bad],
                          cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "watch.check-interval" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@needs_inotify
def test_a_damaged_check_interval_falls_back_and_the_store_still_watches(tmp_path: Path):
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n"})
    Store.init(root).close()
    with Store.open(root) as store, store.backend.write() as batch:
        batch.put("meta", b"config:watch.check-interval", b"\xff not a number")
    with Store.open(root, watch=True) as store:
        assert store.context.watcher is not None
        assert store.context.watcher.consistency_interval == 300.0
        store.snapshot("still works")
