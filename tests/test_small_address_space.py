"""Small containers (issue 22 class 10): a process limited by ``ulimit -v`` still works (the
LMDB map fits its address space), and ``init`` is atomic: a failed or killed init leaves no
half-made store that ``init`` calls existing and every other command calls "not a store"."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.errors import StoreNotFoundError, TreeIOError
from snapstore.store import Store


def _limited(limit: int):  # type: ignore[no-untyped-def]
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _snapstore(tree: Path, *args: str, limit: int | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "snapstore", *args], cwd=tree, env=subprocess_env(), capture_output=True,
        timeout=120, preexec_fn=_limited(limit) if limit else None,
    )


def test_every_command_works_with_a_2_gib_address_space(tmp_path: Path):
    (tmp_path / "a.txt").write_text("one\n")
    gib2 = 2 << 30
    for args in (["init"], ["snapshot", "-m", "one"], ["list"], ["verify"]):
        done = _snapstore(tmp_path, *args, limit=gib2)
        assert done.returncode == 0, (args, done.stderr)
    (tmp_path / "a.txt").write_text("two\n")
    assert _snapstore(tmp_path, "snapshot", "-m", "two", limit=gib2).returncode == 0
    assert _snapstore(tmp_path, "restore", "latest~1", limit=gib2).returncode == 0
    assert (tmp_path / "a.txt").read_text() == "one\n"
    # The same store opens without a limit afterwards (a larger map is no problem either).
    with Store.open(tmp_path) as store:
        assert len(store.checkpoints()) == 2


def test_a_store_grows_past_a_limited_first_map(tmp_path: Path):
    # 1 GiB of address space: the first map is 256 MiB at most; 300 MB of incompressible
    # content makes it grow (or fail with one clear line, never a traceback or a bad store).
    data = tmp_path / "big"
    data.mkdir()
    for i in range(6):
        (data / f"{i}.bin").write_bytes(os.urandom(50 << 20))
    assert _snapstore(tmp_path, "init", limit=1 << 30).returncode == 0
    done = _snapstore(tmp_path, "snapshot", "-m", "big", limit=1 << 30)
    assert b"Traceback" not in done.stderr
    if done.returncode != 0:
        assert done.returncode == TreeIOError.exit_code and b"ulimit -v" in done.stderr, done.stderr
    assert _snapstore(tmp_path, "verify").returncode == 0


def test_a_failed_init_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from snapstore.storage.lmdb_backend import LmdbBackend

    def fail(self: LmdbBackend) -> None:
        raise TreeIOError("disk full (injected)")

    monkeypatch.setattr(LmdbBackend, "barrier", fail)
    with pytest.raises(TreeIOError, match="injected"):
        Store.init(tmp_path)
    assert sorted(os.listdir(tmp_path)) == []
    monkeypatch.undo()
    Store.init(tmp_path).close()
    assert os.listdir(tmp_path) == [".snapstore"]


def test_a_failed_init_into_a_named_non_empty_directory_removes_only_what_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from snapstore.storage.lmdb_backend import LmdbBackend

    named = tmp_path / "stores"
    named.mkdir()
    (named / "README").write_text("mine\n")
    monkeypatch.setattr(LmdbBackend, "barrier", lambda self: (_ for _ in ()).throw(TreeIOError("injected")))
    tree = tmp_path / "tree"
    tree.mkdir()
    with pytest.raises(TreeIOError):
        Store.init(tree, store=named)
    assert sorted(os.listdir(named)) == ["README"]


KILLED_INIT = r"""
import os, signal, sys
from snapstore.storage.lmdb_backend import LmdbBackend
from snapstore.store import Store
LmdbBackend.barrier = lambda self: os.kill(os.getpid(), signal.SIGKILL)
Store.init(sys.argv[1])
"""


def test_an_init_killed_midway_leaves_no_store(tmp_path: Path):
    tree = tmp_path / "t"
    tree.mkdir()
    proc = subprocess.run([sys.executable, "-c", KILLED_INIT, str(tree)], env=subprocess_env(), capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not (tree / ".snapstore").exists()
    with pytest.raises(StoreNotFoundError):
        Store.find(tree)
    assert _snapstore(tree, "init").returncode == 0  # not "a store already exists"
    (tree / "a.txt").write_text("a\n")
    assert _snapstore(tree, "snapshot", "-m", "after").returncode == 0
    with Store.open(tree) as store:  # the killed init's leftovers are not recorded
        assert [e.path for e in store.entries("latest")] == [b"a.txt"]
    assert sorted(os.listdir(tree)) == [".snapstore", "a.txt"]


def test_the_first_map_is_a_quarter_of_the_address_space_limit(monkeypatch: pytest.MonkeyPatch):
    from snapstore.storage import lmdb_env

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (2 << 30, 2 << 30))
    assert lmdb_env.fitting_map_size(1 << 40) == 512 << 20
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert lmdb_env.fitting_map_size(1 << 40) == 1 << 40


def test_a_refused_reservation_is_retried_smaller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # A limit getrlimit does not show (overcommit, a cgroup): mmap says ENOMEM.
    import lmdb

    from snapstore.storage import lmdb_env

    real_open, tried = lmdb.open, []

    def open_(path: str, map_size: int, **kw: object) -> lmdb.Environment:
        tried.append(map_size)
        if map_size > 256 << 20:
            raise lmdb.MemoryError(path + ": Cannot allocate memory")
        return real_open(path, map_size=map_size, **kw)

    monkeypatch.setattr(lmdb, "open", open_)
    monkeypatch.setattr(lmdb_env, "fitting_map_size", lambda wanted: wanted)
    with Store.init(tmp_path) as store:
        store.snapshot("works")
    assert tried[0] == 1 << 40 and tried[-1] <= 256 << 20
