"""``snapstore hook claude-code``: realistic event sequences replayed through the real process.

The events come from tests/fixtures/claude_code/session.json (written from the hook contract:
every event carries session_id, hook_event_name, transcript_path and cwd).  Between PreToolUse
and PostToolUse the test does what Claude Code would: it performs the tool call (writes the
file, replaces the string, runs the shell command).  Each event goes to the console script's
first module (``snapstore.service.client.run``) in a new process, with the event on stdin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from snapstore import Store
from snapstore.integrations.claude_code import read_transcript
from snapstore.service import daemon
from snapstore.storage import lmdb_generations

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
CLIENT = "from snapstore.service.client import run; run()"


def hook(project: Path, event: dict[str, Any], *, service: bool = False, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "CLAUDE_"))}
    full_env["CLAUDE_PROJECT_DIR"] = str(project)
    if not service:
        full_env["SNAPSTORE_NO_SERVICE"] = "1"
    full_env.update(env or {})
    sub = project / "src" if (project / "src").is_dir() else project  # cwd follows `cd`
    return subprocess.run(
        [sys.executable, "-c", CLIENT, "hook", "claude-code"],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        cwd=sub,
        env=full_env,
        timeout=60,
    )


def fill(value: Any, project: Path) -> Any:
    if isinstance(value, str):
        return value.replace("{project}", str(project))
    if isinstance(value, dict):
        return {k: fill(v, project) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, project) for v in value]
    return value


def run_tool(project: Path, event: dict[str, Any]) -> None:
    """Do what Claude Code does for the tool call announced by ``event``."""
    tool, args = event["tool_name"], event["tool_input"]
    if tool == "Write":
        Path(args["file_path"]).write_text(args["content"])
    elif tool == "Edit":
        path = Path(args["file_path"])
        text = path.read_text()
        assert text.count(args["old_string"]) == 1
        path.write_text(text.replace(args["old_string"], args["new_string"]))
    elif tool == "Bash":
        subprocess.run(["bash", "-c", args["command"]], cwd=project, check=True)
    else:
        raise AssertionError(tool)


def replay(project: Path, tmp: Path, session: dict[str, Any], *, service: bool = False) -> list[subprocess.CompletedProcess[str]]:
    for rel, content in session["initial_files"].items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(content)
    transcript = tmp / "transcript.jsonl"
    transcript.write_text("")
    results, last_event = [], None
    for step in session["steps"]:
        if "transcript" in step:
            with transcript.open("a") as f:
                f.write("".join(line + "\n" for line in step["transcript"]))
                f.write(step.get("transcript_partial", ""))
        if "transcript_complete" in step:
            with transcript.open("a") as f:
                f.write(step["transcript_complete"] + "\n")
        if "user_edit" in step:
            (project / step["user_edit"]["path"]).write_text(step["user_edit"]["content"])
        if step.get("run_tool"):
            assert last_event is not None
            run_tool(project, last_event)
        if "event" in step:
            event = fill(step["event"], project)
            event.update(session_id=session["session_id"], transcript_path=str(transcript), cwd=str(project / "src"))
            result = hook(project, event, service=service)
            results.append(result)
            last_event = event
    return results


def check_session(project: Path, session: dict[str, Any], results: list[subprocess.CompletedProcess[str]]) -> None:
    for r in results:
        assert r.returncode == 0, r.stderr
        assert r.stdout == "", r.stdout  # nothing to say when all is well
    with Store.open(project) as store:
        cps = list(reversed(store.checkpoints()))
        got = []
        for cp in cps:
            meta = cp.metadata
            row = {"message": cp.message, "actor": meta.get("actor"), "changed": sorted(c.to_json()["path"] for c in store.changes(cp.id))}
            if "tool_name" in meta:
                row.update(tool_name=meta["tool_name"], tool_use_id=meta["tool_use_id"])
            if cp.conversation is not None:
                row["conversation"] = len(store.conversation(cp.id) or [])
            assert cp.task == session["session_id"]
            assert meta["session_id"] == session["session_id"]
            got.append(row)
        assert got == session["expected"]


@pytest.fixture
def session() -> dict[str, Any]:
    return json.loads((FIXTURES / "session.json").read_text())


def test_session_replay_records_every_change_with_attribution(tmp_path: Path, session: dict[str, Any]) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    results = replay(project, tmp_path, session)
    check_session(project, session, results)
    assert lmdb_generations.is_store(str(project / ".snapstore"))  # created on first use, in the project
    # The Bash call's sed and rm are the tool's: going back to "before Bash" undoes both.
    assert not (project / "notes.txt").exists()
    with Store.open(project) as store:
        before_bash = next(c for c in store.checkpoints() if c.message.startswith("before Bash"))
        store.restore(before_bash.id)
    assert (project / "notes.txt").read_text() == "old notes: delete me\n"
    assert "def greet(name)" in (project / "src" / "app.py").read_text()
    assert "# louder" in (project / "src" / "util.py").read_text()  # the user's edit stays


def test_session_replay_through_the_service(tmp_path: Path, session: dict[str, Any]) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    try:
        results = replay(project, tmp_path, session, service=True)
        info = daemon.status(str(project / ".snapstore"))
        assert info is not None, "the first event should have started the service"
        assert info["requests"] >= 5  # the later events went through it, stdin and all
    finally:
        daemon.stop(str(project / ".snapstore"))
    check_session(project, session, results)


def event(project: Path, name: str, transcript: Path | None = None, **fields: Any) -> dict[str, Any]:
    return {"session_id": "sess-1", "hook_event_name": name, "transcript_path": str(transcript or project / "none.jsonl"), "cwd": str(project), **fields}


def test_failure_is_logged_and_reported_once_per_session_never_exit_2(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("a\n")
    Store.init(project).close()
    (project / "a.txt").write_text("changed\n")
    pre = event(project, "PreToolUse", tool_name="Bash", tool_input={"command": "true"}, tool_use_id="t1")
    holder = Store.open(project)
    env = {"SNAPSTORE_LOCK_TIMEOUT": "0.2"}
    try:
        with holder._lock.held():  # another writer holds the store: snapshots fail with LockedError
            prompt = hook(project, event(project, "UserPromptSubmit", prompt="hi"), env=env)
            first = hook(project, pre, env=env)
            second = hook(project, pre, env=env)
            other = hook(project, {**pre, "session_id": "sess-2"}, env=env)
    finally:
        holder.close()
    for r in (prompt, first, second, other):
        assert r.returncode == 0, r.stderr
    assert prompt.stdout == ""  # UserPromptSubmit output would reach the model
    message = json.loads(first.stdout)["systemMessage"]
    assert "locked" in message and "hook.log" in message
    assert second.stdout == ""  # once per session
    assert "systemMessage" in json.loads(other.stdout)
    log = (project / ".snapstore" / "hook.log").read_text()
    assert log.count("locked") == 4


def test_garbage_on_stdin_exits_0_with_a_message(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", CLIENT, "hook", "claude-code"],
        input="{not json",
        capture_output=True,
        text=True,
        cwd=project,
        env={**os.environ, "CLAUDE_PROJECT_DIR": str(project), "SNAPSTORE_NO_SERVICE": "1"},
        timeout=60,
    )
    assert result.returncode == 0
    assert "systemMessage" in json.loads(result.stdout)


def test_session_start_and_unchanged_pre_tool_use_record_nothing(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("a\n")
    start = hook(project, event(project, "SessionStart", source="startup"))
    assert start.returncode == 0 and start.stdout == ""
    assert not (project / ".snapstore").exists()  # nothing to record: no store made either
    hook(project, event(project, "UserPromptSubmit", prompt="go"))
    for _ in range(2):
        r = hook(project, event(project, "PreToolUse", tool_name="Write", tool_input={"file_path": str(project / "b.txt"), "content": "b"}, tool_use_id="t"))
        assert r.returncode == 0 and r.stdout == ""
    with Store.open(project) as store:
        assert [c.message for c in store.checkpoints()] == ["go"]


def test_pre_compact_keeps_the_transcript(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"n": 1}\n{"n": 2}\n')
    assert hook(project, event(project, "PreCompact", transcript, trigger="auto")).returncode == 0
    with Store.open(project) as store:
        assert store.conversation("latest") == [{"n": 1}, {"n": 2}]
        assert store.resolve("latest").message == "before compaction"


def test_read_transcript_tolerates_missing_partial_and_damaged_lines(tmp_path: Path) -> None:
    assert read_transcript(str(tmp_path / "missing.jsonl")) is None
    assert read_transcript(None) is None
    path = tmp_path / "t.jsonl"
    path.write_text('{"a": 1}\nnot json\n{"b": 2}\n{"c": ')
    assert read_transcript(str(path)) == [{"a": 1}, {"b": 2}]
