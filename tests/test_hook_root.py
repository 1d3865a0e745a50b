"""A hook's project (issue 23 req 3): the agent's project variable wins over the directory the
agent's shell moved to; a hook never creates a store at $HOME, at / or among other users'
files, and says so once, where the agent shows hook messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import subprocess_env

from snapstore.store import Store


def hook(agent: str, doc: dict[str, object], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The hook as the agent runs it, with a home of the test's own (where it may remember)."""
    base = {k: v for k, v in subprocess_env().items() if not k.startswith(("CLAUDE_", "GEMINI_", "XDG_RUNTIME_DIR"))}
    base["HOME"] = str(cwd.parent / "fake-home")
    return subprocess.run([sys.executable, "-m", "snapstore", "hook", agent, "--no-service"], input=json.dumps(doc),
                          cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=60)


def prompt(session: str, cwd: Path) -> dict[str, object]:
    return {"hook_event_name": "UserPromptSubmit", "session_id": session, "prompt": "go", "cwd": str(cwd), "transcript_path": ""}


def test_the_project_variable_wins_when_the_shell_moved_elsewhere(tmp_path: Path):
    project, elsewhere = tmp_path / "proj", tmp_path / "scratch"
    (project / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    (project / "a.py").write_text("1\n")
    Store.init(project).close()
    for cwd in (project / "sub", elsewhere):  # Claude Code: the hook runs where the shell is
        done = hook("claude-code", prompt("s-1", cwd), cwd, CLAUDE_PROJECT_DIR=str(project))
        assert done.returncode == 0 and done.stdout == "", done
    # Gemini: its variable against the event's cwd.
    done = hook("gemini", {**prompt("g-1", elsewhere), "hook_event_name": "BeforeAgent"}, elsewhere, GEMINI_PROJECT_DIR=str(project))
    assert done.returncode == 0 and json.loads(done.stdout) == {}
    with Store.open(project) as store:
        assert [c.message for c in store.checkpoints(task="s-1")] == ["go", "go"]
        assert [c.message for c in store.checkpoints(task="g-1")] == ["go"]
    assert not (elsewhere / ".snapstore").exists()


def test_no_store_is_created_at_home_and_the_user_is_told_once(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".config").mkdir()
    (home / ".config" / "token").write_text("secret")
    outs = [hook("claude-code", prompt("s-2", home), home, HOME=str(home), CLAUDE_PROJECT_DIR=str(home)) for _ in range(2)]
    assert not (home / ".snapstore").exists()
    first = json.loads(outs[0].stdout or "{}").get("systemMessage", "") if outs[0].stdout else ""
    # (UserPromptSubmit output reaches the model: the hook says nothing there; a tool event speaks.)
    assert outs[0].returncode == 0 and first == ""
    tool = {"hook_event_name": "PostToolUse", "session_id": "s-2", "tool_name": "Bash", "tool_input": {"command": "ls"},
            "tool_use_id": "t1", "cwd": str(home), "transcript_path": ""}
    said = [hook("claude-code", tool, home, HOME=str(home), CLAUDE_PROJECT_DIR=str(home)) for _ in range(2)]
    message = json.loads(said[0].stdout)["systemMessage"]
    assert "none is created there: it is the home directory" in message and "snapstore init" in message
    assert said[1].stdout == ""  # once per session (remembered in the user's cache: there is no store)
    assert (home / ".cache" / "snapstore" / "hook-warned-sessions").read_text() == "s-2\n"
    assert not (home / ".snapstore").exists()


def test_a_payload_naming_the_root_directory_creates_nothing(tmp_path: Path):
    (tmp_path / "x").mkdir()
    doc = {"conversation_id": "cu-5", "hook_event_name": "afterFileEdit", "workspace_roots": ["/"], "file_path": "/etc/hosts"}
    done = hook("cursor", doc, tmp_path / "x")
    assert done.returncode == 0
    assert "file system's root" in json.loads(done.stdout)["user_message"]
    assert not os.path.exists("/.snapstore")
