"""The service's answer (issue 40: the fixed cost of a command through the service): the exit
code goes out once the command's output is flushed and its outcome recorded, and the service
takes its own directory and environment back after it, off the answer's path; a request is
served only for the store directory itself (the same directory, not the same name), and only
while the service's own store path and root still name its store and tree."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapstore.records import requests
from snapstore.service.server import Service
from snapstore.store import Store
from snapstore.testing import build_tree


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Service, Path]]:
    tree = tmp_path / "t"
    build_tree(tree, {"a.txt": b"alpha\n", "src/b.py": b"x = 1\n"})
    with Store.init(tree) as s:
        s.snapshot("base")
    svc = Service(str(tree / ".snapstore"), idle_timeout=60)
    try:
        yield svc, tree
    finally:
        svc.store.close()
        os.close(svc._dir_fd)


def test_the_answer_follows_the_output_and_the_record_and_precedes_the_service_s_own_directory(
    service: tuple[Service, Path], monkeypatch: pytest.MonkeyPatch
):
    svc, tree = service
    monkeypatch.delenv("SNAPSTORE_ANSWER_PROBE", raising=False)
    here = os.getcwd()
    (tree / "src" / "b.py").write_bytes(b"x = 2\n")
    rid, seen = os.urandom(16), []
    out, err = io.StringIO(), io.StringIO()

    def answer(code: int) -> None:
        with svc.store.backend.read() as view:
            row = requests.find(view, rid)
        seen.append((code, row, os.getcwd(), os.environ.get("SNAPSTORE_ANSWER_PROBE"), out.getvalue()))

    code = svc._invoke(["snapshot", "-m", "second", "--json"], str(tree / "src"), {"SNAPSTORE_ANSWER_PROBE": "1"},
                       None, out, err, "snapshot", rid, answer=answer)
    assert code == 0, err.getvalue()
    [(answered, row, cwd, probe, printed)] = seen
    assert answered == 0
    assert row is not None and "checkpoint" in row  # recorded before the answer
    assert '"message": "second"' in printed  # the output before the exit code
    assert (cwd, probe) == (str(tree / "src"), "1")  # still the client's: taken back after it
    assert os.getcwd() == here and "SNAPSTORE_ANSWER_PROBE" not in os.environ


def test_a_command_without_a_checkpoint_has_its_exit_code_recorded_before_the_answer(service: tuple[Service, Path]):
    svc, tree = service
    rid, rows = os.urandom(16), []

    def answer(code: int) -> None:
        with svc.store.backend.read() as view:
            rows.append((code, requests.find(view, rid)))

    code = svc._invoke(["snapshot", "--skip-unchanged", "-q"], str(tree), {}, None, io.StringIO(), io.StringIO(),
                       "snapshot", rid, answer=answer)
    [(answered, row)] = rows
    assert answered == code == 0
    assert row is not None and row.get("exit") == 0


def test_each_request_without_stdin_reads_an_empty_one_even_after_a_command_closed_it(service: tuple[Service, Path]):
    svc, tree = service
    first = svc._no_stdin()
    assert first.read() == "" and svc._no_stdin() is first  # kept across requests
    first.close()  # (as a command might)
    again = svc._no_stdin()
    assert again is not first and not again.closed and again.read() == ""


def test_a_request_is_served_for_the_store_directory_itself_not_for_its_former_name(service: tuple[Service, Path]):
    svc, tree = service
    store = tree / ".snapstore"
    assert svc._is_mine(str(store))
    (tree.parent / "link").symlink_to(store)
    assert svc._is_mine(str(tree.parent / "link"))  # another name of the same directory
    assert not svc._is_mine(str(tree)) and not svc._is_mine("") and not svc._is_mine("nul\0byte")
    # Moved away and another directory made under its name: that one is another store, and
    # the moved one is refused too (the service's paths, its lock's among them, name the new one).
    store.rename(tree / "moved")
    store.mkdir()
    assert not svc._is_mine(str(store))
    assert not svc._is_mine(str(tree / "moved"))


def test_a_request_through_a_moved_tree_is_refused(service: tuple[Service, Path]):
    """A tree moved away (another tree made at its old name, say): a request naming the moved
    store is not served against the service's root, which now names the other tree."""
    svc, tree = service
    moved = tree.parent / "old"
    tree.rename(moved)
    assert not svc._is_mine(str(moved / ".snapstore"))
    build_tree(tree, {"a.txt": b"precious\n"})
    assert not svc._is_mine(str(moved / ".snapstore"))
