"""remote gc: two phases, a grace period by the engine's clock, never what a push names."""

from __future__ import annotations

import pytest
from remote_helpers import Counting, make_store, sample_tree

from snapstore.remote import layout
from snapstore.remote import transport as tr
from snapstore.store import Store
from snapstore.testing import assert_trees_equal, read_tree


class Killed(BaseException):
    pass


def _orphan_and_live(remote, tmp_path, monkeypatch) -> tuple[Store, str, set[str]]:
    """A published checkpoint (its pack live) and the pack of a push killed before its bundle."""
    monkeypatch.setattr(layout, "INLINE_MAX", 0)
    a = make_store(tmp_path / "a", sample_tree("a"))
    remote.add_to(a)
    a.snapshot("first")
    a.push()
    live = set(remote.keys("packs/"))
    (tmp_path / "a" / "new.bin").write_bytes(b"orphan data " * 5000)
    a.snapshot("second")

    def kill_at_bundle(kind: str, key: str) -> None:
        if key.startswith("log/"):
            raise Killed

    with monkeypatch.context() as mp:
        Counting(mp, kill_at_bundle)
        with pytest.raises(Killed):
            a.push()
    orphans = set(remote.keys("packs/")) - live
    assert len(orphans) == 1
    return a, orphans.pop(), live


def test_gc_condemns_then_deletes_only_unreferenced_packs(remote, tmp_path, monkeypatch):
    a, orphan, live = _orphan_and_live(remote, tmp_path, monkeypatch)
    with a:
        dry = a.remote_gc(dry_run=True, grace_s=0, window_s=0)
        assert dry.condemned == [orphan] and "gc/plan" not in remote.keys("gc/")
        first = a.remote_gc(grace_s=0, window_s=0)
        assert first.condemned == [orphan] and first.deleted == []  # phase 1 deletes nothing
        assert orphan in remote.keys("packs/")
        second = a.remote_gc(grace_s=0, window_s=0)
        assert second.deleted == [orphan]
        assert set(remote.keys("packs/")) == live
        assert a.remote_verify().ok
    Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    assert (tmp_path / "b" / "README.md").exists()


def test_gc_never_touches_a_pack_younger_than_the_grace_period(remote, tmp_path, monkeypatch):
    a, orphan, _ = _orphan_and_live(remote, tmp_path, monkeypatch)
    with a:
        for _ in range(2):
            r = a.remote_gc(grace_s=3600, window_s=0)
            assert r.condemned == [] and r.deleted == []
        assert orphan in remote.keys("packs/")


def test_gc_racing_a_push_rescues_the_pack_the_push_then_publishes(remote, tmp_path, monkeypatch):
    """gc condemns a pack while its push is between the pack and the bundle (only possible here
    because the grace period is 0): the bundle published meanwhile rescues it at phase two."""
    monkeypatch.setattr(layout, "INLINE_MAX", 0)
    with make_store(tmp_path / "a", sample_tree("a")) as a, make_store(tmp_path / "g", {"x": b"x"}) as g:
        remote.add_to(a)
        remote.add_to(g)
        a.snapshot("first")
        assert a.remote_doctor().ok
        ran: list[object] = []

        def gc_before_bundle(kind: str, key: str) -> None:
            if kind == "create" and key.startswith("log/") and not ran:
                ran.append(None)  # (gc's own requests pass through this hook too)
                ran[0] = g.remote_gc(grace_s=0, window_s=0)

        with monkeypatch.context() as mp:
            Counting(mp, gc_before_bundle)
            a.push()
        assert ran and ran[0].condemned  # the push's pack was condemned mid-push
        after = g.remote_gc(grace_s=0, window_s=0)
        assert after.deleted == [] and after.rescued == ran[0].condemned
        assert g.remote_verify().ok
    Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    assert_trees_equal(read_tree(tmp_path / "a"), read_tree(tmp_path / "b"))


def test_two_gc_runs_never_both_act_on_one_plan(remote, tmp_path, monkeypatch):
    a, orphan, _ = _orphan_and_live(remote, tmp_path, monkeypatch)
    with a:
        a.remote_gc(grace_s=0, window_s=0)
        from snapstore.remote import gc
        from snapstore.remote.names import parse_url

        t = tr.connect(parse_url(remote.url), endpoint=remote.endpoint)
        stale = t.get(gc.PLAN_KEY)
        assert stale is not None
        a.remote_gc(grace_s=0, window_s=3600)  # moves the plan on
        assert t.put_update(gc.PLAN_KEY, b"x", stale.etag) is None


def test_remote_gc_cli_dry_run(remote, tmp_path, monkeypatch, run_cli):
    a, orphan, _ = _orphan_and_live(remote, tmp_path, monkeypatch)
    a.close()
    r = run_cli("remote", "gc", "--dry-run", cwd=tmp_path / "a")
    assert r.code == 0 and "would delete 0" in r.text and "condemned 0" in r.text  # 24 h grace
    assert run_cli("remote", "gc", "--grace", "1", cwd=tmp_path / "a").code == 2  # below 12 h
    assert orphan in remote.keys("packs/")


def test_listings_that_lag_delay_a_fetch_and_never_lose_a_pack(remote, tmp_path, monkeypatch):
    from remote_helpers import LaggyListing

    monkeypatch.setattr(layout, "INLINE_MAX", 0)
    lag = LaggyListing(monkeypatch, lag=3)  # the newest 3 objects are missing from listings
    with make_store(tmp_path / "a", sample_tree("a")) as a, make_store(tmp_path / "g", {"x": b"x"}) as g:
        remote.add_to(a)
        remote.add_to(g)
        a.snapshot("first", task="t")
        a.push()  # pack, bundle, ref: all three hidden from listings for now
        assert g.fetch().refs == []  # the ref is not listed yet: nothing fetched, no error
        condemned = g.remote_gc(grace_s=0, window_s=0).condemned  # the bundle is not listed...
        assert len(condemned) == 1 and condemned[0].startswith("packs/")  # ...so its pack looks dead
        lag.hidden = False  # the listings catch up
        after = g.remote_gc(grace_s=0, window_s=0)
        assert after.deleted == [] and after.rescued == condemned  # phase two re-lists: rescued
        fetched = g.fetch()
        assert [r.name for r in fetched.refs] == ["t"]
        assert g.remote_verify().ok


@pytest.mark.parametrize("skew_days", [-1, 1])
def test_gc_ignores_the_client_clock(remote, tmp_path, monkeypatch, skew_days):
    """A gc host whose clock is a day off condemns nothing young: it reads the engine's."""
    import time as time_module

    a, orphan, _ = _orphan_and_live(remote, tmp_path, monkeypatch)
    real_ns, real_s = time_module.time_ns, time_module.time
    monkeypatch.setattr(time_module, "time_ns", lambda: real_ns() + skew_days * 86_400 * 10**9)
    monkeypatch.setattr(time_module, "time", lambda: real_s() + skew_days * 86_400)
    with a:
        for _ in range(2):
            r = a.remote_gc(grace_s=3600, window_s=0)
            assert r.condemned == [] and r.deleted == []
    assert orphan in remote.keys("packs/")
