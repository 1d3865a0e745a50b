"""The resident service: transparent (same bytes, same exit codes), safe, and self-limiting.

Real processes throughout: the console script (``snapstore.service.client``) run as a child
process, a real service started with ``serve --detach``, killed with SIGKILL where it matters.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import subprocess_env, wait_for_service

from snapstore.service import daemon, protocol
from snapstore.store import Store
from snapstore.testing import build_tree

CLIENT = [sys.executable, "-c", "from snapstore.service.client import run; run()"]


def snap(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run the console script's code path (client first, CLI as the fallback)."""
    return subprocess.run(
        CLIENT + list(args), cwd=cwd, capture_output=True, env=env or subprocess_env(), timeout=120
    )


def local(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """The same command, never through a service (python -m snapstore is always in-process)."""
    return subprocess.run(
        [sys.executable, "-m", "snapstore", *args], cwd=cwd, capture_output=True, env=subprocess_env(), timeout=120
    )


@pytest.fixture
def project(tmp_path: Path):
    root = tmp_path / "proj"
    build_tree(root, {"a.txt": b"alpha\n", "src/b.py": b"print(1)\n", "src/c.bin": bytes(range(256))})
    with Store.init(root) as s:
        s.snapshot("first", task="t1")
        (root / "a.txt").write_bytes(b"alpha\nbeta\n")
        s.snapshot("second", task="t1", tags=["v2"])
    store_dir = str(root / ".snapstore")
    info = daemon.start_detached(store_dir, 60)
    assert info["tree"] == str(root)
    try:
        yield root
    finally:
        daemon.stop(store_dir)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, an exited child not yet reaped by this test, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def requests_served(root: Path) -> int:
    info = daemon.status(str(root / ".snapstore"))
    assert info is not None
    return int(info["requests"])


READ_COMMANDS = [
    ["list"],
    ["list", "--json"],
    ["show", "latest"],
    ["show", "v2", "--json"],
    ["cat", "latest~1", "a.txt"],
    ["diff", "latest~1", "latest", "--stat"],
    ["diff", "latest~1", "latest", "-p"],
    ["diff", "--json"],
    ["log", "a.txt"],
    ["show", "no-such-ref"],
    ["cat", "latest", "missing"],
    ["verify", "-q"],
    ["stats", "--json"],
    ["config"],
    ["list", "--no-such-option"],
]


def test_read_commands_give_the_same_bytes_and_codes_with_and_without_the_service(project: Path):
    before = requests_served(project)
    for argv in READ_COMMANDS:
        via, here = snap(*argv, cwd=project), local(*argv, cwd=project)
        if argv[0] == "stats":  # the on-disk size may differ by a page between two runs
            a, b = json.loads(via.stdout), json.loads(here.stdout)
            a.pop("disk_size"), b.pop("disk_size")
            assert a == b
        else:
            assert via.stdout == here.stdout, argv
        assert (via.returncode, via.stderr) == (here.returncode, here.stderr), argv
    assert requests_served(project) - before == len(READ_COMMANDS)


def test_writes_through_the_service_are_the_store_s_writes(project: Path):
    (project / "src" / "b.py").write_bytes(b"print(2)\n")
    r = snap("snapshot", "-m", "third", "--json", cwd=project / "src")
    assert r.returncode == 0, r.stderr
    cp = json.loads(r.stdout)
    assert cp["message"] == "third"
    r = snap("restore", "latest~2", "-q", cwd=project)
    assert r.returncode == 0, r.stderr
    assert (project / "a.txt").read_bytes() == b"alpha\n"
    assert snap("undo", "-q", cwd=project).returncode == 0
    assert (project / "src" / "b.py").read_bytes() == b"print(2)\n"
    with Store.open(project) as s:
        assert [c.message for c in s.checkpoints()][:3] == ["third", "second", "first"]
    assert requests_served(project) >= 3


def test_socket_is_owner_only_and_a_foreign_version_is_not_served(project: Path):
    sock = project / ".snapstore" / protocol.SOCKET_NAME
    assert stat.S_IMODE(os.lstat(sock).st_mode) == 0o600
    with protocol.connect(str(sock), 2) as conn:
        protocol.send_frame(conn, b"r", protocol.encode_request({"v": "0.0.0/0/elsewhere", "argv": ["list"]}))
        frame = protocol.recv_frame(conn)
    assert frame is not None and frame[0] == b"n"


def test_a_killed_service_leaves_the_store_whole_and_clients_fall_back(project: Path):
    info = daemon.status(str(project / ".snapstore"))
    assert info is not None
    os.kill(info["pid"], signal.SIGKILL)
    time.sleep(0.1)
    assert (project / ".snapstore" / protocol.SOCKET_NAME).exists()  # stale, nobody listening
    (project / "a.txt").write_bytes(b"after the kill\n")
    r = snap("snapshot", "-m", "after", cwd=project)
    assert r.returncode == 0, r.stderr
    assert snap("verify", "-q", cwd=project).returncode == 0
    with Store.open(project) as s:
        assert s.read_bytes("latest", "a.txt") == b"after the kill\n"
    # A new service replaces the stale socket.
    daemon.start_detached(str(project / ".snapstore"), 60)
    assert requests_served(project) == 0


def test_two_clients_at_once(project: Path):
    children = [
        subprocess.Popen(CLIENT + ["snapshot", "-m", f"c{i}"], cwd=project, env=subprocess_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for i in range(2)
    ]
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
    with Store.open(project) as s:
        assert {"c0", "c1"} <= {c.message for c in s.checkpoints()}
    assert requests_served(project) == 2


def test_a_service_exits_when_its_tree_is_removed(project: Path, tmp_path: Path):
    info = daemon.status(str(project / ".snapstore"))
    assert info is not None
    moved = tmp_path / "moved"
    project.rename(moved)
    deadline = time.monotonic() + 10
    while alive(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(info["pid"]), "the service kept running after its tree moved"
    assert not (moved / ".snapstore" / protocol.SOCKET_NAME).exists()


def test_idle_service_exits(tmp_path: Path):
    root = tmp_path / "p"
    build_tree(root, {"x": b"x"})
    Store.init(root).close()
    info = daemon.start_detached(str(root / ".snapstore"), 0.5)
    deadline = time.monotonic() + 10
    while daemon.status(str(root / ".snapstore")) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert daemon.status(str(root / ".snapstore")) is None
    deadline = time.monotonic() + 5
    while alive(info["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(info["pid"])


def test_client_version_flag_reads_no_package_metadata():
    r = subprocess.run(CLIENT + ["--version"], capture_output=True, env=subprocess_env(), timeout=60)
    from snapstore import __version__

    assert r.stdout == f"snapstore {__version__}\n".encode()
    code = (
        "import sys\nsys.argv=['snapstore','list']\n"
        "import snapstore.service.client as c\n"
        "c.try_service(['list'])\n"
        "heavy=[m for m in ('click','lmdb','zstandard','msgpack','blake3','json','typing','socket') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=subprocess_env(), timeout=60, cwd="/")
    assert r.stdout.strip() == b"", r.stdout


_wait_for_service = wait_for_service


@pytest.mark.parametrize("form", [["snapshot", "-q"], ["snapshot", "-m", "-by-click", "--json"]])  # (lean declines a value starting with -)
def test_service_autostart_starts_one_after_an_in_process_snapshot(tmp_path: Path, form: list[str]):
    """`service.autostart` (on by default; tests/test_autostart.py tries the default and the
    opt-outs): a snapshot run in-process starts a service in the background, for the next
    commands; off, none is started.  Both the click-free form and the click form of the
    command do it."""
    root = tmp_path / "auto"
    build_tree(root, {"a.txt": b"a\n"})
    Store.init(root).close()
    store_dir = str(root / ".snapstore")
    env = {k: v for k, v in subprocess_env().items() if k not in ("SNAPSTORE_AUTOSTART", "CI")}
    assert local("config", "service.autostart", "off", cwd=root).returncode == 0
    assert snap(*form, cwd=root, env=env).returncode == 0
    assert daemon.status(store_dir) is None  # off
    assert local("config", "service.autostart", "on", cwd=root).returncode == 0
    try:
        r = snap(*form, cwd=root, env=env)
        assert r.returncode == 0, r.stderr
        info = _wait_for_service(store_dir)
        assert info is not None and info["tree"] == str(root)
        assert snap("snapshot", "-q", cwd=root).returncode == 0
        assert requests_served(root) >= 1  # the next command went through it
    finally:
        daemon.stop(store_dir)
