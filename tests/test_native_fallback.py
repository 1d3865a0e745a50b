"""A fallback from the fast path is never silent (issue 40 req 2): a client the service refuses
(another installation or version) is recorded, hinted once per cause, and ``serve --status``
says which clients answered and why one stepped aside.  Real processes, a real service, the
native client compiled here (those tests are skipped without a C compiler)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.service import daemon, fallback, native
from snapstore.store import Store
from snapstore.testing import build_tree

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: the native client cannot be built")

#: The Python client of "another installation": its version tag differs from the service's.
OTHER_PYTHON = (
    "import sys\n"
    "from snapstore.service import protocol\n"
    "protocol.version_tag = lambda: '0.0.0/0/another-installation'\n"
    "from snapstore.service.client import run\n"
    "run()\n"
)


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("native")
    python_client = where / "snapstore-py"
    python_client.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'from snapstore.service.client import run; run()' \"$@\"\n")
    python_client.chmod(0o755)
    if native.compiler() is not None:
        native.build(str(where / "snapstore"), str(python_client))
        native.build(str(where / "snapstore-other"), str(python_client), tag="0.0.0/0/another-installation")
    return {"native": where / "snapstore", "other": where / "snapstore-other", "python": python_client}


@pytest.fixture
def project(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "proj"
    build_tree(root, {"a.txt": b"alpha\n"})
    with Store.init(root) as s:
        s.snapshot("first")
    daemon.start_detached(str(root / ".snapstore"), 60)
    yield root
    daemon.stop(str(root / ".snapstore"))


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=subprocess_env(), timeout=120)


def _status(root: Path) -> dict:
    done = _run([sys.executable, "-m", "snapstore", "serve", "--status"], root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_cc
def test_a_native_client_of_another_version_is_reported_and_hinted_once(clients: dict[str, Path], project: Path):
    first = _run([str(clients["other"]), "list"], project)
    again = _run([str(clients["other"]), "list"], project)
    assert first.returncode == again.returncode == 0
    assert first.stdout == again.stdout and "first" in first.stdout  # the command itself worked
    assert first.stderr.count("snapstore: note:") == 1 and "make setup" in first.stderr
    assert again.stderr == ""  # once per cause
    status = _status(project)
    record = status["fallbacks"]["native-client-refused"]
    assert record["count"] == 2 and "native client" in record["why"]
    assert status["refused"]["version"]["count"] == 2
    assert status["refused"]["version"]["last_client"] == "native"
    assert status["clients"] == {"python": 2}  # the Python client then answered, through the service
    assert status["last_client"] == "python"


@needs_cc
def test_the_native_client_of_this_version_answers_and_says_so(clients: dict[str, Path], project: Path):
    done = _run([str(clients["native"]), "list"], project)
    assert done.returncode == 0 and done.stderr == ""
    status = _status(project)
    assert status["clients"] == {"native": 1} and status["last_client"] == "native"
    assert status["fallbacks"] == {} and status["refused"] == {}
    assert status["version"] == status["this_version"] and "warning" not in status


def test_a_python_client_of_another_installation_is_reported_and_hinted_once(project: Path):
    argv = [sys.executable, "-c", OTHER_PYTHON, "list"]
    first, again = _run(argv, project), _run(argv, project)
    assert first.returncode == again.returncode == 0 and "first" in first.stdout  # ran in-process
    assert first.stderr.count("snapstore: note:") == 1 and "serve --stop" in first.stderr
    assert again.stderr == ""
    status = _status(project)
    assert status["fallbacks"]["python-client-refused"]["count"] == 2
    assert status["refused"]["version"]["last_client"] == "python"
    assert status["requests"] == 0  # nothing reached the service


def test_another_installation_sees_and_stops_the_service(project: Path):
    status = json.loads(_run([sys.executable, "-c", OTHER_PYTHON, "serve", "--status"], project).stdout)
    assert status["running"] is True and "another snapstore installation" in status["warning"]
    stopped = _run([sys.executable, "-c", OTHER_PYTHON, "serve", "--stop"], project)
    assert stopped.stdout.strip() == "stopped", stopped.stderr
    assert daemon.status(str(project / ".snapstore")) is None


def test_the_record_is_bounded_and_never_followed(tmp_path: Path):
    store = tmp_path / "s"
    store.mkdir()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"native-client-refused": {"count": 5}}))
    (store / fallback.FILE).symlink_to(tmp_path / "elsewhere.json")
    assert fallback.read(str(store)) == {}  # a planted link is not read
    (store / fallback.FILE).unlink()
    (store / fallback.FILE).write_text("x" * (fallback.MAX_BYTES + 10))
    assert fallback.read(str(store)) == {}
    hint = fallback.note(str(store), "python-client-refused")
    assert hint is not None and fallback.note(str(store), "python-client-refused") is None
    assert fallback.read(str(store))["python-client-refused"]["count"] == 2
