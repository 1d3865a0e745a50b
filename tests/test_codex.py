"""OpenAI Codex CLI (issue 23 req 4, first agent beyond Claude Code): its hook payloads (the
documented shape: session_id, transcript_path, cwd, hook_event_name, model, turn_id and for tool
events tool_name, tool_input, tool_use_id) recorded with exact attribution, and `integrate codex`
for .codex/hooks.json and the [mcp_servers.snapstore] table of config.toml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SNAPSTORE_SCRIPT, subprocess_env

from snapstore.integrations import agents, codex
from snapstore.store import Store

PATCH = "*** Begin Patch\n*** Update File: src/app.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"


def event(tree: Path, name: str, **extra: object) -> bytes:
    doc = {"session_id": "thread-1", "transcript_path": None, "cwd": str(tree), "hook_event_name": name,
           "model": "gpt-5-codex", "turn_id": "turn-1", **extra}
    return json.dumps(doc).encode()


def hook(tree: Path, payload: bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("CLAUDE_")}
    return subprocess.run([sys.executable, "-m", "snapstore", "hook", "codex", "--no-service"], input=payload,
                          cwd=cwd or tree, env=env, capture_output=True, timeout=60)


def test_a_codex_session_is_recorded_with_exact_attribution(tmp_path: Path):
    tree = tmp_path / "proj"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "app.py").write_text("x = 1\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The hook may run anywhere: the event's cwd names the project.
    assert hook(tree, event(tree, "UserPromptSubmit", prompt="bump x"), cwd=elsewhere).returncode == 0
    (tree / "notes.txt").write_text("the user's\n")
    tool = {"tool_name": "apply_patch", "tool_use_id": "call_1", "tool_input": {"command": PATCH}}
    assert hook(tree, event(tree, "PreToolUse", **tool)).returncode == 0
    (tree / "src" / "app.py").write_text("x = 2\n")
    done = hook(tree, event(tree, "PostToolUse", tool_response={"output": "ok"}, **tool))
    assert done.returncode == 0 and done.stdout == b"", done.stderr
    assert hook(tree, event(tree, "Stop", stop_hook_active=False)).returncode == 0
    with Store.open(tree) as store:
        rows = [(c.message, c.metadata["actor"], c.metadata["agent"]) for c in reversed(store.checkpoints(task="thread-1"))]
    assert rows == [
        ("bump x", "user", "codex"),
        ("before apply_patch: src/app.py", "user", "codex"),
        ("after apply_patch: src/app.py", "agent", "codex"),
        ("end of turn", "user", "codex"),
    ], rows
    with Store.open(tree) as store:
        store.revert(task="thread-1", actor="agent")
    assert (tree / "src" / "app.py").read_text() == "x = 1\n" and (tree / "notes.txt").exists()


def test_integrate_codex_merges_is_idempotent_and_removes_only_its_own(tmp_path: Path):
    project = tmp_path / "proj"
    (project / ".codex").mkdir(parents=True)
    mine = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit.sh"}]}]}}
    (project / ".codex" / "hooks.json").write_text(json.dumps(mine))
    (project / ".codex" / "config.toml").write_text('model = "o4"\n\n[mcp_servers.github]\ncommand = "gh-mcp"\n')
    lines = codex.integrate(str(project), mcp=True, home=str(tmp_path / "home"))
    assert any("added hook PostToolUse" in x for x in lines) and any("[mcp_servers.snapstore]" in x for x in lines)
    doc = json.loads((project / ".codex" / "hooks.json").read_text())
    pre = doc["hooks"]["PreToolUse"]
    assert pre[0]["hooks"][0]["command"] == "audit.sh" and pre[1]["matcher"] == "Bash|apply_patch|mcp__.*"
    assert set(doc["hooks"]) == {"UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"}
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((project / ".codex" / "config.toml").read_text())
    assert config["mcp_servers"]["snapstore"] == {"command": str(SNAPSTORE_SCRIPT), "args": ["mcp"]}
    assert config["mcp_servers"]["github"] == {"command": "gh-mcp"} and config["model"] == "o4"
    assert codex.integrate(str(project), mcp=True, home=str(tmp_path / "home")) == []  # idempotent
    assert codex.integrate(str(project), mcp=True, dry_run=True, remove=True, home=str(tmp_path / "home"))
    assert "snapstore" in (project / ".codex" / "hooks.json").read_text()  # a dry run wrote nothing
    codex.integrate(str(project), mcp=True, remove=True, home=str(tmp_path / "home"))
    assert json.loads((project / ".codex" / "hooks.json").read_text()) == mine
    after = tomllib.loads((project / ".codex" / "config.toml").read_text())
    assert after == {"model": "o4", "mcp_servers": {"github": {"command": "gh-mcp"}}}


def test_codex_has_no_local_scope_and_print_gives_the_toml(tmp_path: Path):
    from snapstore.errors import UsageError

    with pytest.raises(UsageError, match="no 'local' scope"):
        codex.integrate(str(tmp_path), scope="local")
    assert agents.printable_config("codex").startswith("[mcp_servers.snapstore]")


def test_a_symlinked_codex_dir_leading_out_of_the_project_is_refused(tmp_path: Path):
    from snapstore.errors import UnsafePathError

    project, home = tmp_path / "proj", tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    project.mkdir()
    os.symlink(home / ".codex", project / ".codex")
    with pytest.raises(UnsafePathError):
        codex.integrate(str(project), home=str(home))
    assert not (home / ".codex" / "hooks.json").exists()
