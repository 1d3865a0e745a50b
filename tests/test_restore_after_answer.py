"""The record of the tree as a restore left it (a hidden checkpoint: the next checkpoint's
parent) is made before the restore's answer, in the service too.  Made after the answer (as one
change of this session tried, to answer sooner), it took in an edit made as soon as the answer
was out, which the next checkpoint (an agent's tool call) then lacked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_service_once import client

from snapstore.service import daemon
from snapstore.store import Store
from snapstore.testing import build_tree


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
