"""Full disk: the store or the tree on a small file system that fills up.

As root the file systems are real 4 MiB tmpfs mounts; where mounting is not allowed, those
tests skip and the injected-ENOSPC tests below (which always run) cover the same paths.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from snapstore.errors import TreeIOError
from snapstore.ops import restore as restore_mod
from snapstore.ops.restore import apply as apply_mod
from snapstore.storage import lmdb_backend
from snapstore.store import Store
from snapstore.testing import random_bytes, read_tree, tree_from_store

REPO = Path(__file__).resolve().parents[2]
CASE = pytest.mark.torture_case("full disk")


def _env(**extra) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **extra)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SNAPSTORE_DEBUG", None)
    return env


@contextmanager
def small_fs(path: Path, size: str = "4m"):
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _snapstore(*args, cwd, store) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapstore", *args], cwd=cwd,
                          env=_env(SNAPSTORE_STORE=str(store)), capture_output=True, timeout=120)


def _one_line(err: bytes) -> str:
    text = err.decode("utf-8", "replace")
    lines = text.splitlines()
    assert "Traceback" not in text and len(lines) == 1, text
    assert lines[0].startswith("snapstore: error: "), text
    return lines[0]


@CASE
@pytest.mark.parametrize("shape", ["one big file", "many files"])
def test_snapshot_on_a_full_store_file_system(tmp_path, shape):
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.txt").write_bytes(b"first\n")
    with small_fs(tmp_path / "fs") as fs:
        store_dir = fs / "store"
        with Store.init(root, store=store_dir) as store:
            store.snapshot("A", tags=["A"])
            spec_a = tree_from_store(store, "A")
        if shape == "one big file":
            (root / "big.bin").write_bytes(random_bytes(6 << 20, "big"))
        else:
            for i in range(40):
                (root / f"m{i}.bin").write_bytes(random_bytes(150_000, f"m{i}"))
        done = _snapstore("snapshot", "-m", "B", cwd=root, store=store_dir)
        assert done.returncode == 8, done.stderr
        line = _one_line(done.stderr)
        assert "space" in line, line
        # The store is still valid, the earlier checkpoint intact, nothing half-recorded.
        check = _snapstore("verify", cwd=root, store=store_dir)
        assert check.returncode == 0, check.stdout + check.stderr
        with Store.open(root, store=store_dir) as store:
            assert [c.message for c in store.checkpoints(include_safety=True)] == ["A"]
            assert tree_from_store(store, "A") == spec_a
        # Once the tree fits again, snapshots work again (after a gc of what the failed one left).
        for p in root.glob("*.bin"):
            p.unlink()
        assert _snapstore("gc", cwd=root, store=store_dir).returncode == 0
        (root / "a.txt").write_bytes(b"second\n")
        again = _snapstore("snapshot", "-m", "C", cwd=root, store=store_dir)
        assert again.returncode == 0, again.stderr
        with Store.open(root, store=store_dir) as store:
            assert store.read_bytes("latest", "a.txt") == b"second\n"
            assert store.verify().ok


@CASE
def test_restore_onto_a_full_tree_file_system_rolls_back(tmp_path):
    store_dir = tmp_path / "store"
    with small_fs(tmp_path / "fs") as root:
        (root / ".gitignore").write_bytes(b"filler\n")
        for i in range(10):
            (root / f"f{i}.txt").write_bytes(f"version A {i}\n".encode() * 50)
        (root / "big.bin").write_bytes(random_bytes(2_500_000, "big"))
        with Store.init(root, store=store_dir) as store:
            store.snapshot("A", tags=["A"])
        spec_a = read_tree(root)
        (root / "big.bin").unlink()
        for i in range(0, 10, 2):
            (root / f"f{i}.txt").write_bytes(f"version B {i}\n".encode() * 70)
        (root / "new.txt").write_bytes(b"added after A\n")
        # An ignored file fills the disk: restore never touches it, so big.bin cannot fit.
        with open(root / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
        (root / "filler").write_bytes((root / "filler").read_bytes()[: -700_000])
        before = read_tree(root)
        done = _snapstore("restore", "A", cwd=root, store=store_dir)
        assert done.returncode == 8, done.stderr
        line = _one_line(done.stderr)
        assert "rolled back" in line, line
        assert read_tree(root) == before
        assert not list(Path(root).rglob(".snapstore-tmp.*"))
        with Store.open(root, store=store_dir) as store:
            assert store.verify().ok
            assert tree_from_store(store, "A") == {k: v for k, v in spec_a.items()}
            (root / "filler").unlink()
            store.restore("A")
            assert read_tree(root) == spec_a


# -- the same failures injected through test seams (no mount needed) ------------------------


@CASE
def test_injected_enospc_in_a_store_commit(tree, monkeypatch):

    (tree / "a.txt").write_bytes(b"a\n")
    with Store.init(tree) as store:
        store.snapshot("A")
        (tree / "b.bin").write_bytes(random_bytes(300_000, "b"))
        calls = {"n": 0}

        def full(self, batch):
            calls["n"] += 1
            raise lmdb_backend.lmdb.DiskError("mdb_txn_commit: No space left on device")

        monkeypatch.setattr(lmdb_backend.LmdbBackend, "_apply_once", full)
        with pytest.raises(TreeIOError, match="space"):
            store.snapshot("B")
        monkeypatch.undo()
        assert calls["n"] >= 1
        assert [c.message for c in store.checkpoints()] == ["A"]
        assert store.verify().ok
        store.snapshot("B")
        assert store.read_bytes("latest", "b.bin") == random_bytes(300_000, "b")


def _enospc_restore_setup(tree):
    (tree / "keep.txt").write_bytes(b"keep\n")
    (tree / "x.txt").write_bytes(b"x version A\n")
    (tree / "big.bin").write_bytes(random_bytes(100_000, "a"))
    store = Store.init(tree)
    store.snapshot("A", tags=["A"])
    (tree / "x.txt").unlink()
    (tree / "big.bin").write_bytes(b"small now\n")
    (tree / "added.txt").write_bytes(b"added\n")
    return store


@CASE
def test_injected_enospc_while_restoring_rolls_back(tree, monkeypatch):
    """The disk fills while big.bin is written: the new files are written (to temp files)
    before anything in the tree is removed or renamed, so the restore stops with the tree as it
    was and no temp file left."""
    with _enospc_restore_setup(tree) as store:
        before = read_tree(tree)
        real_write, real_roll_back = apply_mod.write, restore_mod.roll_back
        state = {"n": 0, "full": True}

        def write(fd, data):
            state["n"] += 1
            if state["full"] and state["n"] > 1:
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        def roll_back(*args):
            state["full"] = False
            return real_roll_back(*args)

        monkeypatch.setattr(apply_mod, "write", write)
        monkeypatch.setattr(restore_mod, "roll_back", roll_back)
        with pytest.raises(TreeIOError, match="rolled back"):
            store.restore("A")
        monkeypatch.undo()
        assert read_tree(tree) == before
        assert not list(tree.rglob(".snapstore-tmp.*"))
        assert store.verify().ok
        store.restore("A")
        assert read_tree(tree) == tree_from_store(store, "A")


@CASE
def test_disk_full_for_good_during_a_restore_is_finished_later(tree, monkeypatch):
    """The disk fills once the restore has begun (after its removal, at the first rename) and
    stays full, so even the roll-back cannot write: a clear error, the journal is kept;
    read-only commands still work (and leave the tree alone); once space is back the next
    writer finishes the restore (the after state).  (A disk already full when the new files are
    written fails before the tree is touched: the first test.)"""
    with _enospc_restore_setup(tree) as store:
        real_write = apply_mod.write

        def write(fd, data):
            if not (tree / "added.txt").exists():  # full once the removal has run
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_write(fd, data)

        def rename(tmp, name, dir_fd):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(apply_mod, "write", write)
        monkeypatch.setattr(apply_mod, "rename", rename)
        with pytest.raises(TreeIOError, match="could not be rolled back"):
            store.restore("A")
        with pytest.raises(TreeIOError, match="interrupted restore"):
            store.snapshot("while full")
        monkeypatch.undo()
        store.close()
    half = read_tree(tree)
    for command in (["list"], ["verify"]):
        done = subprocess.run([sys.executable, "-m", "snapstore", *command], cwd=tree, env=_env(),
                              capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert read_tree(tree) == half
    done = subprocess.run([sys.executable, "-m", "snapstore", "snapshot", "-m", "after"], cwd=tree,
                          env=_env(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with Store.open(tree) as store:
        assert read_tree(tree) == tree_from_store(store, "A")
        assert not list(tree.rglob(".snapstore-tmp.*"))
        assert store.verify().ok
        assert store.operations()[0].kind == "restore"

