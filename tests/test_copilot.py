"""GitHub Copilot CLI (issue 23 req 4): its VS-Code-compatible hook payloads (snake_case, no call
ids, tool events for every tool) recorded with exact attribution, nothing printed (Copilot reads
a preToolUse hook's stdout as a permission decision), and `integrate copilot` writing and
removing snapstore's own .github/hooks/snapstore.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SNAPSTORE_SCRIPT, subprocess_env

from snapstore.errors import ConflictError, UsageError
from snapstore.integrations import copilot
from snapstore.store import Store


def hook(tree: Path, name: str, **fields: object) -> subprocess.CompletedProcess[bytes]:
    doc = {"hook_event_name": name, "session_id": "cp-1", "timestamp": "2026-11-25T05:00:00Z", "cwd": str(tree), **fields}
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("CLAUDE_")}
    return subprocess.run([sys.executable, "-m", "snapstore", "hook", "copilot", "--no-service"],
                          input=json.dumps(doc).encode(), cwd=tree, env=env, capture_output=True, timeout=60)


def test_a_copilot_session_is_recorded_with_exact_attribution(tmp_path: Path):
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    outs = [hook(tree, "UserPromptSubmit", prompt="fix it")]
    (tree / "mine.txt").write_text("the user's\n")
    view = {"tool_name": "view", "tool_input": {"path": "a.py"}}
    outs += [hook(tree, "PreToolUse", **view), hook(tree, "PostToolUse", tool_result={"result_type": "success"}, **view)]
    edit = {"tool_name": "edit", "tool_input": {"path": str(tree / "a.py"), "old_str": "x = 1", "new_str": "x = 2"}}
    outs.append(hook(tree, "PreToolUse", **edit))
    (tree / "a.py").write_text("x = 2\n")
    outs.append(hook(tree, "PostToolUse", tool_result={"result_type": "success", "text_result_for_llm": "ok"}, **edit))
    sh = {"tool_name": "bash", "tool_input": {"command": "touch made.txt; exit 3"}}
    outs.append(hook(tree, "PreToolUse", **sh))
    (tree / "made.txt").write_text("")
    outs.append(hook(tree, "PostToolUseFailure", error="exit 3", **sh))
    outs.append(hook(tree, "Stop", transcript_path="", stop_reason="end_turn"))
    for done in outs:
        assert done.returncode == 0 and done.stdout == b"", (done.stdout, done.stderr)
    with Store.open(tree) as store:
        rows = [(c.message, c.metadata["actor"], c.metadata["agent"]) for c in reversed(store.checkpoints(task="cp-1"))]
    assert rows == [
        ("fix it", "user", "copilot"),
        ("before Edit: a.py", "user", "copilot"),
        ("after Edit: a.py", "agent", "copilot"),
        ("after failed Bash: touch made.txt; exit 3", "agent", "copilot"),
        ("end of turn", "user", "copilot"),
    ], rows  # the view tool recorded nothing
    with Store.open(tree) as store:
        store.revert(task="cp-1", actor="agent")
    assert (tree / "a.py").read_text() == "x = 1\n" and not (tree / "made.txt").exists()
    assert (tree / "mine.txt").exists()


def test_integrate_copilot_owns_one_file_and_leaves_the_users(tmp_path: Path):
    project = tmp_path / "proj"
    (project / ".github" / "hooks").mkdir(parents=True)
    theirs = project / ".github" / "hooks" / "audit.json"
    theirs.write_text('{"version": 1, "hooks": {"preToolUse": []}}')
    lines = copilot.integrate(str(project))
    ours = project / ".github" / "hooks" / "snapstore.json"
    doc = json.loads(ours.read_text())
    assert doc["version"] == 1 and set(doc["hooks"]) == set(copilot.EVENTS) and lines
    assert doc["hooks"]["PreToolUse"][0]["bash"] == f"{SNAPSTORE_SCRIPT} hook copilot"
    assert copilot.integrate(str(project)) == []  # idempotent
    assert copilot.integrate(str(project), remove=True, dry_run=True) and ours.exists()
    copilot.integrate(str(project), remove=True)
    assert not ours.exists() and theirs.read_text() == '{"version": 1, "hooks": {"preToolUse": []}}'
    ours.write_text('{"version": 1, "hooks": {}}')  # a file of that name that is not ours
    with pytest.raises(ConflictError, match="not the file snapstore writes"):
        copilot.integrate(str(project))
    with pytest.raises(UsageError, match="repository only"):
        copilot.integrate(str(project), scope="user")
