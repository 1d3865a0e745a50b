"""A store planted by another user is never found by searching (issue 22 class 3; git's
safe.directory rule), and the search stops at a file-system boundary.

The other user is real: created for the test (skipped with the reason when not root), owning a
``.snapstore`` in a parent directory of root's project, as on a shared /tmp.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import run_snapstore, second_user, subprocess_env

from snapstore.errors import StoreNotFoundError, UnsafePathError
from snapstore.store import Store

SECRET = "root's 0600 secret\n"


@pytest.fixture(scope="module")
def other() -> Iterator[tuple[str, int, int]]:
    with second_user("snapplant") as user:
        yield user


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, uid, gid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


@pytest.fixture
def planted(tmp_path: Path, other: tuple[str, int, int]) -> tuple[Path, Path]:
    """(shared parent with another user's store in it, root's project below it)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "bait.txt").write_text("bait\n")
    with Store.init(shared) as store:  # made as root, then handed over: "the other user's"
        store.snapshot("planted")
    _chown_tree(shared / ".snapstore", other[1], other[2])
    os.chown(shared, other[1], other[2])
    project = shared / "project"
    project.mkdir()
    (project / "secret.txt").write_text(SECRET)
    (project / "secret.txt").chmod(0o600)
    return shared, project


def _checkpoints(store_dir: Path) -> int:
    with Store.open(store=store_dir) as store:
        return len(store.checkpoints(include_safety=True))


def test_snapshot_refuses_another_users_store_found_above(planted: tuple[Path, Path]):
    shared, project = planted
    before = _checkpoints(shared / ".snapstore")
    done = run_snapstore("snapshot", "-m", "x", cwd=project)
    assert done.returncode == UnsafePathError.exit_code, done.stderr
    err = done.stderr.decode()
    assert err.count("\n") == 1 and "belongs to another user" in err and "--store" in err
    assert _checkpoints(shared / ".snapstore") == before  # root's secret went nowhere
    with pytest.raises(UnsafePathError):
        Store.find(project)


@pytest.mark.parametrize("command", [["list"], ["show"], ["diff"], ["cat", "latest", "bait.txt"], ["restore", "latest"]])
def test_every_command_refuses_it(planted: tuple[Path, Path], command: list[str]):
    _, project = planted
    done = run_snapstore(*command, cwd=project)
    assert done.returncode == UnsafePathError.exit_code, done.stderr
    assert b"belongs to another user" in done.stderr
    assert not (project / "bait.txt").exists()


def test_the_hook_records_nothing_into_it(planted: tuple[Path, Path]):
    shared, project = planted
    before = _checkpoints(shared / ".snapstore")
    event = {"hook_event_name": "PostToolUse", "session_id": "s1", "tool_name": "Bash",
             "tool_use_id": "t1", "cwd": str(project), "tool_input": {"command": "true"}}
    env = subprocess_env(CLAUDE_PROJECT_DIR=str(project))
    done = subprocess.run(
        [sys.executable, "-m", "snapstore", "hook", "claude-code", "--no-service"],
        input=json.dumps(event).encode(), cwd=project, env=env, capture_output=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr  # a hook never blocks the agent
    assert _checkpoints(shared / ".snapstore") == before


def test_named_explicitly_it_is_used_and_said_so(planted: tuple[Path, Path]):
    shared, project = planted
    done = run_snapstore("--store", str(shared / ".snapstore"), "list", cwd=shared)
    assert done.returncode == 0, done.stderr
    assert b"a store of another user" in done.stderr and b"as named" in done.stderr


def test_an_own_store_below_is_still_found(planted: tuple[Path, Path]):
    _, project = planted
    Store.init(project).close()
    done = run_snapstore("snapshot", "-m", "mine", cwd=project)
    assert done.returncode == 0, done.stderr


def test_the_search_stops_at_a_file_system_boundary(tmp_path: Path):
    if os.geteuid() != 0:
        pytest.skip("needs root, to mount a tmpfs")
    Store.init(tmp_path).close()  # our own store, above the mount point
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        (mnt / "proj").mkdir()
        with pytest.raises(StoreNotFoundError, match="file-system boundary"):
            Store.find(mnt / "proj")
        Store.find(tmp_path).close()  # on this side of the boundary it is found
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
