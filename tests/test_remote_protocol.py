"""The remote protocol, run against obstore's in-memory store and a real SeaweedFS.

Round trip byte-exact, the request budget of an incremental push, what a push uploads, what a
clone reads, concurrent pushers, ref races, and the engine's own compare-and-swap.
"""

from __future__ import annotations

import threading

import pytest
from remote_helpers import Counting, make_store, sample_tree

from snapstore.remote import layout
from snapstore.store import Store
from snapstore.testing import assert_trees_equal, read_tree, tree_from_store


def _chunks_on(rem) -> set[bytes]:
    """Every chunk id held by any object on the remote (read behind the client's back)."""
    ids: set[bytes] = set()
    for key in rem.keys():
        body = rem.read(key)
        if key.startswith("packs/"):
            pack = layout.parse_pack(key, body, layout.pack_name_of(key))
        elif key.startswith("log/"):
            pack = layout.parse_bundle(key, body).inline
        else:
            continue
        for frame in pack.frames if pack else []:
            ids.update(c for c, _, _ in frame.members)
    return ids


def test_round_trip_clone_restores_byte_exact(remote, tmp_path):
    conv = [{"role": "user", "content": "make it fast"}, {"role": "assistant", "content": "done"}]
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        cp = a.snapshot("first", task="t1", conversation=conv)
        remote.add_to(a)
        pushed = a.push()
        assert pushed.ref_outcome == "moved" and pushed.ref == "t1"
    report = Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    assert report.refs[0].checkpoint == cp.id
    assert_trees_equal(read_tree(tmp_path / "a"), read_tree(tmp_path / "b"))
    with Store.open(tmp_path / "b") as b:
        assert b.resolve(cp.id).id == cp.id
        assert b.conversation(cp.id) == conv
        assert b.verify().ok
        assert_trees_equal(tree_from_store(b, cp.id), read_tree(tmp_path / "a"))


def test_incremental_push_of_one_checkpoint_costs_at_most_4_requests(remote, tmp_path, monkeypatch):
    counting = Counting(monkeypatch)
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        a.snapshot("first")
        a.push()
        (tmp_path / "a" / "src" / "app.py").write_bytes(b"changed\n")
        a.snapshot("second")
        report = a.push()
    calls = counting.last.calls
    assert report.requests == len(calls) <= 4, calls
    assert report.ref_outcome == "moved"
    assert report.chunks_new <= 3  # the file, the manifest chunk (and an index node at most)


def test_push_uploads_only_what_the_pushed_checkpoints_reach(remote, tmp_path):
    secret = b"AWS_SECRET=do-not-leave-this-machine\n" * 10
    with make_store(tmp_path / "a", {**sample_tree("a"), "secret.env": secret}) as a:
        a.snapshot("with the secret")
        (tmp_path / "a" / "secret.env").unlink()
        a.snapshot("without it")
        remote.add_to(a)
        a.push()  # the latest checkpoint only
    from snapstore.storage.objects import chunk_id

    on_remote = _chunks_on(remote)
    assert chunk_id(secret) not in on_remote
    assert chunk_id(b"def main():\n    return 42\n" * 200) in on_remote


def test_clone_reads_only_what_the_cloned_checkpoint_needs(remote, tmp_path, monkeypatch):
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        a.snapshot("agent a", task="a")
        a.push()
    with make_store(tmp_path / "other", sample_tree("other")) as o:
        remote.add_to(o)
        o.snapshot("agent other", task="other")
        other = o.push()
    counting = Counting(monkeypatch)
    Store.clone(remote.url, tmp_path / "b", ref="a", endpoint=remote.endpoint)
    calls = counting.last.calls
    read = {key for kind, key in calls if kind == "get"}
    assert other.bundle not in read
    assert not any(k.startswith("refs/other") for k in read)
    # No listing of packs or bundles: a clone never loads a remote-wide index.
    assert [key for kind, key in calls if kind == "list"] == []
    assert_trees_equal(read_tree(tmp_path / "a"), read_tree(tmp_path / "b"))


@pytest.mark.parametrize("pushers", [2, 16])
def test_concurrent_pushers_with_overlapping_content(remote, tmp_path, pushers):
    shared = sample_tree("shared")  # every agent has these files: their chunks dedup per push
    stores = []
    for i in range(pushers):
        s = make_store(tmp_path / f"agent{i}", {**shared, f"own/{i}.txt": f"agent {i}\n".encode() * 100})
        remote.add_to(s)
        s.snapshot(f"agent {i}", task=f"agent-{i}")
        stores.append(s)
    start = threading.Barrier(pushers)
    reports: list[object] = [None] * pushers

    def push(i: int) -> None:
        start.wait()
        reports[i] = stores[i].push()

    threads = [threading.Thread(target=push, args=(i,)) for i in range(pushers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert all(r is not None and r.ref_outcome == "moved" for r in reports), reports
    (tmp_path / "reader").mkdir()
    with Store.init(tmp_path / "reader") as reader:
        remote.add_to(reader)
        assert not reader.remote_verify().problems
        fetched = reader.fetch()
        assert sorted(r.name for r in fetched.refs) == sorted(f"agent-{i}" for i in range(pushers))
    for i in range(pushers):
        Store.clone(remote.url, tmp_path / f"clone{i}", ref=f"agent-{i}", endpoint=remote.endpoint)
        assert_trees_equal(read_tree(tmp_path / f"agent{i}"), read_tree(tmp_path / f"clone{i}"))


def test_engine_compare_and_swap_has_exactly_one_winner(remote):
    t = remote.transport()
    etag = t.put_create("race/ref", b"0")
    assert etag is not None and t.put_create("race/ref", b"again") is None
    for rnd in range(5):
        barrier = threading.Barrier(8)
        won: list[int] = []

        def swap(i: int, etag: str = etag, barrier: threading.Barrier = barrier, rnd: int = rnd,
                 won: list[int] = won) -> None:
            barrier.wait()
            if t.put_update("race/ref", f"{rnd}-{i}".encode(), etag) is not None:
                won.append(i)

        threads = [threading.Thread(target=swap, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(won) == 1, (rnd, won)
        got = t.get("race/ref")
        assert got is not None and got.body == f"{rnd}-{won[0]}".encode()
        etag = got.etag


def test_ref_race_one_winner_losers_retry(remote, tmp_path):
    with make_store(tmp_path / "base", sample_tree("base")) as base:
        remote.add_to(base)
        base.snapshot("base", task="shared")
        base.push()
    stores = []
    for i in range(8):
        Store.clone(remote.url, tmp_path / f"w{i}", ref="shared", endpoint=remote.endpoint)
        (tmp_path / f"w{i}" / "mine.txt").write_bytes(f"writer {i}\n".encode())
        s = Store.open(tmp_path / f"w{i}")
        s.snapshot(f"writer {i}", task="shared")
        stores.append(s)

    def race(force: bool) -> list[object]:
        barrier = threading.Barrier(len(stores))
        out: list[object] = [None] * len(stores)

        def go(i: int) -> None:
            barrier.wait()
            out[i] = stores[i].push(force=force)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(len(stores))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return out

    first = race(force=False)
    outcomes = sorted(r.ref_outcome for r in first)
    assert outcomes == ["diverged"] * 7 + ["moved"]  # exactly one winner; nothing is lost:
    winner = next(r for r in first if r.ref_outcome == "moved")
    assert all(r.ref_checkpoint == winner.checkpoints[-1] for r in first)
    # ...every loser's bundle is published all the same, and a forced push retries until it wins.
    bundles = set(remote.keys("log/shared/"))
    assert all(r.bundle in bundles for r in first)
    second = race(force=True)
    assert all(r.ref_outcome in ("moved", "current") for r in second)
    assert sum(r.ref_rounds for r in second) >= len(stores)  # each swapped at least once
    (tmp_path / "reader").mkdir()
    with Store.init(tmp_path / "reader") as reader:
        remote.add_to(reader)
        final = reader.fetch(["shared"]).refs[0].checkpoint
    assert final in {r.checkpoints[-1] for r in second}
    for s in stores:
        s.close()


def test_a_long_history_of_small_pushes_stays_cheap_to_clone(remote, tmp_path, monkeypatch):
    from snapstore.remote import push

    monkeypatch.setattr(push, "MAX_SPREAD", 3)
    files = {f"f{i}.txt": f"file {i}\n".encode() * 300 for i in range(12)}
    gathered = 0
    with make_store(tmp_path / "a", files) as a:
        remote.add_to(a)
        assert a.remote_doctor().ok  # first contact, out of the per-push budget
        for i in range(12):  # each step changes another file: the latest needs every step
            (tmp_path / "a" / f"f{i}.txt").write_bytes(f"step {i}\n".encode() * 300)
            a.snapshot(f"step {i}")
            report = a.push()
            assert report.requests <= 4
            gathered += report.gathered
    assert gathered >= 2
    counting = Counting(monkeypatch)
    Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    reads = [key for kind, key in counting.last.calls if kind == "get" and not key.startswith(("refs/", "config"))]
    assert len(reads) <= 1 + 3 + 1  # the bundle, at most MAX_SPREAD bundles, one gathered pack
    assert_trees_equal(read_tree(tmp_path / "a"), read_tree(tmp_path / "b"))


def test_an_incremental_push_reads_only_the_manifest_chunks_that_changed(remote, tmp_path, monkeypatch):
    from snapstore.records import manifest

    decoded: list[int] = []
    real = manifest.iter_entries_of_chunks

    def counting(mid, chunks):
        decoded.append(1)
        return real(mid, chunks)

    monkeypatch.setattr(manifest, "iter_entries_of_chunks", counting)
    files = {f"dir{i // 100}/file{i}.txt": f"content {i}\n".encode() for i in range(1500)}
    with make_store(tmp_path / "a", files) as a:
        remote.add_to(a)
        a.snapshot("first")
        a.push()
        full = len(decoded)
        assert full >= 10  # the first push reads every manifest chunk
        (tmp_path / "a" / "dir7" / "file777.txt").write_bytes(b"changed\n")
        a.snapshot("second")
        decoded.clear()
        report = a.push()
        assert len(decoded) <= 2 and report.requests <= 4, (len(decoded), full)
    Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    assert_trees_equal(read_tree(tmp_path / "a"), read_tree(tmp_path / "b"))


def test_a_ref_moved_by_another_writer_is_never_reported_current(remote, tmp_path):
    with make_store(tmp_path / "a", sample_tree("a")) as a, make_store(tmp_path / "b", sample_tree("b")) as b:
        remote.add_to(a)
        remote.add_to(b)
        a.snapshot("a")
        b.snapshot("b")
        assert a.push().ref_outcome == "moved"
        assert b.push(force=True).ref_outcome == "moved"
        again = a.push()  # the same checkpoint as a last saw the ref at
        assert again.ref_outcome == "diverged"
        assert again.ref_checkpoint == b.resolve("latest").id
