"""The store's own files: never followed through symlinks, never another user's; map growth
under a multi-threaded reader."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from helpers import assert_one_line_error, run_snapstore, subprocess_env

from snapstore.errors import UnsafePathError
from snapstore.storage.lmdb_backend import LmdbBackend
from snapstore.store import Store

OUTSIDE = b"precious bytes outside the store\n"


@pytest.mark.parametrize("name", ["lock.mdb", "data.mdb", "lock"])
def test_a_symlinked_store_file_is_refused_and_its_target_untouched(tree, tmp_path, name):
    store = Store.init(tree)
    store.snapshot("one")
    store.close()
    outside = tmp_path / "outside"
    outside.write_bytes(OUTSIDE)
    link = tree / ".snapstore" / name
    link.unlink()
    link.symlink_to(outside)
    for args in (["list"], ["snapshot", "-m", "two"], ["gc"]):
        done = run_snapstore(*args, cwd=tree)
        assert done.returncode == 10, (args, done.stderr)
        assert_one_line_error(done.stderr)
        assert f"{name} is a symlink".encode() in done.stderr
    with pytest.raises(UnsafePathError):
        Store.open(tree)
    assert outside.read_bytes() == OUTSIDE


def test_a_writer_lock_planted_as_a_symlink_after_opening_is_not_followed(tree, tmp_path):
    # The store was fine when opened; the link appears before the first write takes the lock.
    outside = tmp_path / "outside"
    outside.write_bytes(OUTSIDE)
    with Store.init(tree) as store:
        lock = tree / ".snapstore" / "lock"
        if lock.exists():
            lock.unlink()
        lock.symlink_to(outside)
        with pytest.raises(UnsafePathError, match="symlink"):
            store.snapshot("one")
    assert outside.read_bytes() == OUTSIDE


def test_a_store_directory_of_another_user_is_refused():
    if os.geteuid() != 0:
        pytest.skip("needs root to create a directory owned by another user")
    # Under /tmp (pytest's own tmp dirs are private to root): user 65534 must reach the store.
    base = Path(tempfile.mkdtemp(prefix="snapstore-owner-", dir="/tmp"))
    try:
        base.chmod(0o755)
        tree = base / "tree"
        tree.mkdir()
        with Store.init(tree) as store:
            store.snapshot("one")
        store_dir = tree / ".snapstore"
        for p in [tree, store_dir, *store_dir.iterdir()]:
            os.chmod(p, 0o777 if p.is_dir() else 0o666)
        os.chown(store_dir, 12345, 12345)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             sys.executable, "-m", "snapstore", "--store", str(store_dir), "list"],
            cwd=tree, env=subprocess_env(), capture_output=True, timeout=60,
        )
        assert done.returncode == 10, done.stderr
        assert_one_line_error(done.stderr)
        assert b"belongs to another user" in done.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_new_stores_reserve_a_map_that_never_needs_growing(tmp_path):
    if sys.maxsize <= 2**32:
        pytest.skip("64-bit only")
    os.mkdir(tmp_path / "s")
    backend = LmdbBackend(str(tmp_path / "s"), create=True)
    try:
        assert backend.map_size() >= 1 << 40
    finally:
        backend.close()


_GROWER = r"""
import os, sys
from snapstore.storage.lmdb_backend import LmdbBackend
b = LmdbBackend(sys.argv[1], map_size=1 << 20)
for i in range(8):
    with b.write() as batch:
        batch.put("chunks", b"big%d" % i, os.urandom(1 << 20))
print(b.map_size())
b.close()
"""


def test_map_growth_by_another_process_never_invalidates_an_open_read_view(tmp_path):
    """Thread A holds a read view; another process grows the map past this process's; thread B
    then begins a read.  B must adopt the new size only once A's view is closed (py-lmdb's
    set_mapsize invalidates every open transaction of the process)."""
    path = str(tmp_path / "s")
    os.mkdir(path)
    backend = LmdbBackend(path, create=True, map_size=1 << 20)  # small: growth is needed
    try:
        with backend.write() as batch:
            batch.put("meta", b"k", b"v")
        lock = backend._shared.lock
        result: dict[str, object] = {}

        def reader_b() -> None:
            try:
                with backend.read() as view:
                    result["b"] = view.get("chunks", b"big7")
            except BaseException as exc:  # reported below
                result["b"] = exc
            finally:
                with lock.cond:
                    result["done"] = True
                    lock.cond.notify_all()

        with backend.read() as view_a:
            grown = subprocess.run(
                [sys.executable, "-c", _GROWER, path], env=subprocess_env(), capture_output=True,
                timeout=60,
            )
            assert grown.returncode == 0, grown.stderr
            assert int(grown.stdout) > backend.map_size()  # the other process grew the map
            b = threading.Thread(target=reader_b)
            b.start()
            with lock.cond:  # B either queued for the resize or (wrongly) went ahead
                lock.cond.wait_for(lambda: lock.exclusive_waiters or result.get("done"))
            assert view_a.get("meta", b"k") == b"v"  # A's view is still valid
            assert "b" not in result  # B waits for A
        b.join()
        assert isinstance(result["b"], bytes) and len(result["b"]) == 1 << 20, result
        assert backend.map_size() == int(grown.stdout)
    finally:
        backend.close()


def test_a_new_store_directory_is_owner_only(tmp_path):
    import stat as stat_mod

    from snapstore.store import Store

    root = tmp_path / "t"
    root.mkdir()
    Store.init(root).close()
    assert stat_mod.S_IMODE((root / ".snapstore").stat().st_mode) == 0o700
