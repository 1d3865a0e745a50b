"""Remote push/gc torture: pushers and gc at once on one remote (~5 s per engine in
``make test``, 60 s in ``make torture``).

4 threads each own a store: each loops edit, snapshot, push (some pushes killed at a random
request, standing for SIGKILL, whose own test is tests/test_remote_failures.py).  One thread
loops ``remote gc``.  Grace, gc window and push window are shrunk to 1 s, 2 s and 0.5 s
(defaults 24 h, 1 h, 6 h; the gc window stays longer than the push window plus the engine's
1 s timestamp resolution, so a pack condemned mid-push is rescued): a push slower than its
window refuses to commit (an allowed outcome, counted).  Afterwards: ``remote verify`` finds nothing wrong, and every
ref clones byte-exact to the tree its pusher checkpointed last.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from remote_helpers import Counting, make_store  # noqa: E402
from torture_tally import record, scaled  # noqa: E402

from snapstore.errors import RemoteError  # noqa: E402
from snapstore.remote import layout, push  # noqa: E402
from snapstore.store import Store  # noqa: E402
from snapstore.testing import assert_trees_equal, random_bytes, read_tree  # noqa: E402

SECONDS = scaled(5, 60)
PUSHERS = 4


class Killed(BaseException):
    pass


def test_pushers_and_gc_at_once_leave_every_ref_whole(remote, tmp_path, monkeypatch):
    monkeypatch.setattr(layout, "INLINE_MAX", 0)  # every push makes packs for gc to look at
    monkeypatch.setattr(push, "PUSH_WINDOW", 0.5)
    kill_at: dict[int, int] = {}  # thread id -> requests left before it is "killed"

    def maybe_kill(kind: str, key: str) -> None:
        left = kill_at.get(threading.get_ident())
        if left is not None:
            if left <= 0:
                del kill_at[threading.get_ident()]
                raise Killed
            kill_at[threading.get_ident()] = left - 1

    Counting(monkeypatch, maybe_kill)
    stores = []
    for i in range(PUSHERS):
        s = make_store(tmp_path / f"p{i}", {"shared.txt": b"common\n" * 500, f"own{i}.bin": random_bytes(50_000, i)})
        remote.add_to(s)
        assert s.remote_doctor().ok
        stores.append(s)
    with make_store(tmp_path / "gc", {"x": b"x"}) as g:
        remote.add_to(g)
        stop = time.monotonic() + SECONDS
        tally = {"pushes": 0, "killed": 0, "too slow": 0, "gc runs": 0, "deleted": 0, "rescued": 0}
        last: dict[int, dict[bytes, object]] = {}
        errors: list[BaseException] = []
        lock = threading.Lock()

        def pusher(i: int) -> None:
            rng = random.Random(i)
            s = stores[i]
            try:
                n = 0
                while time.monotonic() < stop:
                    n += 1
                    (tmp_path / f"p{i}" / f"step{n % 5}.txt").write_bytes(random_bytes(rng.randrange(100, 80_000), f"{i}-{n}"))
                    s.snapshot(f"step {n}", task=f"agent-{i}")
                    if rng.random() < 0.25:
                        kill_at[threading.get_ident()] = rng.randrange(0, 4)
                    try:
                        report = s.push()
                        outcome = "pushes"
                        if report.ref_outcome == "moved":
                            last[i] = read_tree(tmp_path / f"p{i}")
                    except Killed:
                        outcome = "killed"
                    except RemoteError as exc:
                        assert "took more than" in str(exc), exc
                        outcome = "too slow"
                    kill_at.pop(threading.get_ident(), None)
                    with lock:
                        tally[outcome] += 1
            except BaseException as exc:  # reported below: a thread's failure must fail the test
                errors.append(exc)

        def collector() -> None:
            try:
                while time.monotonic() < stop:
                    r = g.remote_gc(grace_s=1, window_s=2)
                    with lock:
                        tally["gc runs"] += 1
                        tally["deleted"] += len(r.deleted)
                        tally["rescued"] += len(r.rescued)
                    time.sleep(0.2)
            except RemoteError as exc:
                if "another remote gc" not in str(exc):
                    errors.append(exc)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=pusher, args=(i,)) for i in range(PUSHERS)]
        threads.append(threading.Thread(target=collector))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = len(errors)
        verify = g.remote_verify()
        failed += len(verify.problems)
        for i in range(PUSHERS):
            if i not in last:
                continue
            target = tmp_path / f"clone{i}"
            try:
                Store.clone(remote.url, target, ref=f"agent-{i}", endpoint=remote.endpoint)
                assert_trees_equal(last[i], read_tree(target))
            except Exception as exc:
                errors.append(exc)
                failed += 1
    for s in stores:
        s.close()
    record("remote push/gc", tally["pushes"] + tally["killed"] + tally["too slow"], failed, engine=remote.kind, **tally)
    assert not errors, errors
    assert verify.ok, verify.problems
    assert tally["pushes"] >= PUSHERS and tally["gc runs"] >= 1, tally
