"""The CLI without a service (issue 40): a plain ``snapshot`` run in-process starts the store's
service for the next commands (``service.autostart``, on by default); the opt-outs (the
environment variable, ``CI``, the configuration) are respected; a service SIGKILLed in the
middle of a snapshot never fails the command: it is taken in-process, once.  Real processes, a
real service, the native client when a compiler is at hand."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import subprocess_env, wait_for_service

from snapstore.service import daemon, native
from snapstore.store import Store
from snapstore.testing import build_tree

CLIENT = [sys.executable, "-c", "from snapstore.service.client import run; run()"]


def env_of(**extra: str) -> dict[str, str]:
    """The test environment with the autostart defaults a user has (no opt-out, no CI)."""
    env = subprocess_env(**extra)
    if "SNAPSTORE_AUTOSTART" not in extra:
        env.pop("SNAPSTORE_AUTOSTART", None)
    if "CI" not in extra:
        env.pop("CI", None)
    return env


def snap(*args: str, cwd: Path, argv0: list[str] = CLIENT, **extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv0 + list(args), cwd=cwd, capture_output=True, env=env_of(**extra), timeout=120)


@pytest.fixture
def project(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "proj"
    build_tree(root, {"a.txt": b"alpha\n", "src/b.py": b"print(1)\n"})
    Store.init(root).close()
    yield root
    daemon.stop(str(root / ".snapstore"))


wait_for = wait_for_service


def checkpoints(root: Path) -> list[str]:
    with Store.open(root) as s:
        return [cp.message for cp in s.checkpoints()]


def test_the_first_plain_snapshot_starts_the_service_for_the_next(project: Path):
    store_dir = str(project / ".snapstore")
    assert daemon.status(store_dir) is None
    first = snap("snapshot", "-q", "-m", "one", cwd=project)
    assert first.returncode == 0, first.stderr
    info = wait_for(store_dir, 30)
    assert info is not None and info["tree"] == str(project)
    (project / "a.txt").write_bytes(b"alpha\nbeta\n")
    second = snap("snapshot", "-q", "-m", "two", cwd=project)
    assert second.returncode == 0, second.stderr
    again = daemon.status(store_dir)
    assert again is not None and again["pid"] == info["pid"] and int(again["requests"]) >= 1  # served by it
    assert checkpoints(project) == ["two", "one"]


def test_an_in_process_restore_starts_it_too(project: Path):
    with Store.open(project) as s:
        s.snapshot("one")
        (project / "a.txt").write_bytes(b"changed\n")
        s.snapshot("two")
    done = snap("restore", "latest~1", "-q", cwd=project)
    assert done.returncode == 0, done.stderr
    assert (project / "a.txt").read_bytes() == b"alpha\n"
    assert wait_for(str(project / ".snapstore"), 30) is not None


def test_the_first_service_a_command_starts_is_said_once(project: Path):
    """A process left running is never a surprise: the command that starts the store's first
    service says so on stderr (how to stop it, how to turn it off), once; ``-q`` says nothing."""
    store_dir = str(project / ".snapstore")
    quiet = snap("snapshot", "-q", "-m", "quiet", cwd=project)
    assert quiet.returncode == 0 and quiet.stderr == b"", quiet.stderr
    assert wait_for(store_dir, 30) is not None
    daemon.stop(store_dir)
    first = snap("snapshot", "-m", "one", cwd=project)
    assert first.returncode == 0, first.stderr
    notes = [line for line in first.stderr.decode().splitlines() if line.startswith("snapstore: note:")]
    assert len(notes) == 1 and "background service" in notes[0], first.stderr
    assert "serve --stop" in notes[0] and "SNAPSTORE_AUTOSTART=0" in notes[0]
    assert wait_for(store_dir, 30) is not None
    daemon.stop(store_dir)
    (project / "a.txt").write_bytes(b"again\n")
    again = snap("snapshot", "-m", "two", cwd=project)  # starts a service again: not said again
    assert again.returncode == 0 and b"note:" not in again.stderr, again.stderr
    assert wait_for(store_dir, 30) is not None


@pytest.mark.parametrize("how", ["env", "ci", "config"])
def test_each_opt_out_keeps_the_cli_without_a_service(project: Path, how: str):
    store_dir = str(project / ".snapstore")
    extra = {"env": {"SNAPSTORE_AUTOSTART": "0"}, "ci": {"CI": "true"}, "config": {}}[how]
    if how == "config":
        done = snap("config", "service.autostart", "off", cwd=project)
        assert done.returncode == 0 and b"false" in done.stdout
    for n in range(2):
        assert snap("snapshot", "-q", "-m", f"s{n}", cwd=project, **extra).returncode == 0
    assert wait_for(store_dir, 2.0) is None  # (a started service answers well within this)
    assert checkpoints(project) == ["s1", "s0"]


def test_the_environment_wins_over_ci_and_the_configuration(project: Path):
    assert snap("config", "service.autostart", "false", cwd=project).returncode == 0
    assert snap("snapshot", "-q", cwd=project, SNAPSTORE_AUTOSTART="1", CI="true").returncode == 0
    assert wait_for(str(project / ".snapstore"), 30) is not None


def _native(tmp_path: Path) -> list[str]:
    if native.compiler() is None:
        pytest.skip("no C compiler (cc): the native client cannot be built")
    tmp_path.mkdir(exist_ok=True)
    fallback = tmp_path / "snapstore-py"
    fallback.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'from snapstore.service.client import run; run()' \"$@\"\n")
    fallback.chmod(0o755)
    native.build(str(tmp_path / "snapstore"), str(fallback))
    return [str(tmp_path / "snapstore")]


@pytest.mark.parametrize("client", ["python", "native"])
def test_a_service_killed_mid_snapshot_never_fails_the_snapshot(project: Path, tmp_path: Path, client: str):
    """SIGKILLed as the checkpoint was about to commit (the service's crash seam): the client
    finds nothing recorded, says so, takes the snapshot itself (once), and the next command
    finds a service again (started by that in-process snapshot)."""
    argv0 = CLIENT if client == "python" else _native(tmp_path / "bin")
    store_dir = str(project / ".snapstore")
    killed = daemon.start_detached(store_dir, 60)
    (project / "a.txt").write_bytes(b"changed\n")
    started = time.monotonic()
    done = snap("snapshot", "-m", "taken", cwd=project, argv0=argv0, SNAPSTORE_TEST_KILL_SERVICE="before-checkpoint")
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    assert b"the service stopped before the snapshot took effect: taking it in this process" in done.stderr
    assert checkpoints(project) == ["taken"]
    with Store.open(project) as s:
        assert s.read_bytes("latest", "a.txt") == b"changed\n"
    info = wait_for(store_dir, 30)
    assert info is not None and info["pid"] != killed["pid"]
    assert not os.path.exists(f"/proc/{killed['pid']}/status") or b"Z" in open(f"/proc/{killed['pid']}/stat", "rb").read().split(b") ")[1][:1]


def test_a_service_killed_mid_restore_is_still_reported_not_rerun(project: Path):
    """Only a snapshot (which changed nothing) is taken again: a restore keeps the rule that a
    command the service accepted is never run twice."""
    with Store.open(project) as s:
        s.snapshot("one")
    (project / "a.txt").write_bytes(b"changed\n")
    daemon.start_detached(str(project / ".snapstore"), 60)
    done = snap("restore", "latest", "-q", cwd=project, SNAPSTORE_TEST_KILL_SERVICE="before-safety")
    assert done.returncode == 12, done.stderr
    assert b"taking it in this process" not in done.stderr
    assert (project / "a.txt").read_bytes() == b"changed\n"
