"""The record of the tree as a restore left it (a hidden checkpoint: the next checkpoint's
parent).  In the service the tree is read for it before the restore's answer and the record
written after it.  Made wholly after the answer (as one change tried, to answer sooner), it took
in an edit made as soon as the answer was out, which the next checkpoint (an agent's tool call)
then lacked.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from test_service_once import client

from snapstore.errors import LockedError
from snapstore.service import daemon
from snapstore.service.server import Service
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


def test_no_other_writer_comes_between_the_answer_and_the_record(project: Path):
    # (a gc in between would sweep the chunks the record's reads stored and it then names)
    with Store.open(project, watch=True) as s:
        later = _restore_answered(s, "latest~1")
        with Store.open(project) as other:
            with pytest.raises(LockedError):
                with other._lock.held(timeout=0):
                    pass
            later[0]()
            with other._lock.held(timeout=0):  # (free once the record is written)
                pass
        assert len(_records_after(project)) == 1


@pytest.mark.parametrize("watch", [True, False])
def test_a_checkpoint_taken_before_the_record_is_written_is_the_restored_tree(project: Path, watch: bool):
    """A plugin's after_restore hook checkpoints between the record's two steps: it must not
    patch the state the record read (it walks), and the record then stands aside."""
    with Store.open(project, watch=watch) as s:
        s.hooks.register("after_restore", lambda store, **kw: store.snapshot("by the hook"))
        later = _restore_answered(s, "latest~1")
        later[0]()
        hooked = [c for c in s.checkpoints(include_safety=True) if c.message == "by the hook"]
        assert len(hooked) == 1
        (project / "b.txt").write_bytes(b"the user's edit\n")
        s.snapshot("next")
    with Store.open(project) as fresh:
        assert fresh.diff(hooked[0].id, "latest~1") == [] or fresh.diff("latest") == []
        assert [c.path for c in fresh.diff(hooked[0].id, "latest")] == [b"b.txt"]
        assert fresh.diff("latest") == []


@pytest.fixture
def service(project: Path):  # type: ignore[no-untyped-def]
    """The service's request runner, in this process (no socket)."""
    svc = Service(str(project / ".snapstore"), idle_timeout=60)
    try:
        yield svc
    finally:
        svc.store.close()
        os.close(svc._dir_fd)


def _run(svc: Service, root: Path, *argv: str, answer=None) -> int:  # type: ignore[no-untyped-def]
    err = io.StringIO()
    code = svc._invoke(list(argv), str(root), {}, None, io.StringIO(), err, argv[0], os.urandom(16),
                       answer=answer or (lambda code: None))
    assert code == 0, err.getvalue()
    return code


def _gone(code: int) -> None:
    raise BrokenPipeError(32, "Broken pipe")  # (frames.send to a client that went away)


def test_a_client_gone_before_the_restore_s_answer_still_gets_the_tree_recorded(service: Service, project: Path):
    with pytest.raises(OSError):
        _run(service, project, "restore", "latest~1", "-q", answer=_gone)
    assert service.store.context.after_answer is None  # the record's work was not left behind
    assert len(_records_after(project)) == 1
    (project / "b.txt").write_bytes(b"the user's edit\n")
    _run(service, project, "snapshot", "-m", "next", "-q")
    with Store.open(project) as fresh:
        assert fresh.diff("latest") == []
        newest = fresh.checkpoints()[0]
        assert [c.path for c in fresh.diff(newest.parent, newest.id)] == [b"b.txt"]
    _run(service, project, "restore", "latest~1", "-q")  # back to "second"
    assert (project / "a.txt").read_bytes() == b"two\n"


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
