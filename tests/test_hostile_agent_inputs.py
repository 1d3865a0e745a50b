"""Text that is not valid Unicode, inputs that never end, and symlinks out of the project, on
the agents' paths (issue 22 classes 7, 8 and 11): everything is accepted and stored (with
U+FFFD where it must be, and said so), nothing blocks or reads without bound, and a project
command never writes through a symlink that leaves the project."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.errors import UnsafePathError, UsageError
from snapstore.integrations import claude_code, claude_transcript
from snapstore.store import Store

CUT = "cut \ud83d emoji"  # half of a surrogate pair, as a cut emoji leaves it


def _snap(cwd: Path, *args: str | bytes, stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable.encode(), b"-m", b"snapstore", *[a.encode() if isinstance(a, str) else a for a in args]],
        cwd=cwd, input=stdin, capture_output=True, env=subprocess_env(**env), timeout=60,
    )


# -- class 7: any text --------------------------------------------------------------------------


def test_command_line_text_that_is_not_utf8_is_stored_with_replacement(project: Path):
    done = _snap(project, "snapshot", "-m", b"msg \xf0\x9f", "--task", b"t\xff", "--meta", b"k=v\xfe")
    assert done.returncode == 0, done.stderr
    assert b"not valid Unicode" in done.stderr  # said so
    with Store.open(project) as store:
        cp = store.checkpoints()[0]
    assert cp.message.startswith("msg ") and "\ufffd" in cp.message and cp.task == "t\ufffd"
    assert cp.metadata["k"] == "v\ufffd"


def test_a_conversation_with_a_cut_emoji_and_raw_bytes_is_stored(project: Path):
    conv = project.parent / "conv.json"
    conv.write_bytes(b'[{"role": "user", "content": "half \\ud83d"}, {"role": "user", "content": "raw \xff"}, {"ok": 1}]')
    done = _snap(project, "snapshot", "-m", "c", "--conversation", str(conv))
    assert done.returncode == 0, done.stderr
    assert b"2 conversation message(s)" in done.stderr
    with Store.open(project) as store:
        messages = store.conversation("latest")
    assert messages == [{"role": "user", "content": "half \ufffd"}, {"role": "user", "content": "raw \ufffd"}, {"ok": 1}]


def test_the_library_replaces_lone_surrogates_everywhere(project: Path):
    with Store.open(project) as store:
        (project / "a.txt").write_text("b\n")
        cp = store.snapshot(CUT, task=CUT, metadata={CUT: [CUT]}, conversation=[{"text": CUT}])
        assert any("not valid Unicode" in w for w in cp.warnings)
        assert store.conversation(cp.id) == [{"text": "cut \ufffd emoji"}]
        assert cp.metadata == {"cut \ufffd emoji": ["cut \ufffd emoji"]}


def _transcript(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"\n".join(lines) + b"\n")


def test_one_bad_transcript_line_costs_no_checkpoint_of_the_session(project: Path):
    transcript = project.parent / "t.jsonl"
    _transcript(transcript, [b'{"role":"user","content":"hi"}', b'{"role":"assistant","content":"half \\ud83d"}',
                             b'{"role":"user","content":"raw \xff\xfe"}'])
    for prompt in ("first prompt", "second prompt"):
        event = {"hook_event_name": "UserPromptSubmit", "session_id": "s1", "prompt": prompt,
                 "transcript_path": str(transcript), "cwd": str(project)}
        out = claude_code.run(json.dumps(event), str(project), lambda: Store.open(project), start_service=False)
        assert out == ""
    with Store.open(project) as store:
        recorded = [c for c in store.checkpoints(task="s1")]
        assert [c.message for c in recorded] == ["second prompt", "first prompt"]
        assert len(store.conversation(recorded[0].id) or []) == 3
    assert "not valid Unicode" in (project / ".snapstore" / claude_code.LOG_NAME).read_text()


def test_a_hook_event_that_is_not_utf8_is_recorded(project: Path):
    event = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s2", "prompt": "PROMPT",
                        "cwd": str(project)}).encode().replace(b"PROMPT", b"fix \xff this")
    done = _snap(project, "hook", "claude-code", "--no-service", stdin=event, CLAUDE_PROJECT_DIR=str(project))
    assert done.returncode == 0, done.stderr
    with Store.open(project) as store:
        assert store.checkpoints(task="s2")[0].message == "fix \ufffd this"


def test_mcp_answers_a_request_holding_a_lone_surrogate(project: Path):
    pytest.importorskip("mcp")
    proc = subprocess.Popen([sys.executable, "-m", "snapstore", "mcp"], cwd=project, env=subprocess_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None

    def send(line: bytes) -> None:
        proc.stdin.write(line + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]

    def answer(want: int) -> dict[str, object]:
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], 20)
            assert ready, f"no answer to request {want}: the agent's call would hang"
            doc = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
            if doc.get("id") == want:
                return doc  # type: ignore[no-any-return]

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode())
        answer(1)
        send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        send(b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"checkpoint_create",'
             b'"arguments":{"message":"cut \\ud83d emoji","task":"raw \xff"}}}')
        reply = answer(2)
        assert "error" not in reply and not reply["result"]["isError"], reply  # type: ignore[index]
    finally:
        proc.kill()
        proc.wait(10)
    with Store.open(project) as store:
        cp = store.checkpoints()[0]
    assert (cp.message, cp.task) == ("cut \ufffd emoji", "raw \ufffd")


# -- class 8: inputs that never end --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_transcript_that_is_no_regular_file_is_skipped_at_once(project: Path, kind: str):
    if kind == "fifo":
        source = project.parent / "t.fifo"
        os.mkfifo(source)
    else:
        source = Path("/dev/zero")
    warnings: list[str] = []
    assert claude_code.read_transcript(str(source), warnings) is None
    assert warnings and "not a regular file" in warnings[0]


def test_a_huge_transcript_is_left_out_and_said_so(project: Path, monkeypatch: pytest.MonkeyPatch):
    transcript = project.parent / "big.jsonl"
    _transcript(transcript, [b'{"n": %d}' % i for i in range(1000)])
    monkeypatch.setattr(claude_transcript, "MAX_TRANSCRIPT_BYTES", 1000)
    warnings: list[str] = []
    assert claude_code.read_transcript(str(transcript), warnings) is None
    assert "larger than" in warnings[0]


def test_integrate_refuses_a_settings_file_that_is_a_fifo_or_huge(tmp_path: Path):
    from snapstore.integrations import settings

    fifo = tmp_path / "settings.json"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match="not a regular file"):
        settings.load(str(fifo))
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(settings.MAX_SETTINGS_BYTES + 1)  # sparse: no disk used
    with pytest.raises(UsageError, match="larger than"):
        settings.load(str(huge))


def test_mcp_file_at_refuses_a_file_larger_than_it_returns(project: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("mcp")
    # Through the tool function itself (the cap, not the transport, is what is checked).
    from snapstore.integrations import mcp_server

    (project / "big.bin").write_bytes(b"x" * 4096)
    with Store.open(project) as store:
        store.snapshot("big")
    monkeypatch.setattr(mcp_server, "MAX_FILE_AT_BYTES", 1024)
    monkeypatch.chdir(project)
    server = mcp_server.build_server(str(project))
    import anyio

    async def call() -> object:
        return await server.call_tool("file_at", {"ref": "latest", "path": "big.bin"})

    with pytest.raises(Exception, match="larger than"):
        anyio.run(call)


def test_revert_settles_a_huge_text_file_as_a_whole(project: Path, monkeypatch: pytest.MonkeyPatch):
    from snapstore.errors import ConflictError
    from snapstore.ops.revert import planner

    monkeypatch.setattr(planner, "MAX_MERGE_BYTES", 100)
    big = project / "big.txt"
    big.write_text("".join(f"line {i}\n" for i in range(100)))
    with Store.open(project) as store:
        store.snapshot("base")
        big.write_text(big.read_text().replace("line 5\n", "agent\n"))
        cp = store.snapshot("agent")
        big.write_text(big.read_text().replace("line 90\n", "user\n"))
        with pytest.raises(ConflictError, match="not merged line by line"):
            store.revert(cp.id)


# -- class 11: a symlink out of the project -----------------------------------------------------


@pytest.mark.parametrize("target", ["dir", "file"])
def test_integrate_never_writes_through_a_symlink_leaving_the_project(tmp_path: Path, target: str):
    project, home = tmp_path / "proj", tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    global_settings = home / ".claude" / "settings.json"
    global_settings.write_text('{"theme": "mine"}\n')
    project.mkdir()
    if target == "dir":  # a downloaded project with .claude -> ~/.claude
        os.symlink(home / ".claude", project / ".claude")
    else:
        (project / ".claude").mkdir()
        os.symlink(global_settings, project / ".claude" / "settings.json")
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("CLAUDE_")}
    env["HOME"] = str(home)
    done = subprocess.run([sys.executable, "-m", "snapstore", "integrate", "claude-code"], cwd=project, env=env,
                          capture_output=True, timeout=60)
    assert done.returncode == UnsafePathError.exit_code, done.stderr
    assert b"leads out of the project" in done.stderr
    assert global_settings.read_text() == '{"theme": "mine"}\n'
    assert not (home / ".claude" / "settings.json.bak").exists()
    # The user's own scope is theirs to change (their dotfiles may well be symlinks).
    done = subprocess.run([sys.executable, "-m", "snapstore", "integrate", "claude-code", "--scope", "user"],
                          cwd=project, env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
