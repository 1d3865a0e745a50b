"""A writer of the bucket puts an old version of a ref back (docs/remote.md, "What a bucket
writer can still do"): a store that saw a later version refuses it, on both engines, plain and
encrypted; the writers' own clocks never make a legitimate version look old.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import assert_one_line_error
from remote_helpers import make_store, remote, sample_tree, seaweed  # noqa: F401

from snapstore.errors import CorruptError, RefError
from snapstore.remote import keys, layout, push, refs, state
from snapstore.store import Store

PASS = "a passphrase for the replay tests"


def _ids(store: Store) -> list[str]:
    return [c.id for c in store.checkpoints()]


def _clone(remote, where: Path) -> Store:  # noqa: F811
    Store.clone(remote.url, where, endpoint=remote.endpoint)
    return Store.open(where)


def _pushed(remote, tmp_path: Path) -> Store:  # noqa: F811
    a = make_store(tmp_path / "a", sample_tree("a"))
    remote.add_to(a)
    a.snapshot("first")
    a.push()
    return a


def _push_a_day_behind(store: Store, monkeypatch: pytest.MonkeyPatch, **kw: bool) -> None:
    real = push.time.time_ns
    monkeypatch.setattr(push.time, "time_ns", lambda: real() - 86_400 * 10**9)
    store.push(**kw)
    monkeypatch.setattr(push.time, "time_ns", real)


def _step(store: Store, root: Path, text: str) -> None:
    (root / "README.md").write_text(text)
    store.snapshot(text)


def test_an_old_version_put_back_is_refused_by_a_store_that_saw_a_later_one(remote, tmp_path):  # noqa: F811
    a = _pushed(remote, tmp_path)
    old_body = remote.read("refs/default")
    b = _clone(remote, tmp_path / "b")
    _step(a, tmp_path / "a", "second\n")
    a.push()
    b.fetch(["default"])
    known = _ids(b)
    remote.overwrite("refs/default", old_body)  # the bucket writer's replay
    with pytest.raises(CorruptError, match="ref default went back"):
        b.fetch(["default"])
    with pytest.raises(CorruptError, match="went back"):
        b.pull()
    assert _ids(b) == known  # nothing taken
    # Nor does it forget pushes counting from the replayed version's checkpoint.
    with pytest.raises(CorruptError, match="went back"):
        b.remote_forget(keep_last=1)
    # The pusher that saw the later version does not build on the replayed one either.
    _step(a, tmp_path / "a", "third\n")
    with pytest.raises(CorruptError, match="went back"):
        a.push()
    assert remote.read("refs/default") == old_body
    # A fresh clone has seen nothing: it takes what is there (trust on first use).
    _clone(remote, tmp_path / "c").close()
    for s in (a, b):
        s.close()


def test_each_version_is_later_than_the_one_it_replaces_whatever_the_clocks_say(remote, tmp_path, monkeypatch):  # noqa: F811
    a = _pushed(remote, tmp_path)
    first = layout.parse_ref("refs/default", remote.read("refs/default"))
    b = _clone(remote, tmp_path / "b")
    _step(b, tmp_path / "b", "from b, whose clock is a day behind\n")
    _push_a_day_behind(b, monkeypatch)
    second = layout.parse_ref("refs/default", remote.read("refs/default"))
    assert second.time_ns > first.time_ns
    report = a.fetch(["default"])  # a saw the first version: the second is later, taken
    assert report.refs[0].checkpoint == second.checkpoint.hex()
    for s in (a, b):
        s.close()


def test_a_ref_deleted_and_pushed_again_by_a_writer_with_a_slow_clock_is_taken(remote, tmp_path, monkeypatch):  # noqa: F811
    a = _pushed(remote, tmp_path)
    b = _clone(remote, tmp_path / "b")
    a.remote_ref_delete("default")
    with pytest.raises(RefError):
        b.fetch(["default"])  # b learns it is gone, and forgets the version it saw
    assert "default" not in b.remote_refs_seen("origin")
    c = make_store(tmp_path / "c", {"x.txt": b"c's own\n"})
    remote.add_to(c)
    c.snapshot("c")
    _push_a_day_behind(c, monkeypatch, force=True)
    assert b.fetch(["default"]).refs[0].checkpoint == _ids(c)[0]
    for s in (a, b, c):
        s.close()


def test_seen_rows_without_a_time_check_nothing():
    """Rows written before the time was kept parse, with nothing to compare."""
    import msgpack

    cp = bytes(32)
    raw = msgpack.packb({"checkpoint": cp, "etag": "e", "bundle": "log/x"}, use_bin_type=True)
    seen = state._parse_seen(raw)
    assert seen == state.SeenRef(cp, "e", "log/x", 0)
    refs.check_not_older(layout.Ref(bytes([1]) * 32, "log/y", 1, "w"), seen, "default", "origin")
    newer = seen._replace(time_ns=5)
    with pytest.raises(CorruptError):
        refs.check_not_older(layout.Ref(bytes([1]) * 32, "log/y", 5, "w"), newer, "default", "origin")
    refs.check_not_older(layout.Ref(cp, "log/x", 5, "w"), newer, "default", "origin")


def test_an_encrypted_ref_put_back_is_one_line_and_exit_6(remote, tmp_path, run_cli, monkeypatch):  # noqa: F811
    monkeypatch.setenv(keys.PASSPHRASE_ENV, PASS)
    cwd = tmp_path / "a"
    with make_store(cwd, sample_tree("a")) as s:
        s.snapshot("first")
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), "--encrypt", cwd=cwd).code == 0
    assert run_cli("push", cwd=cwd).code == 0
    before = {k: remote.read(k) for k in remote.keys()}
    other = tmp_path / "b"
    r = run_cli("clone", remote.url, str(other), *remote.cli_args(), "--encrypt")
    assert r.code == 0, r.err
    (cwd / "README.md").write_text("second\n")
    assert run_cli("snapshot", "-m", "second", cwd=cwd).code == 0
    assert run_cli("push", cwd=cwd).code == 0
    assert run_cli("fetch", cwd=other).code == 0
    listed = json.loads(run_cli("list", "--json", cwd=other).text)["checkpoints"]
    changed = [k for k in remote.keys() if k in before and remote.read(k) != before[k]]
    sealed_ref = [k for k in changed if k.startswith("refs/")]
    assert len(sealed_ref) == 1  # the ref keeps its sealed name; its body changed
    remote.overwrite(sealed_ref[0], before[sealed_ref[0]])
    r = run_cli("fetch", cwd=other)
    assert r.code == 6, r.err
    assert_one_line_error(r.err)
    assert "went back" in r.err
    assert json.loads(run_cli("list", "--json", cwd=other).text)["checkpoints"] == listed
