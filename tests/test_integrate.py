"""``snapstore integrate``: merging into settings that have other hooks, twice, then --remove."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers import SNAPSTORE_SCRIPT

from snapstore.integrations.claude_code import EVENTS, MATCHER

#: What integrate writes: the absolute path of this environment's snapstore (the agent's PATH may lack it).
SNAP = str(SNAPSTORE_SCRIPT)

OTHER: dict[str, Any] = {
    "permissions": {"allow": ["Bash(npm test:*)"], "deny": ["Read(./.env)"]},
    "model": "opus",
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "/usr/local/bin/audit-bash", "timeout": 5}]}
        ],
        "PostToolUse": [
            {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "prettier --write \"$FILE\""}]}
        ],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send claude"}]}],
    },
}
MCP_OTHER = {"mcpServers": {"github": {"command": "gh-mcp", "args": []}}}


def run(project: Path, *args: str, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "CLAUDE_"))}
    env["HOME"] = str(home or project.parent / "home")
    return subprocess.run(
        [sys.executable, "-c", "from snapstore.service.client import run; run()", "integrate", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=60,
    )


def test_merge_keeps_everything_else_is_idempotent_and_remove_takes_only_ours(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    settings = project / ".claude" / "settings.json"
    original = json.dumps(OTHER, indent=4)
    settings.write_text(original)
    (project / ".mcp.json").write_text(json.dumps(MCP_OTHER))

    first = run(project, "claude-code", "--mcp")
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("added hook") == len(EVENTS)
    assert "added MCP server snapstore" in first.stdout and ".bak" in first.stdout
    doc = json.loads(settings.read_text())
    assert doc["permissions"] == OTHER["permissions"] and doc["model"] == "opus"
    assert doc["hooks"]["Notification"] == OTHER["hooks"]["Notification"]
    assert doc["hooks"]["PreToolUse"][0] == OTHER["hooks"]["PreToolUse"][0]
    assert doc["hooks"]["PreToolUse"][1] == {
        "matcher": MATCHER,
        "hooks": [{"type": "command", "command": f"{SNAP} hook claude-code", "timeout": 20}],
    }
    assert "matcher" not in doc["hooks"]["UserPromptSubmit"][0]
    assert set(doc["hooks"]) == set(EVENTS) | {"Notification"}
    assert (project / ".claude" / "settings.json.bak").read_text() == original
    mcp = json.loads((project / ".mcp.json").read_text())
    assert mcp["mcpServers"]["github"] == MCP_OTHER["mcpServers"]["github"]
    assert mcp["mcpServers"]["snapstore"]["args"] == ["mcp"]

    merged = settings.read_bytes()
    second = run(project, "claude-code", "--mcp")
    assert second.returncode == 0
    assert second.stdout.strip() == "nothing to change: already integrated"
    assert settings.read_bytes() == merged

    removed = run(project, "claude-code", "--mcp", "--remove")
    assert removed.returncode == 0
    assert removed.stdout.count("removed hook") == len(EVENTS)
    assert json.loads(settings.read_text()) == OTHER
    assert json.loads((project / ".mcp.json").read_text()) == MCP_OTHER
    again = run(project, "claude-code", "--remove")
    assert again.stdout.strip() == "nothing to change: no snapstore entries found"


def test_remove_keeps_other_hooks_sharing_a_group_with_ours(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    shared = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}, {"type": "command", "command": "/opt/bin/snapstore hook claude-code"}]}]}}
    (project / ".claude" / "settings.local.json").write_text(json.dumps(shared))
    added = run(project, "claude-code", "--scope", "local")
    assert "updated hook Stop:" in added.stdout  # ours (any path to snapstore), re-pointed at this one
    assert json.loads((project / ".claude" / "settings.local.json").read_text())["hooks"]["Stop"][0] == {
        "hooks": [{"type": "command", "command": "say done"}]
    }
    run(project, "claude-code", "--scope", "local", "--remove")
    doc = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert doc == {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}}


def test_dry_run_writes_nothing_and_new_files_are_created(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    dry = run(project, "claude-code", "--mcp", "--dry-run")
    assert dry.returncode == 0 and "would change" in dry.stdout
    assert not (project / ".claude").exists() and not (project / ".mcp.json").exists()
    done = run(project, "claude-code")
    assert done.returncode == 0 and ".bak" not in done.stdout
    assert set(json.loads((project / ".claude" / "settings.json").read_text())["hooks"]) == set(EVENTS)


def test_user_scope_writes_home_settings_and_claude_json(tmp_path: Path) -> None:
    project, home = tmp_path / "proj", tmp_path / "home"
    project.mkdir()
    home.mkdir()
    (home / ".claude.json").write_text(json.dumps({"numStartups": 7, "projects": {"/x": {}}}))
    assert run(project, "claude-code", "--scope", "user", "--mcp", home=home).returncode == 0
    assert "hooks" in json.loads((home / ".claude" / "settings.json").read_text())
    doc = json.loads((home / ".claude.json").read_text())
    assert doc["numStartups"] == 7 and doc["projects"] == {"/x": {}}
    assert doc["mcpServers"]["snapstore"]["command"] == SNAP


def test_invalid_settings_are_refused_untouched(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    (project / ".claude" / "settings.json").write_text('{"hooks": {')
    bad = run(project, "claude-code")
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr and "nothing changed" in bad.stderr
    assert (project / ".claude" / "settings.json").read_text() == '{"hooks": {'
    assert not (project / ".claude" / "settings.json.bak").exists()
    # Valid JSON that is not an object is refused the same way.
    (project / ".claude" / "settings.json").write_text("[1, 2]")
    bad = run(project, "claude-code")
    assert bad.returncode == 2 and "JSON object" in bad.stderr and "nothing changed" in bad.stderr
    assert (project / ".claude" / "settings.json").read_text() == "[1, 2]"


def test_print_for_other_agents(tmp_path: Path) -> None:
    for agent in ("cursor", "generic", "kiro", "copilot"):
        out = run(tmp_path, "--print", agent)
        assert out.returncode == 0
        entry = json.loads(out.stdout)["mcpServers"]["snapstore"]
        assert entry["command"] == SNAP and entry["args"] == ["mcp"]
    # Cline starts servers in / and Windsurf has one file for every workspace: the root is named.
    for agent in ("cline", "windsurf"):
        entry = json.loads(run(tmp_path, "--print", agent).stdout)["mcpServers"]["snapstore"]
        assert entry["args"] == ["mcp", "--root", str(tmp_path)], entry
    assert json.loads(run(tmp_path, "--print", "cline").stdout)["mcpServers"]["snapstore"]["disabled"] is False
    opencode = json.loads(run(tmp_path, "--print", "opencode").stdout)["mcp"]["snapstore"]
    assert opencode == {"type": "local", "command": [SNAP, "mcp"], "enabled": True}
    assert run(tmp_path, "--print", "vim").returncode == 2
