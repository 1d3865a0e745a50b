"""A remote's published history, on the in-memory store and SeaweedFS: every checkpoint a plain
``push`` published stays reachable (list/cat/log --remote, fetch, clone --at), a push of a long
task uploads O(new) bytes, and ``remote log`` says who pushed what and when.
"""

from __future__ import annotations

import getpass
import json
import socket

import pytest
from remote_helpers import make_store

from snapstore.errors import RefError
from snapstore.remote import layout
from snapstore.remote import transport as tr
from snapstore.store import Store


def _three_plain_pushes(remote, tmp_path) -> list[str]:
    ids = []
    with make_store(tmp_path / "a", {"f.txt": b"v0\n"}) as a:
        remote.add_to(a)
        for i in (1, 2, 3):
            (tmp_path / "a" / "f.txt").write_bytes(f"v{i}\n".encode() * 20)
            ids.append(a.snapshot(f"s{i}").id)
            assert a.push().ref_outcome == "moved"
    return ids


def test_plain_pushes_leave_every_checkpoint_reachable(remote, tmp_path, run_cli):
    ids = _three_plain_pushes(remote, tmp_path)
    with make_store(tmp_path / "b", {"mine.txt": b"mine\n"}) as b:
        remote.add_to(b)
        with b.remote_view("origin") as view:
            assert [c.id for c in view.checkpoints()] == ids[::-1]
            assert view.read_bytes(ids[0], "f.txt") == b"v1\n" * 20
            assert [c.id for c in view.checkpoints()[1:]] == ids[1::-1]
        report = b.fetch()
        assert sorted(report.refs[0].new_checkpoints) == sorted(ids)
        assert {c.id for c in b.checkpoints()} >= set(ids) and b.verify().ok
        # A second fetch lists the history from where it stopped and reads no bundle again.
        again = b.fetch()
        assert again.refs[0].new_checkpoints == [] and again.refs[0].objects_read == 0
    r = run_cli("list", "--remote", "origin", "--ref", "default", "--json", cwd=tmp_path / "b")
    assert r.code == 0, r.err
    assert [c["id"] for c in json.loads(r.text)["checkpoints"]] == ids[::-1]
    r = run_cli("cat", ids[1], "f.txt", "--remote", "origin", cwd=tmp_path / "b")
    assert r.code == 0 and r.out == b"v2\n" * 20, r.err
    r = run_cli("log", "f.txt", "--remote", "origin", "--json", cwd=tmp_path / "b")
    assert r.code == 0 and len(json.loads(r.text)["versions"]) == 3, r.text
    # clone --at an older checkpoint of the ref's history, by a prefix of its id.
    report = Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint, at=ids[0][:10])
    assert report.refs[0].checkpoint == ids[0]
    assert (tmp_path / "c" / "f.txt").read_bytes() == b"v1\n" * 20
    with pytest.raises(RefError):
        Store.clone(remote.url, tmp_path / "d", endpoint=remote.endpoint, at="0123456789")
    assert not (tmp_path / "d").exists()


def test_a_diverged_push_stays_in_the_history_of_its_ref(remote, tmp_path):
    """Two stores push to the same ref; the loser's checkpoint (exit 9) is browsable all the same."""
    with make_store(tmp_path / "a", {"f.txt": b"a\n"}) as a, make_store(tmp_path / "b", {"f.txt": b"b\n"}) as b:
        for s in (a, b):
            remote.add_to(s)
        won, lost = a.snapshot("a").id, b.snapshot("b").id
        assert a.push().ref_outcome == "moved"
        assert b.push().ref_outcome == "diverged"
    with make_store(tmp_path / "c", {"x": b"x"}) as c:
        remote.add_to(c)
        with c.remote_view("origin") as view:
            assert {cp.id for cp in view.checkpoints()} == {won, lost}
            assert view.read_bytes(lost, "f.txt") == b"b\n"


class Sent(tr.Transport):
    """Counts the bytes and requests sent through it (the remote's own view of a push)."""

    def __init__(self, inner: tr.Transport) -> None:
        self.inner = inner
        self.bytes = 0
        self.requests = 0

    def _n(self, data: bytes = b"") -> None:
        self.requests += 1
        self.bytes += len(data)

    def get(self, key, limit=tr.MAX_GET):
        self._n()
        return self.inner.get(key, limit)

    def head(self, key):
        self._n()
        return self.inner.head(key)

    def get_range(self, key, start, end):
        self._n()
        return self.inner.get_range(key, start, end)

    def get_suffix(self, key, n):
        self._n()
        return self.inner.get_suffix(key, n)

    def put_create(self, key, data):
        self._n(data)
        return self.inner.put_create(key, data)

    def put_update(self, key, data, etag):
        self._n(data)
        return self.inner.put_update(key, data, etag)

    def list(self, prefix, start_after=None):
        self._n()
        return self.inner.list(prefix, start_after)

    def delete(self, key):
        self._n()
        self.inner.delete(key)


STEPS = 40


def test_push_task_uploads_o_new_bytes_per_step(remote, tmp_path, monkeypatch):
    """Each step changes one file the same way: what a step sends must not grow with the
    number of earlier steps (it grew by a checkpoint record, ~343 B, per earlier step)."""
    made: list[Sent] = []
    real = tr.connect
    monkeypatch.setattr(tr, "connect", lambda *a, **k: made.append(Sent(real(*a, **k))) or made[-1])
    per_step: list[tuple[int, int]] = []
    published: list[int] = []
    with make_store(tmp_path / "a", {"base.txt": b"base\n" * 1000, "step.txt": b"0" * 600}) as a:
        remote.add_to(a)
        for i in range(STEPS):
            (tmp_path / "a" / "step.txt").write_bytes(f"{i:06d}".encode() * 100)
            a.snapshot(f"step {i}", task="long")
            report = a.push(task="long")
            per_step.append((made[-1].bytes, made[-1].requests))
            published.append(report.checkpoints_published)
    sent = [b for b, _ in per_step[2:]]
    # The same change each step: the same bytes within a few dozen (times, ids), never growing.
    assert max(sent) - min(sent) < 200, sent
    assert sent[-1] < sent[0] + 200, sent
    assert all(n == 2 for _, n in per_step[2:]), per_step  # bundle + ref
    assert published == list(range(STEPS))  # every earlier record is known published
    ref = layout.parse_ref("refs/long", remote.read("refs/long"))
    assert len(layout.parse_bundle(ref.bundle, remote.read(ref.bundle)).checkpoints) == 1


def test_remote_log_says_who_pushed_what_and_when(remote, tmp_path, run_cli):
    ids = _three_plain_pushes(remote, tmp_path)
    with make_store(tmp_path / "b", {"mine.txt": b"mine\n"}):
        pass
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), cwd=tmp_path / "b").code == 0
    r = run_cli("remote", "log", "--json", cwd=tmp_path / "b")
    assert r.code == 0, r.err
    rows = json.loads(r.text)
    assert [row["checkpoints"] for row in rows] == [[i] for i in ids]
    assert {(row["user"], row["host"], row["ns"]) for row in rows} == {(getpass.getuser(), socket.gethostname(), "default")}
    assert all(a["time_ns"] < b["time_ns"] for a, b in zip(rows, rows[1:]))
    r = run_cli("remote", "log", "--ref", "nope", cwd=tmp_path / "b")
    assert r.code == 0 and r.text == ""
    r = run_cli("remote", "log", cwd=tmp_path / "b")
    assert r.code == 0 and len(r.text.splitlines()) == 3 and getpass.getuser() in r.text


def test_list_ref_without_remote_is_a_usage_error(tmp_path, run_cli):
    make_store(tmp_path / "a", {"f": b"f"}).close()
    r = run_cli("list", "--ref", "default", cwd=tmp_path / "a")
    assert r.code == 2 and "--remote" in r.err


@pytest.mark.parametrize(("identity", "expected"), [("anonymous", ("", "")), ("ci-bot@build-7", ("ci-bot", "build-7")), ("alice", ("alice", ""))])
def test_remote_identity_says_who_a_push_and_a_forget_record(remote, tmp_path, run_cli, identity, expected):
    """A public bucket need not learn the pusher's login and machine name (config remote.identity)."""
    with make_store(tmp_path / "a", {"f.txt": b"v0\n"}) as a:
        remote.add_to(a)
        a.config_set("remote.identity", identity)
        for n in (1, 2):
            (tmp_path / "a" / "f.txt").write_bytes(b"v%d\n" % n)
            a.snapshot(f"s{n}")
            a.push()
        a.remote_forget(keep_last=1, dry_run=False)  # the first push, forgotten
    r = run_cli("remote", "log", "--json", cwd=tmp_path / "a")
    assert r.code == 0, r.err
    rows = json.loads(r.text)
    assert rows and {(row["user"], row["host"]) for row in rows} == {expected}
    from snapstore.remote import history

    forgets = [k for k in remote.keys() if history.is_forget_key(k)]
    assert forgets, remote.keys()
    assert {(f.user, f.host) for f in (history.parse_forget(k, remote.read(k)) for k in forgets)} == {expected}


@pytest.mark.parametrize("bad", ["", "@host", "a\x1bb", "x" * 300, "a@" + "h" * 300])
def test_a_bad_remote_identity_is_a_usage_error(tmp_path, run_cli, bad):
    with make_store(tmp_path / "a", {"f.txt": b"v0\n"}):
        pass
    r = run_cli("config", "remote.identity", bad, cwd=tmp_path / "a")
    assert r.code == 2 and "remote.identity" in r.err and "Traceback" not in r.err
