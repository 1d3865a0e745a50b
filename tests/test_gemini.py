"""Google Gemini CLI (issue 23 req 4): its events (BeforeAgent, BeforeTool, AfterTool,
AfterAgent, PreCompress; no call ids) mapped onto the one event model and recorded with exact
attribution; JSON on stdout, as Gemini requires on exit 0; `integrate gemini` for
.gemini/settings.json (hooks with millisecond timeouts, and mcpServers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import SNAPSTORE_SCRIPT, subprocess_env

from snapstore.integrations import gemini
from snapstore.store import Store


def hook(tree: Path, name: str, cwd: Path | None = None, **fields: object) -> subprocess.CompletedProcess[bytes]:
    doc = {"session_id": "g-1", "transcript_path": "", "cwd": str(tree), "hook_event_name": name,
           "timestamp": "2026-11-25T05:00:00Z", **fields}
    env = {k: v for k, v in subprocess_env().items() if not k.startswith(("CLAUDE_", "GEMINI_"))}
    return subprocess.run([sys.executable, "-m", "snapstore", "hook", "gemini", "--no-service"],
                          input=json.dumps(doc).encode(), cwd=cwd or tree, env=env, capture_output=True, timeout=60)


def test_a_gemini_session_is_recorded_with_exact_attribution(tmp_path: Path):
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outs = [hook(tree, "BeforeAgent", cwd=elsewhere, prompt="fix a.py")]
    (tree / "mine.txt").write_text("the user's\n")
    edit = {"tool_name": "replace", "tool_input": {"file_path": str(tree / "a.py"), "old_string": "x = 1", "new_string": "x = 2"}}
    outs.append(hook(tree, "BeforeTool", **edit))
    (tree / "a.py").write_text("x = 2\n")
    outs.append(hook(tree, "AfterTool", tool_response={"llmContent": "ok", "returnDisplay": "ok"}, **edit))
    shell = {"tool_name": "run_shell_command", "tool_input": {"command": "touch made.txt && false"}}
    outs.append(hook(tree, "BeforeTool", **shell))
    (tree / "made.txt").write_text("")
    outs.append(hook(tree, "AfterTool", tool_response={"llmContent": "", "error": "exit 1"}, **shell))
    outs.append(hook(tree, "AfterAgent", prompt="fix a.py", prompt_response="done", stop_hook_active=False))
    outs.append(hook(tree, "Notification", notification_type="ToolPermission", message="m", details={}))
    for done in outs:
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {}  # only JSON on stdout: Gemini parses it
    with Store.open(tree) as store:
        rows = [(c.message, c.metadata["actor"], c.metadata["agent"]) for c in reversed(store.checkpoints(task="g-1"))]
    assert rows == [
        ("fix a.py", "user", "gemini"),
        ("before Edit: a.py", "user", "gemini"),
        ("after Edit: a.py", "agent", "gemini"),
        ("after failed Bash: touch made.txt && false", "agent", "gemini"),
        ("end of turn", "user", "gemini"),
    ], rows
    with Store.open(tree) as store:
        store.revert(task="g-1", actor="agent")
    assert (tree / "a.py").read_text() == "x = 1\n" and not (tree / "made.txt").exists()
    assert (tree / "mine.txt").read_text() == "the user's\n"


def test_a_before_and_its_after_tool_share_a_call_id():
    call = {"tool_name": "write_file", "tool_input": {"file_path": "/p/x", "content": "c"}}
    before = gemini.normalize({"hook_event_name": "BeforeTool", **call})
    after = gemini.normalize({"hook_event_name": "AfterTool", "tool_response": {}, **call})
    other = gemini.normalize({"hook_event_name": "BeforeTool", "tool_name": "write_file", "tool_input": {"file_path": "/p/y"}})
    assert before is not None and after is not None and other is not None
    assert before["tool_use_id"] == after["tool_use_id"] != other["tool_use_id"]
    assert gemini.normalize({"hook_event_name": "BeforeModel"}) is None


def test_integrate_gemini_keeps_the_users_settings(tmp_path: Path):
    project = tmp_path / "proj"
    (project / ".gemini").mkdir(parents=True)
    mine = {"theme": "dark", "mcpServers": {"gh": {"command": "gh-mcp"}},
            "hooks": {"BeforeTool": [{"matcher": "run_shell_command", "hooks": [{"type": "command", "command": "audit"}]}]}}
    path = project / ".gemini" / "settings.json"
    path.write_text(json.dumps(mine))
    lines = gemini.integrate(str(project), mcp=True, home=str(tmp_path / "home"))
    doc = json.loads(path.read_text())
    assert doc["theme"] == "dark" and doc["mcpServers"]["gh"] == {"command": "gh-mcp"}
    assert doc["mcpServers"]["snapstore"] == {"command": str(SNAPSTORE_SCRIPT), "args": ["mcp"]}
    ours = doc["hooks"]["BeforeTool"][1]
    assert ours["matcher"] == "run_shell_command|write_file|replace|mcp__.*" and ours["hooks"][0]["timeout"] == 20000
    assert set(doc["hooks"]) == set(gemini.EVENT_MAP) and sum("added" in x for x in lines) == 6
    assert gemini.integrate(str(project), mcp=True, home=str(tmp_path / "home")) == []
    gemini.integrate(str(project), mcp=True, remove=True, home=str(tmp_path / "home"))
    assert json.loads(path.read_text()) == mine
