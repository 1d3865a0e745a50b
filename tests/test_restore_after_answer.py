"""The service's work after a restore's answer, and what stays before it.

The files a restore replaced (set aside) are unlinked after the answer, before the service
reads the next request; a service SIGKILLed in between (the seam
``SNAPSTORE_TEST_KILL_SERVICE=after-answer``) leaves a finished restore, a sound store, and a
next checkpoint that records the tree exactly.  The record of the tree as the restore left it (a
hidden checkpoint: the next checkpoint's parent) is made before the answer: made after it, it
took in an edit made as soon as the answer was out, which the next checkpoint then lacked.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_service_once import client, local

from snapstore.service import daemon
from snapstore.store import Store
from snapstore.testing import build_tree, read_tree


@pytest.fixture
def project(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "proj"
    build_tree(root, {"a.txt": b"one\n", "b.txt": b"bee\n", "d/e.txt": b"deep\n"})
    with Store.init(root) as s:
        s.snapshot("first")
        (root / "a.txt").write_bytes(b"two\n")
        (root / "c.txt").write_bytes(b"new\n")
        (root / "d" / "e.txt").unlink()
        s.snapshot("second")
    yield root
    daemon.stop(str(root / ".snapstore"))


def _records_after(root: Path) -> list[str]:
    with Store.open(root) as s:
        return [c.message for c in s.checkpoints(include_safety=True) if c.message.startswith("after restore")]


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_service_killed_after_answering_a_restore_lost_nothing(project: Path):
    first = {b"a.txt": b"one\n", b"b.txt": b"bee\n", b"d/e.txt": b"deep\n"}
    before = read_tree(project)
    pid = int(daemon.start_detached(str(project / ".snapstore"), 60)["pid"])
    done = client("restore", "latest~1", cwd=project, SNAPSTORE_TEST_KILL_SERVICE="after-answer")
    assert done.returncode == 0, done.stderr  # answered: the kill came after the answer
    assert _gone(pid)
    assert read_tree(project) == first
    # The answer went out before the record after: the kill left none.
    assert len(_records_after(project)) == 1  # (made before the answer)
    assert local("verify", cwd=project).returncode == 0
    # The next checkpoint records the tree as it is (from the stat cache the restore left).
    assert local("snapshot", "-m", "next", "-q", cwd=project).returncode == 0
    with Store.open(project) as s:
        assert s.diff("latest") == []
        assert s.checkpoints()[0].message == "next"
    assert local("undo", "-q", cwd=project).returncode == 0
    assert read_tree(project) == before


def test_the_next_command_sees_the_record_after_a_restore(project: Path):
    daemon.start_detached(str(project / ".snapstore"), 60)
    assert client("restore", "latest~1", "-q", cwd=project).returncode == 0
    # (The service reads the next request only once the record is made.)
    assert client("list", cwd=project).returncode == 0
    assert len(_records_after(project)) == 1
    with Store.open(project) as s:
        newest = s.checkpoints(include_safety=True)[0]
        assert newest.message.startswith("after restore") and s.diff(newest.id) == []


def test_an_edit_right_after_a_restore_s_answer_belongs_to_the_next_checkpoint(project: Path):
    daemon.start_detached(str(project / ".snapstore"), 60)
    for n in range(3):
        assert client("restore", "latest~1" if n % 2 == 0 else "latest~2", "-q", cwd=project).returncode == 0
        (project / f"mine{n}.txt").write_bytes(b"the user's\n")  # as soon as the answer is out
        assert client("snapshot", "-m", f"mine {n}", "-q", cwd=project).returncode == 0
        with Store.open(project) as s:
            newest = s.checkpoints()[0]
            assert newest.message == f"mine {n}"
            added = [c.path for c in s.diff(newest.parent, newest.id)]
            assert f"mine{n}.txt".encode() in added, added


def test_a_plain_store_records_the_tree_after_a_restore_before_it_returns(project: Path):
    with Store.open(project) as s:
        s.restore("latest~1")
        newest = s.checkpoints(include_safety=True)[0]
        assert newest.message.startswith("after restore")
        assert os.path.exists(project / "d" / "e.txt")
