"""Remote failures: a pusher killed after every k-th request, corrupt objects planted behind
the client, an engine that ignores conditional writes, unreachable engines, credentials."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, assert_one_line_error, subprocess_env
from remote_helpers import (
    Counting,
    IgnoresConditions,
    make_store,
    plant_swapped_manifest,
    sample_tree,
)
from seaweed import SECRET_KEY

from snapstore.errors import CorruptError, RemoteError
from snapstore.remote import layout
from snapstore.remote import transport as tr
from snapstore.store import Store
from snapstore.testing import assert_trees_equal, read_tree


class Killed(BaseException):
    """Stands for SIGKILL in-process (the memory engine lives in this process only)."""


def _consistent(rem, tmp_path: Path, n: int) -> None:
    """Every published object checks out, and every ref fetches whole."""
    root = tmp_path / f"check{n}"
    root.mkdir()
    with Store.in_memory(root) as reader:
        reader.remote_add("origin", rem.url, endpoint=rem.endpoint)
        assert not reader.remote_verify().problems
        for r in reader.fetch().refs:
            assert reader.resolve(r.checkpoint).id == r.checkpoint


def test_pusher_killed_after_every_k_requests_leaves_the_remote_consistent(remote, tmp_path, monkeypatch):
    base = tmp_path / "base"
    files = {**sample_tree("a"), "more.bin": os.urandom(300_000)}
    with make_store(base, files) as a:
        a.snapshot("first")
        remote.add_to(a)
        # First contact (config, conditional-write probe) done once, so that every run below
        # starts from the same local state and k walks every request of the push itself:
        # each pack, the bundle, the ref's read and its swap.
        assert a.remote_doctor().ok
    finished = False
    for k in range(1, 80):
        # Each run starts from a copy of the same store (so the same pushes remain to make) and
        # meets the remote as the killed runs before it left it.
        tree = tmp_path / f"run{k}"
        shutil.copytree(base, tree, symlinks=True)
        if remote.kind == "seaweedfs":
            r = subprocess.run(
                [sys.executable, str(REPO / "tests" / "remote_pusher.py"), str(tree), str(k)],
                env=subprocess_env(**remote.env), capture_output=True, timeout=120,
            )
            assert r.returncode in (0, -signal.SIGKILL), r.stderr.decode()
            done = r.returncode == 0
        else:
            def before(kind: str, key: str, k: int = k, seen: list[int] = [0]) -> None:  # noqa: B006
                seen[0] += 1
                if seen[0] > k:
                    raise Killed

            with monkeypatch.context() as mp:
                mp.setattr(layout, "PACK_TARGET", 64 << 10)
                mp.setattr(layout, "INLINE_MAX", 0)
                Counting(mp, before)
                try:
                    with Store.open(tree) as a:
                        a.push()
                    done = True
                except Killed:
                    done = False
        _consistent(remote, tmp_path, k)
        if done:
            finished = True
            break
    # gc's plan read + 2 packs + bundle + ref read + ref create: it was killed before each of them first.
    assert finished and k == 6, k
    Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    assert_trees_equal(read_tree(tree), read_tree(tmp_path / "b"))


def _pushed_with_a_pack(remote, tmp_path, monkeypatch) -> tuple[str, str]:
    monkeypatch.setattr(layout, "INLINE_MAX", 0)  # the data goes to a pack, the bundle is small
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        a.snapshot("first")
        remote.add_to(a)
        report = a.push()
    packs = remote.keys("packs/")
    assert len(packs) == 1
    return packs[0], report.bundle


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_corrupt_pack_is_named_by_remote_verify_exit_6(remote, tmp_path, monkeypatch, run_cli, damage):
    pack, _ = _pushed_with_a_pack(remote, tmp_path, monkeypatch)
    body = remote.read(pack)
    if damage == "truncated":
        remote.overwrite(pack, body[: len(body) // 2])
    else:
        i = len(body) // 3
        remote.overwrite(pack, body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1 :])
    r = run_cli("remote", "verify", cwd=tmp_path / "a")
    assert r.code == CorruptError.exit_code == 6
    assert pack in r.text
    # A clone refuses it by hash, exit 6, and leaves nothing behind.
    r = run_cli("clone", remote.url, str(tmp_path / "b"), *remote.cli_args())
    assert r.code == 6 and pack in r.err
    assert_one_line_error(r.err)
    assert not (tmp_path / "b").exists()


def test_a_corrupt_bundle_is_named_and_fetch_adds_nothing(remote, tmp_path, monkeypatch, run_cli):
    _, bundle = _pushed_with_a_pack(remote, tmp_path, monkeypatch)
    body = remote.read(bundle)
    remote.overwrite(bundle, body[:-7])
    r = run_cli("remote", "verify", "--json", cwd=tmp_path / "a")
    assert r.code == 6
    assert bundle in [p["object"] for p in json.loads(r.text)["problems"]]
    (tmp_path / "c").mkdir()
    with Store.init(tmp_path / "c") as c:
        remote.add_to(c)
        with pytest.raises(CorruptError, match=bundle):
            c.fetch()
        assert c.checkpoints() == []


def test_a_missing_pack_stops_the_fetch_before_any_checkpoint(remote, tmp_path, monkeypatch):
    pack, _ = _pushed_with_a_pack(remote, tmp_path, monkeypatch)
    remote.transport().delete(pack)
    (tmp_path / "c").mkdir()
    with Store.init(tmp_path / "c") as c:
        remote.add_to(c)
        with pytest.raises(CorruptError, match="missing"):
            c.fetch()
        assert c.checkpoints() == []
        assert not c.remote_verify().ok


def test_doctor_refuses_shared_refs_on_an_engine_that_ignores_conditions(remote, tmp_path, monkeypatch, run_cli):
    real = tr.connect
    monkeypatch.setattr(tr, "connect", lambda *a, **kw: IgnoresConditions(real(*a, **kw)))
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        a.snapshot("first")
        remote.add_to(a)
    r = run_cli("remote", "doctor", cwd=tmp_path / "a")
    assert r.code == RemoteError.exit_code == 13
    assert "FAIL" in r.text and "ignores conditional writes" in r.err
    r = run_cli("push", "--json", cwd=tmp_path / "a")
    assert r.code == 13
    report = json.loads(r.text)
    assert report["ref_outcome"] == "refused"
    assert remote.keys("refs/") == [] and report["bundle"] in remote.keys("log/")


def test_an_unreachable_engine_is_exit_13_in_one_line(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s-e-c-r-e-t")
    with make_store(tmp_path / "a", {"a.txt": b"a"}) as a:
        a.snapshot("first")
    assert run_cli("remote", "add", "origin", "s3://b/p", "--endpoint", "http://127.0.0.1:9", cwd=tmp_path / "a").code == 0
    r = run_cli("push", cwd=tmp_path / "a")
    assert r.code == 13
    assert_one_line_error(r.err)
    assert "s-e-c-r-e-t" not in r.err


def test_no_credentials_is_a_usage_error_before_any_request(tmp_path, run_cli, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with make_store(tmp_path / "a", {"a.txt": b"a"}) as a:
        a.snapshot("first")
    run_cli("remote", "add", "origin", "s3://b/p", "--endpoint", "http://127.0.0.1:9", cwd=tmp_path / "a")
    r = run_cli("push", cwd=tmp_path / "a")
    assert r.code == 2 and "no AWS credentials" in r.err


def test_credentials_never_reach_the_store_the_output_or_json(remote, tmp_path, run_cli, monkeypatch):
    if remote.kind != "seaweedfs":
        pytest.skip("the memory engine takes no credentials")
    creds = tmp_path / "credentials"
    creds.write_text(f"[team]\naws_access_key_id = snapkey\naws_secret_access_key = {SECRET_KEY}\n")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        a.snapshot("first")
    cwd = tmp_path / "a"
    outputs = [
        run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), "--profile", "team", cwd=cwd),
        run_cli("push", "--json", cwd=cwd),
        run_cli("remote", "list", "--json", cwd=cwd),
        run_cli("remote", "ls", "--json", cwd=cwd),
        run_cli("fetch", "--json", cwd=cwd),
        run_cli("remote", "doctor", "--json", cwd=cwd),
    ]
    for r in outputs:
        assert r.code == 0, r.err
        assert SECRET_KEY not in r.text + r.err
    data = b"".join(p.read_bytes() for p in (cwd / ".snapstore").rglob("*.mdb"))
    assert b"team" in data  # the profile's name is stored...
    assert SECRET_KEY.encode() not in data  # ...never its keys


def test_pull_restores_through_the_journaled_restore_and_undo_goes_back(remote, tmp_path):
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        a.snapshot("first")
        remote.add_to(a)
        a.push()
        (tmp_path / "a" / "README.md").write_bytes(b"new readme\n")
        a.snapshot("second")
        a.push()
    Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    with make_store(tmp_path / "c", {"mine.txt": b"local work\n"}) as c:
        c.snapshot("local")
        remote.add_to(c)
        report = c.pull()
        assert report.restore is not None and report.restore.safety is not None
        assert_trees_equal(read_tree(tmp_path / "a"), read_tree(tmp_path / "c"))
        c.undo()
        assert (tmp_path / "c" / "mine.txt").read_bytes() == b"local work\n"


@pytest.mark.parametrize("where", ["inline", "pack"])
def test_a_manifest_record_moved_under_another_manifest_id_is_refused_by_fetch(remote, tmp_path, monkeypatch, where):
    """A bundle whose pack carries checkpoint A's manifest id with B's ``streams`` record
    (every chunk sound) would make A show B's tree: fetch refuses it, exit 6, adds nothing."""
    first, _, key = plant_swapped_manifest(remote, tmp_path, monkeypatch, where)
    (tmp_path / "c").mkdir()
    with Store.init(tmp_path / "c") as c:
        remote.add_to(c)
        with pytest.raises(CorruptError, match="names neither its tree nor its content") as exc:
            c.fetch(["t"])
        assert key in str(exc.value) and first in str(exc.value)
        assert c.checkpoints() == []
