"""A full disk is said as such (issue 38 class 18): "no space left", exit 8, one line, never
"Input/output error" nor an internal error; the store stays as it was and the space a failed
compaction took is given back.  A real small file system: a tmpfs mounted for the test (root
only; skipped otherwise)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.cli.lean import failure_code
from snapstore.errors import NoSpaceError, TreeIOError, no_space


@pytest.fixture
def small_fs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("needs root, to mount a tmpfs")
    mnt = tmp_path / "small"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={getattr(request, 'param', '7m')}", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _snap(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    store = tree.parent / "small" / "store"  # (kept outside the tree: on the small file system)
    return subprocess.run([sys.executable, "-m", "snapstore", "--store", str(store), *args], cwd=tree, capture_output=True, text=True,
                          env=subprocess_env(SNAPSTORE_NO_SERVICE="1"), timeout=120)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize("small_fs", ["11m"], indirect=True)  # room for gc's own writes, not for the copy
def test_compaction_on_a_full_disk_says_no_space_and_gives_the_space_back(tmp_path: Path, small_fs: Path):
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in range(3):
        (tree / f"r{n}.bin").write_bytes(os.urandom(1_500_000))
    assert _snap(tree, "init").returncode == 0
    done = _snap(tree, "snapshot", "-m", "big")
    assert done.returncode == 0, done.stderr
    free = _free(small_fs)
    done = _snap(tree, "gc", "--compact")  # (it was "cannot compact the store: mdb_txn_commit: Input/output error")
    assert done.returncode == 8, done.stderr
    assert "no space left" in done.stderr and "Input/output" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    # The half-written copy, which filled the disk, is gone (gc's own writes, inside the LMDB
    # file, stay: LMDB never shrinks its file, and reuses those pages).
    assert _free(small_fs) > 1 << 20, f"{_free(small_fs)} bytes free (before gc: {free})"
    assert not list((small_fs / "store").glob("gen-*"))
    assert _snap(tree, "verify").returncode == 0
    (tree / "r0.bin").unlink()
    assert _snap(tree, "snapshot", "-m", "after").returncode == 0  # the store still works


def test_a_write_on_a_full_disk_says_no_space(tmp_path: Path, small_fs: Path):
    tree = tmp_path / "tree"
    tree.mkdir()
    assert _snap(tree, "init").returncode == 0
    for n in range(6):
        (tree / f"r{n}.bin").write_bytes(os.urandom(1_500_000))
    done = _snap(tree, "snapshot", "-m", "too big")
    assert done.returncode == 8, done.stderr
    assert "no space left" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _snap(tree, "verify").returncode == 0


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_an_os_error_of_a_full_disk_anywhere_is_the_one_clear_error(code: int):
    said: list[str] = []
    assert failure_code(OSError(code, os.strerror(code), "/x/y"), said.append) == NoSpaceError.exit_code == 8
    assert said and said[0].startswith("no space left") and "/x/y" in said[0]
    assert isinstance(no_space(OSError(code, "x")), NoSpaceError) and issubclass(NoSpaceError, TreeIOError)
    assert no_space(OSError(errno.EIO, "x")) is None
