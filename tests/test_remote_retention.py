"""Remote retention on the in-memory store and SeaweedFS: ``remote forget`` keep rules,
``remote ref delete``, ``remote gc`` reclaiming what they release, and pushes racing forget+gc.

"Nothing readable before is unreadable after": every checkpoint kept (and every one a racing
push published) clones byte-exact after gc, and ``remote verify`` is clean.
"""

from __future__ import annotations

import json

import pytest
from remote_helpers import Counting, make_store

from snapstore.errors import RefError
from snapstore.remote import gc, layout, push
from snapstore.store import Store
from snapstore.testing import random_bytes


def _steps(remote, tmp_path, n: int, *, gone_after: int | None = None) -> tuple[Store, list[str]]:
    """Store ``a`` pushing ``n`` plain steps, each adding a 300 KB file of its own (each push a
    pack); with ``gone_after`` the files of the steps before it are removed at that step."""
    a = make_store(tmp_path / "a", {"keep.txt": b"kept all along\n" * 100})
    remote.add_to(a)
    ids = []
    for i in range(n):
        if gone_after is not None and i == gone_after:
            for j in range(i):
                (tmp_path / "a" / f"s{j}.bin").unlink()
        (tmp_path / "a" / f"s{i}.bin").write_bytes(random_bytes(300_000, f"s{i}"))
        ids.append(a.snapshot(f"step {i}").id)
        a.push()
    return a, ids


def _gc_twice(remote) -> list[gc.RemoteGcReport]:
    t = remote.transport()
    return [gc.run(t, grace_s=0, window_s=0) for _ in range(2)]


@pytest.fixture
def packs(monkeypatch):
    monkeypatch.setattr(layout, "INLINE_MAX", 0)  # every push writes a pack


def test_forget_keep_last_then_gc_reclaims_what_only_the_forgotten_held(remote, tmp_path, packs, run_cli):
    a, ids = _steps(remote, tmp_path, 6, gone_after=4)  # the kept steps 4, 5 need s4, s5, keep.txt
    with a:
        before = remote.keys()
        dry = a.remote_forget(keep_last=2, dry_run=True)
        assert remote.keys() == before  # a dry run writes nothing
        r = dry.refs[0]
        assert r.kept == ids[-2:] and r.forgotten == ids[:4] and len(r.bundles) == 4 and not r.record
        report = a.remote_forget(keep_last=2)
        assert report.refs[0].record.endswith(".forget") and report.refs[0].forgotten == ids[:4]
    # The history hides them at once; their data is still there until gc.
    with make_store(tmp_path / "b", {"x": b"x"}) as b:
        remote.add_to(b)
        with b.remote_view("origin") as view:
            assert [c.id for c in view.checkpoints()] == ids[:-3:-1]
        assert b.fetch().refs[0].new_checkpoints == ids[-2:]
    packs_before = set(remote.keys("packs/"))
    first, second = _gc_twice(remote)
    # 4 bundles and the packs of s1-s3 (s0's pack holds keep.txt too: it stays).
    assert len(first.condemned) == 7 and first.forgotten == 4
    assert sorted(second.deleted) == sorted(first.condemned)
    assert len(packs_before - set(remote.keys("packs/"))) == 3
    # What is kept clones byte-exact; the remote is sound; a forgotten checkpoint is gone.
    Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint, at=ids[-2])
    assert (tmp_path / "c" / "s4.bin").read_bytes() == random_bytes(300_000, "s4")
    assert (tmp_path / "c" / "keep.txt").exists() and not (tmp_path / "c" / "s0.bin").exists()
    with pytest.raises(RefError):
        Store.clone(remote.url, tmp_path / "d", endpoint=remote.endpoint, at=ids[0])
    r = run_cli("remote", "verify", "--json", cwd=tmp_path / "c")
    assert r.code == 0 and json.loads(r.text)["ok"], r.text


def test_a_forgotten_push_a_kept_one_needs_stays_hidden_and_readable(remote, tmp_path):
    """Small pushes leave data inline in their bundles: the latest needs the first for a file it
    still has.  Forgetting the first hides it; gc keeps it for that data."""
    a, ids = _steps(remote, tmp_path, 3)  # inline (no packs fixture): 300 KB compresses to ~300 KB
    with a:
        a.remote_forget(keep_last=1)
    first, second = _gc_twice(remote)
    assert first.forgotten == 2
    ref = layout.parse_ref("refs/default", remote.read("refs/default"))
    needed = set(layout.parse_bundle(ref.bundle, remote.read(ref.bundle)).needs)
    assert needed and not needed & set(second.deleted)  # the bundles it needs stay
    report = Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint)
    assert report.refs[0].checkpoint == ids[-1]
    for i in range(3):
        assert (tmp_path / "c" / f"s{i}.bin").read_bytes() == random_bytes(300_000, f"s{i}")
    with Store.open(tmp_path / "c") as c:
        assert [cp.id for cp in c.checkpoints()] == [ids[-1]]


def test_keep_within_and_task(remote, tmp_path):
    with make_store(tmp_path / "a", {"f": b"0"}) as a:
        remote.add_to(a)
        ids = []
        for i, task in enumerate(["x", "y", "x", "y"]):
            (tmp_path / "a" / "f").write_bytes(str(i).encode())
            ids.append(a.snapshot(str(i), task=task).id)
            a.push(to="all")
        # Only task x's checkpoints are candidates; the newest x is kept by --keep-last 1.
        r = a.remote_forget(refs=["all"], keep_last=1, task="x", dry_run=True).refs[0]
        assert r.forgotten == [ids[0]] and sorted(r.kept) == sorted(ids[1:])
        # keep-within: every checkpoint here is seconds old (against the ref's newest).
        r = a.remote_forget(keep_within_s=3600, dry_run=True).refs[0]
        assert r.forgotten == [] and len(r.kept) == 4
        with pytest.raises(Exception, match="say what to keep"):
            a.remote_forget()


def test_ref_delete_forgets_its_history_and_gc_reclaims_it(remote, tmp_path, packs, run_cli):
    a, ids = _steps(remote, tmp_path, 2)
    with a:
        (tmp_path / "a" / "other.bin").write_bytes(random_bytes(200_000, "other"))
        other = a.snapshot("other").id
        a.push(to="review")
    b = make_store(tmp_path / "b", {"x": b"x"})
    remote.add_to(b)
    with b.remote_view("origin") as view:  # a browsing cache that took up both refs
        assert len(view.checkpoints()) == 3
    assert run_cli("remote", "ref", "delete", "default", cwd=tmp_path / "a").code == 0
    assert [row["ref"] for row in json.loads(run_cli("remote", "ls", "--json", cwd=tmp_path / "a").text)] == ["review"]
    r = run_cli("remote", "ref", "delete", "default", cwd=tmp_path / "a")
    assert r.code == RefError.exit_code and "no ref" in r.err
    with b, b.remote_view("origin") as view:
        assert [c.id for c in view.checkpoints()] == [other]
    _gc_twice(remote)
    # The review checkpoint needs the default ref's packs (its files): they stay.
    Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint, ref="review")
    assert (tmp_path / "c" / "s0.bin").read_bytes() == random_bytes(300_000, "s0")
    with Store.open(tmp_path / "c") as c:
        assert c.remote_verify().ok


def test_a_push_racing_forget_and_gc_never_loses_its_data(remote, tmp_path, packs, monkeypatch):
    """gc condemns a pack only forgotten pushes named; a push that planned to reuse it (its
    store knew the chunks were there) publishes after gc deleted it.  The push read gc's plan
    before its own plan, so it sent that data itself: its checkpoint clones byte-exact."""
    a, ids = _steps(remote, tmp_path, 3, gone_after=2)  # s0.bin, s1.bin gone at step 2
    with a:
        a.remote_forget(keep_last=1)
        gc.run(remote.transport(), grace_s=0, window_s=0)  # condemns s1's pack (s0's holds keep.txt)
        monkeypatch.setattr(push, "CONFIRM_AGE", 0)  # (its last read of the plan is an hour old)
        # s1.bin comes back: its chunks are in a condemned pack this store pushed.
        (tmp_path / "a" / "s1.bin").write_bytes(random_bytes(300_000, "s1"))
        back = a.snapshot("s1 again").id
        ran = []

        def before(kind: str, key: str) -> None:
            if kind == "create" and key.startswith("log/") and not ran:
                ran.append(gc.run(remote.transport(), grace_s=0, window_s=0))  # deletes them

        Counting(monkeypatch, before)
        report = a.push()
    assert ran and any(k.startswith("packs/") for k in ran[0].deleted), ran[0].deleted
    bundle = layout.parse_bundle(report.bundle, remote.read(report.bundle))
    assert not set(bundle.needs) & set(ran[0].deleted)  # s1's data was sent again
    Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint)
    assert (tmp_path / "c" / "s1.bin").read_bytes() == random_bytes(300_000, "s1")
    with Store.open(tmp_path / "c") as c:
        assert c.resolve("latest").id == back and c.remote_verify().ok


def test_a_push_planned_before_gc_condemns_rescues_what_it_names(remote, tmp_path, packs, monkeypatch):
    """The other order: the push plans, gc condemns a pack it is about to name, the push
    publishes, gc's second run finds the pack named again and keeps it."""
    a, ids = _steps(remote, tmp_path, 3, gone_after=2)
    with a:
        a.remote_forget(keep_last=1)
        (tmp_path / "a" / "s1.bin").write_bytes(random_bytes(300_000, "s1"))
        a.snapshot("s1 again")
        ran = []

        def before(kind: str, key: str) -> None:
            if kind == "create" and key.startswith("log/") and not ran:
                ran.append(gc.run(remote.transport(), grace_s=0, window_s=0))

        Counting(monkeypatch, before)
        report = a.push()
    condemned = {k for k in ran[0].condemned if k.startswith("packs/")}
    assert condemned and condemned <= set(layout.parse_bundle(report.bundle, remote.read(report.bundle)).needs)
    second = gc.run(remote.transport(), grace_s=0, window_s=0)
    assert set(second.rescued) == condemned and not condemned & set(second.deleted)
    Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint)
    assert (tmp_path / "c" / "s1.bin").read_bytes() == random_bytes(300_000, "s1")


def test_remote_forget_through_the_cli(remote, tmp_path, run_cli):
    a, ids = _steps(remote, tmp_path, 3)
    a.close()
    cwd = tmp_path / "a"
    r = run_cli("remote", "forget", cwd=cwd)
    assert r.code == 2 and "say what to keep" in r.err
    r = run_cli("remote", "forget", "--keep-within", "soon", cwd=cwd)
    assert r.code == 2 and "bad duration" in r.err
    r = run_cli("remote", "forget", "--ref", "nope", "--keep-last", "1", cwd=cwd)
    assert r.code == 4 and "no ref" in r.err
    before = remote.keys()
    r = run_cli("remote", "forget", "--keep-last", "1", "--dry-run", "--json", cwd=cwd)
    assert r.code == 0 and remote.keys() == before, r.err
    doc = json.loads(r.text)
    assert doc["dry_run"] and doc["refs"][0]["forgotten"] == ids[:2] and doc["refs"][0]["record"] == ""
    r = run_cli("remote", "forget", "--keep-last", "1", cwd=cwd)
    assert r.code == 0 and "default: forgot 2 checkpoint(s) in 2 push(es), kept 1" in r.text, r.text + r.err
    r = run_cli("list", "--remote", "origin", "--json", cwd=cwd)
    assert [c["id"] for c in json.loads(r.text)["checkpoints"]] == [ids[-1]]


def test_pushers_racing_forget_and_gc_loops_lose_nothing(remote, tmp_path, packs, monkeypatch):
    """Two pushers (own refs), and a loop of forget --keep-last 1 and gc, at once, with the
    protocol's clocks shrunk to seconds and kept in their order (a push reads gc's plan before
    each plan and gives up 1 s after it; gc condemns nothing younger than 1.5 s and deletes
    2.5 s on).  Contents come back every third step, so pushes reuse packs that forget released.
    Afterwards every head clones byte-exact and the remote verifies clean."""
    import threading
    import time

    from snapstore.errors import RemoteError

    monkeypatch.setattr(push, "CONFIRM_AGE", 0)
    monkeypatch.setattr(push, "PUSH_WINDOW", 1.0)
    grace, window = 1.5, 2.5
    heads: dict[str, tuple[str, bytes]] = {}
    errors: list[BaseException] = []

    def pusher(name: str) -> None:
        try:
            with make_store(tmp_path / name, {"data.bin": b"0"}) as s:
                remote.add_to(s)
                end, i = time.monotonic() + 7, 0
                while time.monotonic() < end:
                    content = random_bytes(200_000, f"{name}-{i % 3}")
                    (tmp_path / name / "data.bin").write_bytes(content)
                    cid = s.snapshot(f"{name} {i}").id
                    try:
                        if s.push(to=name).ref_outcome == "moved":
                            heads[name] = (cid, content)
                    except RemoteError:  # slower than PUSH_WINDOW: nothing published
                        pass
                    i += 1
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=pusher, args=(n,)) for n in ("p1", "p2")]
    for t in threads:
        t.start()
    reclaimed = 0
    with make_store(tmp_path / "keeper", {"k": b"k"}) as keeper:
        remote.add_to(keeper)
        while any(t.is_alive() for t in threads):
            try:
                keeper.remote_forget(keep_last=1)
            except RefError:  # no ref yet
                pass
            reclaimed += len(gc.run(remote.transport(), grace_s=grace, window_s=window).deleted)
            time.sleep(0.3)
    for t in threads:
        t.join()
    assert not errors, errors
    assert set(heads) == {"p1", "p2"} and reclaimed > 0, (heads.keys(), reclaimed)
    for name, (cid, content) in heads.items():
        r = Store.clone(remote.url, tmp_path / f"clone-{name}", endpoint=remote.endpoint, ref=name)
        assert r.refs[0].checkpoint == cid
        assert (tmp_path / f"clone-{name}" / "data.bin").read_bytes() == content
    with Store.open(tmp_path / "clone-p1") as c:
        v = c.remote_verify()
        assert v.ok, v.problems
