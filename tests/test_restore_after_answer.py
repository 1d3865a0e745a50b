"""The record of the tree as a restore left it (a hidden checkpoint: the next checkpoint's
parent).  In the service the tree is read for it before the restore's answer and the record
written after it.  Made wholly after the answer (as one change tried, to answer sooner), it took
in an edit made as soon as the answer was out, which the next checkpoint (an agent's tool call)
then lacked.
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


# The service writes the record after its answer, from the tree as it read it before the
# answer (ops.snapshot.pipeline.take_later): the tests below drive that order directly, then
# kill the service between the answer and the record.


def _restore_answered(s: Store, ref: str) -> list:  # type: ignore[type-arg]
    """A restore as the service runs it: the work left for after the answer, returned."""
    s.context.after_answer = []
    try:
        s.restore(ref)
        return s.context.after_answer
    finally:
        s.context.after_answer = None


@pytest.mark.parametrize("watch", [True, False])
def test_an_edit_between_the_answer_and_the_record_is_not_in_the_record(project: Path, watch: bool):
    with Store.open(project, watch=watch) as s:
        later = _restore_answered(s, "latest~1")
        assert len(later) == 1 and _records_after(project) == []  # nothing written yet
        (project / "b.txt").write_bytes(b"the user's edit\n")  # the answer is out: the user types
        (project / "mine.txt").write_bytes(b"the user's file\n")
        later[0]()
        records = [c for c in s.checkpoints(include_safety=True) if c.message.startswith("after restore")]
        assert len(records) == 1
        restored = s.checkpoints(include_safety=True)[1:]  # (the record's parent: the safety)
        assert restored
        record = records[0]
        assert {c.path for c in s.diff(s.resolve("latest~1").id, record.id)} == set()  # the target's tree
        s.snapshot("next")
        newest = s.checkpoints()[0]
        assert newest.parent == record.id
        assert {c.path for c in s.diff(newest.parent, newest.id)} == {b"b.txt", b"mine.txt"}


def test_a_record_left_for_later_is_dropped_when_another_writer_came_first(project: Path):
    with Store.open(project, watch=True) as s:
        later = _restore_answered(s, "latest~1")
        (project / "mine.txt").write_bytes(b"the user's file\n")
        with Store.open(project) as other:  # another process's writer, between answer and record
            other.snapshot("theirs")
        later[0]()
        assert _records_after(project) == []  # the newer record describes a newer tree
        s.snapshot("next")  # (the watcher's state was dropped: this one walks, and is right)
        with Store.open(project) as fresh:
            assert fresh.diff("latest") == []


def test_a_service_killed_after_a_restore_s_answer_leaves_a_store_that_goes_on(project: Path):
    from test_service_once import kill_at

    daemon.start_detached(str(project / ".snapstore"), 60)
    done = client("restore", "latest~1", "-q", cwd=project, **kill_at("after-answer"))
    assert done.returncode == 0, done.stderr  # the answer was out before the kill
    assert (project / "d" / "e.txt").read_bytes() == b"deep\n"
    assert _records_after(project) == []  # the record was left for after the answer
    (project / "mine.txt").write_bytes(b"the user's file\n")
    assert client("snapshot", "-m", "next", "-q", cwd=project).returncode == 0
    with Store.open(project) as s:
        assert s.diff("latest") == []
        newest = s.checkpoints()[0]
        assert newest.message == "next"
        assert b"mine.txt" in {c.path for c in s.diff(newest.parent, newest.id)}
