"""A service that acknowledges a command and then goes silent (issue 38, class 11): stopped
(SIGSTOP), wedged or starved.  Neither client hangs: a running command sends a heartbeat frame
every protocol.HEARTBEAT seconds, and a client that receives nothing for protocol.SILENCE seconds
takes the service for stopped.  A read-only command that printed nothing then runs locally; any
other is never run a second time and gets one line and exit 12.  The server here is a fake one
that acknowledges and then says nothing, on the store's real socket."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import assert_one_line_error, subprocess_env

from snapstore.service import native, protocol
from snapstore.service.server.heartbeat import Beating
from snapstore.store import Store
from snapstore.testing import build_tree

#: Accepts on the store's socket (argv[1]); acknowledges each request with its pid, waits for
#: the client's "go", then never says anything again.
#: A fake service's start: its socket bound at argv[1] (0600), then "ready" on stdout.
LISTEN = r"""
import os, socket, struct, sys, threading, time
from snapstore.service import protocol
path = sys.argv[1]
os.umask(0o177)
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(8)
print("ready", flush=True)
"""

WEDGED = LISTEN + r"""
held = []
def serve(conn):
    try:
        protocol.recv_frame(conn)
        protocol.send_frame(conn, b"a", str(os.getpid()).encode())
        protocol.recv_frame(conn)
    except OSError:
        pass
    held.append(conn)  # open and silent
while True:
    conn, _ = s.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

PYTHON_CLIENT = [sys.executable, "-c", "from snapstore.service.client import run; run()"]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    build_tree(root, {"a.txt": b"alpha\n"})
    with Store.init(root) as s:
        s.snapshot("first")
    return root


@pytest.fixture
def wedged(project: Path) -> Iterator[subprocess.Popen[str]]:
    server = subprocess.Popen([sys.executable, "-c", WEDGED, str(project / ".snapstore" / protocol.SOCKET_NAME)],
                              env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdout.readline().strip() == "ready"
    yield server
    server.kill()
    server.wait()


def native_client(tmp_path: Path) -> list[str]:
    if native.compiler() is None:
        pytest.skip("no C compiler (cc): the native client cannot be built")
    python_client = tmp_path / "snapstore-py"
    python_client.write_text(f"#!/bin/sh\nexec {' '.join(PYTHON_CLIENT[:2])} '{PYTHON_CLIENT[2]}' \"$@\"\n")
    python_client.chmod(0o755)
    native.build(str(tmp_path / "snapstore"), str(python_client))
    return [str(tmp_path / "snapstore")]


@pytest.fixture(params=["native", "python"])
def client(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return native_client(tmp_path_factory.mktemp("native")) if request.param == "native" else PYTHON_CLIENT


def run(client: list[str], *args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[bytes], float]:
    start = time.monotonic()
    done = subprocess.run([*client, *args], cwd=cwd, capture_output=True, env=subprocess_env(), timeout=60)
    return done, time.monotonic() - start


def test_a_read_only_command_runs_locally_when_the_service_goes_silent(client: list[str], project: Path, wedged: object):
    expected = subprocess.run([sys.executable, "-m", "snapstore", "list"], cwd=project, capture_output=True, env=subprocess_env())
    done, took = run(client, "list", cwd=project)
    assert done.returncode == 0 and done.stdout == expected.stdout and done.stderr == b"", done
    assert took < protocol.SILENCE + 8, took


def test_a_writing_command_is_not_run_again_and_says_so_when_the_service_goes_silent(client: list[str], project: Path, wedged: object):
    (project / "a.txt").write_bytes(b"changed\n")
    done, took = run(client, "snapshot", "-m", "after", cwd=project)
    assert done.returncode == 12, done
    assert_one_line_error(done.stderr)
    assert b"stopped answering in the middle of snapshot and still runs" in done.stderr
    assert took < protocol.SILENCE + 8, took
    with Store.open(project) as store:
        assert [c.message for c in store.checkpoints()] == ["first"]  # not run a second time here


def test_a_running_command_sends_heartbeats_while_it_prints_nothing():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.settimeout(protocol.SILENCE)
        with Beating(ours) as frames:
            time.sleep(protocol.HEARTBEAT * 2.6)  # a command printing nothing
            frames.send(b"x", b"0")
        got = []
        while True:
            frame = protocol.recv_frame(theirs)
            assert frame is not None
            got.append(frame)
            if frame[0] == b"x":
                break
    assert got[-1] == (b"x", b"0") and got[:-1] == [(b"h", b"")] * (len(got) - 1) and len(got) - 1 >= 2, got


def test_one_heartbeat_thread_serves_every_command_and_none_beats_after_its_block():
    """Starting and joining a thread per request cost every checkpoint a hand-off: one
    thread of the process sends the heartbeats of whichever command runs."""
    seen = []
    for _ in range(3):
        ours, theirs = socket.socketpair()
        with ours, theirs:
            with Beating(ours) as frames:
                seen.append([t for t in threading.enumerate() if t.name == "heartbeat"])
                frames.send(b"x", b"0")
    assert all(len(s) == 1 for s in seen) and seen[0][0] is seen[1][0] is seen[2][0], seen
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.settimeout(protocol.HEARTBEAT * 2)
        with Beating(ours) as frames:
            frames.send(b"x", b"0")
        time.sleep(protocol.HEARTBEAT * 1.5)  # silent since, but the command's block is left
        ours.close()
        assert protocol.recv_frame(theirs) == (b"x", b"0")
        assert protocol.recv_frame(theirs) is None  # no heartbeat after the block


def test_the_native_client_waits_as_long_as_the_python_client():
    import re

    source = (Path(__file__).resolve().parents[1] / "snapstore/service/cclient/snapstore.c").read_text()
    found = re.search(r"#define SILENCE_MS (\d+)", source)
    assert found is not None and int(found.group(1)) == int(protocol.SILENCE * 1000)


#: Acknowledges, waits for "go", then announces an output frame longer than protocol.MAX_FRAME,
#: sends a few bytes of it and closes.
OVERSIZED = LISTEN + r"""
while True:
    conn, _ = s.accept()
    try:
        protocol.recv_frame(conn)
        protocol.send_frame(conn, b"a", str(os.getpid()).encode())
        protocol.recv_frame(conn)
        conn.sendall(b"o" + struct.pack(">I", protocol.MAX_FRAME + 1) + b"FORGED OUTPUT\n" * 6000)
    except OSError:
        pass
    conn.close()
"""


def test_a_frame_over_the_limit_is_refused_and_never_printed(client: list[str], project: Path):
    """A frame header that claims more than MAX_FRAME bytes is a broken or hostile service: the
    client relays none of it and, for a read-only command that printed nothing, runs it locally
    (the review's mutation M9, the C client's length check turned off, survived every test)."""
    server = subprocess.Popen([sys.executable, "-c", OVERSIZED, str(project / ".snapstore" / protocol.SOCKET_NAME)],
                              env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        expected = subprocess.run([sys.executable, "-m", "snapstore", "list"], cwd=project, capture_output=True, env=subprocess_env())
        done, _ = run(client, "list", cwd=project)
    finally:
        server.kill()
        server.wait()
    assert b"FORGED" not in done.stdout + done.stderr
    assert done.returncode == 0 and done.stdout == expected.stdout, done
