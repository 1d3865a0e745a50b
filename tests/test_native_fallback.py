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
from test_native_client import clients  # noqa: F401 - the fixture: this and another version's client
from test_service_silent import LISTEN

from snapstore.service import daemon, fallback, native, protocol

needs_cc = pytest.mark.skipif(native.compiler() is None, reason="no C compiler: the native client cannot be built")

#: The Python client of "another installation": its version tag differs from the service's.
OTHER_PYTHON = (
    "import sys\n"
    "from snapstore.service import protocol\n"
    "protocol.version_tag = lambda: '0.0.0/0/another-installation'\n"
    "from snapstore.service.client import run\n"
    "run()\n"
)


@pytest.fixture
def served(project: Path):  # type: ignore[no-untyped-def]
    """conftest's project (one checkpoint, "first") with its service running."""
    daemon.start_detached(str(project / ".snapstore"), 60)
    yield project
    daemon.stop(str(project / ".snapstore"))


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=subprocess_env(), timeout=120)


def _status(root: Path) -> dict:
    done = _run([sys.executable, "-m", "snapstore", "serve", "--status"], root)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_cc
def test_a_native_client_of_another_version_is_reported_and_hinted_once(clients: dict[str, Path], served: Path):  # noqa: F811
    first = _run([str(clients["other"]), "list"], served)
    again = _run([str(clients["other"]), "list"], served)
    assert first.returncode == again.returncode == 0
    assert first.stdout == again.stdout and "first" in first.stdout  # the command itself worked
    assert first.stderr.count("snapstore: note:") == 1 and "make setup" in first.stderr
    assert again.stderr == ""  # once per cause
    status = _status(served)
    record = status["fallbacks"]["native-client-refused"]
    assert record["count"] == 2 and "native client" in record["why"]
    assert status["refused"]["version"]["count"] == 2
    assert status["refused"]["version"]["last_client"] == "native"
    assert status["clients"] == {"python": 2}  # the Python client then answered, through the service
    assert status["last_client"] == "python"


@needs_cc
def test_the_native_client_of_this_version_answers_and_says_so(clients: dict[str, Path], served: Path):  # noqa: F811
    done = _run([str(clients["native"]), "list"], served)
    assert done.returncode == 0 and done.stderr == ""
    status = _status(served)
    assert status["clients"] == {"native": 1} and status["last_client"] == "native"
    assert status["fallbacks"] == {} and status["refused"] == {}
    assert status["version"] == status["this_version"] and "warning" not in status


def test_a_python_client_of_another_installation_is_reported_and_hinted_once(served: Path):
    argv = [sys.executable, "-c", OTHER_PYTHON, "list"]
    first, again = _run(argv, served), _run(argv, served)
    assert first.returncode == again.returncode == 0 and "first" in first.stdout  # ran in-process
    assert first.stderr.count("snapstore: note:") == 1 and "serve --stop" in first.stderr
    assert again.stderr == ""
    status = _status(served)
    assert status["fallbacks"]["python-client-refused"]["count"] == 2
    assert status["refused"]["version"]["last_client"] == "python"
    assert status["requests"] == 0  # nothing reached the service


def test_another_installation_sees_and_stops_the_service(served: Path):
    status = json.loads(_run([sys.executable, "-c", OTHER_PYTHON, "serve", "--status"], served).stdout)
    assert status["running"] is True and "another snapstore installation" in status["warning"]
    stopped = _run([sys.executable, "-c", OTHER_PYTHON, "serve", "--stop"], served)
    assert stopped.stdout.strip() == "stopped", stopped.stderr
    assert daemon.status(str(served / ".snapstore")) is None


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


#: An older service: it cannot read this version's request and closes without a word.
MUTE = LISTEN + r"""
while True:
    conn, _ = s.accept()
    try:
        conn.recv(65536)
    finally:
        conn.close()
"""


def test_a_service_that_closes_without_answering_is_reported_and_hinted_once(project: Path):
    sock = project / ".snapstore" / protocol.SOCKET_NAME
    server = subprocess.Popen([sys.executable, "-c", MUTE, str(sock)], env=subprocess_env(), stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        argv = [sys.executable, "-c", "from snapstore.service.client import run; run()", "list"]
        first, again = _run(argv, project), _run(argv, project)
    finally:
        server.kill()
        server.wait()
    assert first.returncode == again.returncode == 0 and "first" in first.stdout  # ran in-process
    assert first.stderr.count("snapstore: note:") == 1 and "without answering" in first.stderr
    assert again.stderr == ""
    assert fallback.read(str(project / ".snapstore"))["service-did-not-answer"]["count"] == 2
