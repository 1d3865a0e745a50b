"""A push killed (SIGKILL, a real process, on SeaweedFS) or failed part-way is resumed by the
next push, which names the packs already on the engine instead of sending them again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env
from remote_helpers import Counting, make_store, sample_tree

from snapstore.errors import RemoteError
from snapstore.remote import layout
from snapstore.store import Store
from snapstore.testing import assert_trees_equal, read_tree

REPO = Path(__file__).resolve().parent.parent
LANDED = 2  # packs on the engine when the first push dies


def _first_push_dies(remote, tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Push ``tree``, stopped before its request LANDED + 2 (gc's plan read, then LANDED packs)."""
    if remote.kind == "seaweedfs":
        r = subprocess.run(
            [sys.executable, str(REPO / "tests" / "remote_pusher.py"), str(tree), str(1 + LANDED)],
            env=subprocess_env(**remote.env), capture_output=True, timeout=120,
        )
        assert r.returncode == -signal.SIGKILL, r.stderr.decode()
        return

    def before(kind: str, key: str, seen: list[int] = [0]) -> None:  # noqa: B006
        seen[0] += 1
        if seen[0] > 1 + LANDED:
            raise RemoteError("the engine went away")

    with monkeypatch.context() as mp:
        Counting(mp, before)
        with Store.open(tree) as a, pytest.raises(RemoteError):
            a.push()


def test_a_push_killed_part_way_is_resumed_without_sending_its_packs_again(remote, tmp_path, monkeypatch):
    tree = tmp_path / "a"
    with make_store(tree, {**sample_tree("a"), "more.bin": os.urandom(2_000_000)}) as a:
        a.snapshot("first")
        remote.add_to(a)
        assert a.remote_doctor().ok  # first contact done: the push's requests are its own
    monkeypatch.setattr(layout, "PACK_TARGET", 64 << 10)  # (as remote_pusher.py: many packs)
    monkeypatch.setattr(layout, "INLINE_MAX", 0)
    _first_push_dies(remote, tree, monkeypatch)
    landed = set(remote.keys("packs/"))
    assert len(landed) == LANDED and remote.keys("log/") == []  # nothing published
    counting = Counting(monkeypatch)
    with Store.open(tree) as a:
        report = a.push()
    created = [key for kind, key in counting.last.calls if kind == "create" and key.startswith("packs/")]
    assert report.packs_resumed == LANDED and not landed & set(created), (report.packs_resumed, created)
    assert report.packs == len(created) and len(set(remote.keys("packs/"))) == LANDED + len(created)
    bundle = layout.parse_bundle(report.bundle, remote.read(report.bundle))
    assert landed <= set(bundle.needs)
    with Store.open(tree) as a:
        v = a.remote_verify()
        assert v.ok and v.unreferenced_packs == 0, v.problems
    Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    assert_trees_equal(read_tree(tree), read_tree(tmp_path / "b"))
