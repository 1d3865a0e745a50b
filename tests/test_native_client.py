"""The native thin client (issue 24 req 1): the same bytes and exit codes as in-process, through
a real service; the Python client takes over (stdin included) whenever the service cannot
serve; an answer lost after the service accepted a command is never run twice.  The client is
compiled here with the system compiler (skipped without one)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.service import daemon, native
from snapstore.store import Store
from snapstore.testing import build_tree

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler (cc): the native client cannot be built")

READ_COMMANDS = [
    ["list"], ["list", "--json"], ["show", "latest"], ["show", "v2", "--json"], ["cat", "latest~1", "a.txt"],
    ["diff", "latest~1", "latest", "--stat"], ["diff", "latest~1", "latest", "-p"], ["diff", "--json"],
    ["log", "a.txt"], ["show", "no-such-ref"], ["cat", "latest", "missing"], ["verify", "-q"], ["config"],
    ["list", "--no-such-option"], ["-C", "src", "list", "-n", "1"], ["--lock-timeout=5", "list"],
]


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The native client, one built for another version, and the Python client they fall back to."""
    where = tmp_path_factory.mktemp("native")
    python_client = where / "snapstore-py"
    # (It notes each time it runs, for the tests that check who ran a command.)
    python_client.write_text(
        "#!/bin/sh\n[ -n \"$FALLBACK_LOG\" ] && echo ran >> \"$FALLBACK_LOG\"\n"
        f"exec {sys.executable} -c 'from snapstore.service.client import run; run()' \"$@\"\n"
    )
    python_client.chmod(0o755)
    native.build(str(where / "snapstore"), str(python_client))
    native.build(str(where / "snapstore-other"), str(python_client), tag="0.0.0/0/another-installation")
    return {"native": where / "snapstore", "other": where / "snapstore-other", "python": python_client}


@pytest.fixture
def project(tmp_path: Path):  # type: ignore[no-untyped-def]
    root = tmp_path / "proj"
    build_tree(root, {"a.txt": b"alpha\n", "src/b.py": b"print(1)\n", "src/c.bin": bytes(range(256))})
    with Store.init(root) as s:
        s.snapshot("first", task="t1")
        (root / "a.txt").write_bytes(b"alpha\nbeta\n")
        s.snapshot("second", task="t1", tags=["v2"])
    yield root
    daemon.stop(str(root / ".snapstore"))


def run(binary: Path, *args: str, cwd: Path, stdin: bytes | None = None, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(binary), *args], cwd=cwd, input=stdin, capture_output=True, env=subprocess_env(**env), timeout=120)


def local(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "snapstore", *args], cwd=cwd, capture_output=True, env=subprocess_env(), timeout=120)


def served(root: Path) -> int:
    info = daemon.status(str(root / ".snapstore"))
    assert info is not None
    return int(info["requests"])


def _interpreter(binary: Path) -> bool | None:
    """Whether an ELF binary names a dynamic loader (PT_INTERP); None when it is no 64-bit
    little-endian ELF (another system: nothing to check)."""
    import struct

    data = binary.read_bytes()
    if data[:6] != b"\x7fELF\x02\x01":
        return None
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return any(struct.unpack_from("<I", data, phoff + i * phentsize)[0] == 3 for i in range(phnum))


def _links_statically(tmp: Path) -> bool:
    (tmp / "probe.c").write_text("int main(void) { return 0; }\n")
    cc = native.compiler()
    assert cc is not None
    return subprocess.run([cc, "-static", "-o", str(tmp / "probe"), str(tmp / "probe.c")], capture_output=True).returncode == 0


def test_the_client_is_linked_statically_where_the_c_library_allows(clients: dict[str, Path], tmp_path: Path):
    """Each command starts the client: without a dynamic loader to run first where it can."""
    if not _links_statically(tmp_path) or _interpreter(clients["native"]) is None:
        pytest.skip("no static C library (or no ELF) here")
    assert _interpreter(clients["native"]) is False
    # A compiler that cannot link statically still gives a (dynamic) client that works.
    cc = tmp_path / "cc-no-static"
    cc.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = -static ] && exit 1; done\nexec {native.compiler()} "$@"\n')
    cc.chmod(0o755)
    native.build(str(tmp_path / "snapstore"), str(clients["python"]), cc=str(cc))
    assert _interpreter(tmp_path / "snapstore") is True
    done = run(tmp_path / "snapstore", "--version", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith(b"snapstore"), done


def test_the_same_bytes_and_codes_as_in_process_through_the_service(clients: dict[str, Path], project: Path):
    daemon.start_detached(str(project / ".snapstore"), 60)
    before = served(project)
    log = project.parent / "fallback.log"
    for argv in READ_COMMANDS:
        via, here = run(clients["native"], *argv, cwd=project, FALLBACK_LOG=str(log)), local(*argv, cwd=project)
        assert (via.stdout, via.returncode, via.stderr) == (here.stdout, here.returncode, here.stderr), argv
    assert served(project) - before == len(READ_COMMANDS)  # every one went through the service
    assert not log.exists()  # ... from the native client itself
    # A name that is not UTF-8 reaches the command as the Python client would pass it.
    odd = os.fsdecode(b"caf\xe9.txt")
    via, here = run(clients["native"], "cat", "latest", odd, cwd=project), local("cat", "latest", odd, cwd=project)
    assert (via.stdout, via.returncode, via.stderr) == (here.stdout, here.returncode, here.stderr)


def test_writes_and_a_hook_go_through_the_service(clients: dict[str, Path], project: Path):
    daemon.start_detached(str(project / ".snapstore"), 60)
    before = served(project)
    (project / "src" / "b.py").write_bytes(b"print(2)\n")
    done = run(clients["native"], "snapshot", "-m", "third", "--json", cwd=project / "src")
    assert done.returncode == 0 and json.loads(done.stdout)["message"] == "third", done.stderr
    assert run(clients["native"], "restore", "latest~2", "-q", cwd=project).returncode == 0
    assert (project / "a.txt").read_bytes() == b"alpha\n"
    assert run(clients["native"], "undo", "-q", cwd=project).returncode == 0
    assert (project / "src" / "b.py").read_bytes() == b"print(2)\n"
    event = {"hook_event_name": "PostToolUse", "session_id": "n-1", "tool_name": "Bash", "tool_use_id": "t",
             "tool_input": {"command": "touch d.txt"}, "transcript_path": "", "cwd": str(project)}
    (project / "d.txt").write_bytes(b"")
    hooked = run(clients["native"], "hook", "claude-code", cwd=project, stdin=json.dumps(event).encode(), CLAUDE_PROJECT_DIR=str(project))
    assert hooked.returncode == 0 and hooked.stdout == b"", hooked.stderr
    assert served(project) - before == 4
    with Store.open(project) as s:
        assert [c.message for c in s.checkpoints(task="n-1")] == ["after Bash: touch d.txt"]


def test_the_python_client_takes_over_when_the_service_cannot_serve(clients: dict[str, Path], project: Path):
    # No service at all: the same output, in-process.
    via, here = run(clients["native"], "list", cwd=project), local("list", cwd=project)
    assert (via.stdout, via.returncode) == (here.stdout, here.returncode)
    # A service of another version answers "not here"; the hook's stdin, already read, is
    # replayed to the Python client.
    daemon.start_detached(str(project / ".snapstore"), 60)
    before = served(project)
    event = {"hook_event_name": "PostToolUse", "session_id": "n-2", "tool_name": "Bash", "tool_use_id": "t",
             "tool_input": {"command": "touch e.txt"}, "transcript_path": "", "cwd": str(project)}
    (project / "e.txt").write_bytes(b"")
    log = project.parent / "fallback.log"
    hooked = run(clients["other"], "hook", "claude-code", "--no-service", cwd=project, stdin=json.dumps(event).encode(),
                 CLAUDE_PROJECT_DIR=str(project), FALLBACK_LOG=str(log))
    assert hooked.returncode == 0, hooked.stderr
    assert log.read_text() == "ran\n"  # the native client handed over
    # Refused by the service as another version's; the Python client (this version) then took
    # it there itself, with the stdin the native client had read and handed over.
    assert served(project) == before + 1
    with Store.open(project) as s:
        assert [c.message for c in s.checkpoints(task="n-2")] == ["after Bash: touch e.txt"]
    # Commands the service never runs, and --version / --help, are the Python client's.
    for argv in (["--version"], ["--help"], ["init"], ["list", "-"]):
        via, here = run(clients["native"], *argv, cwd=project), local(*argv, cwd=project)
        assert (via.stdout, via.returncode) == (here.stdout, here.returncode), argv


def test_an_answer_lost_after_acceptance_is_never_run_twice(clients: dict[str, Path], project: Path):
    daemon.start_detached(str(project / ".snapstore"), 60)
    (project / "a.txt").write_bytes(b"changed\n")
    done = run(clients["native"], "snapshot", "-m", "lost", cwd=project, SNAPSTORE_TEST_KILL_SERVICE="after-command")
    with Store.open(project) as s:
        messages = [c.message for c in s.checkpoints()]
    assert messages.count("lost") == 1, (messages, done.stderr)  # recorded once, by the service
    assert done.returncode == 0 and b"recorded" in done.stderr, done.stderr


def test_a_hook_event_larger_than_a_frame_reaches_the_python_client_whole(clients: dict[str, Path], project: Path):
    daemon.start_detached(str(project / ".snapstore"), 60)
    event = {"hook_event_name": "PostToolUse", "session_id": "n-big", "tool_name": "Bash", "tool_use_id": "t",
             "tool_input": {"command": "touch big.txt", "padding": "x" * (70 << 20)}, "transcript_path": "",
             "cwd": str(project)}
    (project / "big.txt").write_bytes(b"")
    log = project.parent / "fallback.log"
    done = run(clients["native"], "hook", "claude-code", cwd=project, stdin=json.dumps(event).encode(),
               CLAUDE_PROJECT_DIR=str(project), FALLBACK_LOG=str(log))
    assert done.returncode == 0 and done.stdout == b"", done.stdout[-500:]
    assert log.read_text() == "ran\n"  # handed over, with every byte of the event
    with Store.open(project) as s:
        assert [c.message for c in s.checkpoints(task="n-big")] == ["after Bash: touch big.txt"]


def test_the_native_and_python_clients_keep_the_same_commands_local():
    """A command the Python client runs in-process (never through the service) must be local
    in the C client too, or the two would run it in different processes."""
    import re

    from snapstore.service import client

    source = (Path(__file__).resolve().parents[1] / "snapstore/service/cclient/snapstore.c").read_text()
    listed = re.search(r"LOCAL_COMMANDS\[\] = \{(.*?)\};", source, re.S)
    assert listed is not None
    assert set(re.findall(r'"([a-z-]+)"', listed.group(1))) == set(client.LOCAL_COMMANDS)


@pytest.mark.parametrize("client", ["native", "python"])
def test_an_endless_hook_stdin_is_read_to_a_bound_not_to_its_end(clients: dict[str, Path], project: Path, client: str):
    """A hook's stdin is the agent's (or a hostile payload's): a client that reads it to its end
    never ends on an endless one, and fills memory on a huge one.  Each client keeps at most
    protocol.MAX_STDIN + 1 bytes; the hook refuses the event as over its limits and fails open."""
    from snapstore.service import protocol

    daemon.start_detached(str(project / ".snapstore"), 60)
    feeder = subprocess.Popen(["yes", "x" * 4000], stdout=subprocess.PIPE)  # never ends
    try:
        done = subprocess.run(
            [str(clients[client]), "hook", "claude-code"], cwd=project, stdin=feeder.stdout, capture_output=True,
            env=subprocess_env(CLAUDE_PROJECT_DIR=str(project), XDG_STATE_HOME=str(project.parent / "state")),
            timeout=90,
        )
    finally:
        feeder.kill()
        feeder.wait()
    assert done.returncode == 0, done.stderr  # a hook never blocks the agent's tool call
    assert "over snapstore's limits" in json.loads(done.stdout)["systemMessage"]
    assert "over snapstore's limits" in (project / ".snapstore" / "hook.log").read_text()
    assert protocol.MAX_STDIN == 128 << 20


#: Environments that name the C locale (or C.UTF-8) for LC_CTYPE: LC_ALL, then LC_CTYPE, then LANG.
C_LOCALES = [{}, {"LC_ALL": "C"}, {"LANG": "POSIX"}, {"LANG": "C.UTF-8"}, {"LC_CTYPE": "C.utf8", "LANG": "xx_YY.UTF-8"},
             {"LC_ALL": "", "LANG": "C"}]


@pytest.mark.parametrize("names", C_LOCALES, ids=lambda names: ",".join(f"{k}={v}" for k, v in names.items()) or "unset")
def test_the_c_locale_settles_the_output_encoding_without_the_locale_files(clients: dict[str, Path], project: Path,
                                                                           names: dict[str, str]):
    """The client starts for every command: when the environment names the C locale (or
    C.UTF-8), it opens none of the locale database's files, and prints what the Python client
    prints (a name that is not UTF-8 included)."""
    strace = shutil.which("strace")
    if strace is None or subprocess.run([strace, "-o", os.devnull, "true"], capture_output=True).returncode != 0:
        pytest.skip("no working strace here")
    daemon.start_detached(str(project / ".snapstore"), 60)
    env = subprocess_env(FALLBACK_LOG=str(project.parent / "fallback.log"))
    for name in ("LC_ALL", "LC_CTYPE", "LANG", "PYTHONIOENCODING", "PYTHONUTF8"):
        env.pop(name, None)
    env.update(names)
    odd = os.fsdecode(b"caf\xe9.txt")
    trace = project.parent / "trace"
    for argv in (["list"], ["cat", "latest", odd]):
        via = subprocess.run([strace, "-f", "-qq", "-e", "trace=%file", "-o", str(trace), str(clients["native"]), *argv],
                             cwd=project, capture_output=True, env=env, timeout=120)
        here = subprocess.run([sys.executable, "-m", "snapstore", *argv], cwd=project, capture_output=True, env=env, timeout=120)
        assert (via.stdout, via.returncode, via.stderr) == (here.stdout, here.returncode, here.stderr), argv
        opened = trace.read_text(errors="replace")
        assert not re.search(r"/locale/|locale-archive|locale\.alias|gconv", opened), opened
    assert not (project.parent / "fallback.log").exists()  # the native client answered, through the service


def test_a_hook_event_the_service_takes_is_kept_in_memory_and_replayed_whole_when_it_is_not(clients: dict[str, Path],
                                                                                              project: Path):
    """Every tool call of an agent runs the client with its event on stdin: read into memory, it
    goes to the service without a temporary file; only when the Python client takes over (here: a
    service of another version refuses it) is the event replayed to it, every byte."""
    strace = shutil.which("strace")
    if strace is None or subprocess.run([strace, "-o", os.devnull, "true"], capture_output=True).returncode != 0:
        pytest.skip("no working strace here")
    daemon.start_detached(str(project / ".snapstore"), 60)
    before, trace, log = served(project), project.parent / "trace", project.parent / "fallback.log"
    for client, session in (("native", "n-mem"), ("other", "n-replayed")):
        event = {"hook_event_name": "PostToolUse", "session_id": session, "tool_name": "Bash", "tool_use_id": "t",
                 "tool_input": {"command": f"touch {session}.txt"}, "transcript_path": "", "cwd": str(project)}
        (project / f"{session}.txt").write_bytes(b"")
        done = subprocess.run([strace, "-qq", "-e", "trace=openat,open", "-o", str(trace), str(clients[client]), "hook",
                               "claude-code"], cwd=project, input=json.dumps(event).encode(), capture_output=True,
                              env=subprocess_env(CLAUDE_PROJECT_DIR=str(project), FALLBACK_LOG=str(log)), timeout=120)
        assert done.returncode == 0 and done.stdout == b"", done.stderr
        if client == "native":
            assert not re.search(r"O_TMPFILE|/tmpf", trace.read_text()), trace.read_text()  # (glibc's tmpfile)
            assert not log.exists()
    assert log.read_text() == "ran\n"  # the other version's client handed over, once
    assert served(project) == before + 2  # (the native one, then the Python client: refused first)
    with Store.open(project) as s:
        assert [c.message for c in s.checkpoints(task="n-mem")] == ["after Bash: touch n-mem.txt"]
        assert [c.message for c in s.checkpoints(task="n-replayed")] == ["after Bash: touch n-replayed.txt"]


def test_an_event_is_replayed_through_a_pipe_where_no_temporary_file_can_be_made(clients: dict[str, Path],
                                                                                   project: Path):
    """The Python client takes over an event the native client read (a service of another
    version refuses it) with ``$TMPDIR`` unusable: the event, larger than a pipe's buffer, still
    reaches it whole through a pipe (a child process writes what the buffer did not take)."""
    daemon.start_detached(str(project / ".snapstore"), 60)
    event = {"hook_event_name": "PostToolUse", "session_id": "n-pipe", "tool_name": "Bash", "tool_use_id": "t",
             "tool_input": {"command": "touch piped.txt", "padding": "x" * (1 << 20)}, "transcript_path": "",
             "cwd": str(project)}
    (project / "piped.txt").write_bytes(b"")
    log = project.parent / "fallback.log"
    done = run(clients["other"], "hook", "claude-code", cwd=project, stdin=json.dumps(event).encode(),
               CLAUDE_PROJECT_DIR=str(project), FALLBACK_LOG=str(log), TMPDIR=str(project.parent / "no-such-dir"))
    assert done.returncode == 0 and done.stdout == b"", done.stderr[-500:]
    assert log.read_text() == "ran\n"
    with Store.open(project) as s:
        assert [c.message for c in s.checkpoints(task="n-pipe")] == ["after Bash: touch piped.txt"]
