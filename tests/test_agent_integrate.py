"""`snapstore integrate` for Cursor, Cline, Windsurf, Kiro and OpenCode (issue 23 req 4): each
writes where the agent reads, keeps the user's entries, is idempotent, removes only its own,
writes nothing on --dry-run, never overwrites a file of the same name that is not its own; and
OpenCode's plugin, run by Node as OpenCode would, records the session."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import REPO, SNAPSTORE_SCRIPT, subprocess_env

from snapstore.errors import ConflictError, UsageError
from snapstore.integrations import agents, cline, cursor, kiro, opencode, windsurf
from snapstore.store import Store

#: What integrate writes: the absolute path of this environment's snapstore.
SNAP = str(SNAPSTORE_SCRIPT)


def integrate(agent: str, project: Path, **kw: object) -> list[str]:
    return agents.integrate(agent, str(project), **{"scope": "project", "mcp": False, "remove": False, "dry_run": False, **kw})  # type: ignore[arg-type]


def test_cursor_merges_hooks_json_and_mcp_json(tmp_path: Path):
    project = tmp_path / "proj"
    (project / ".cursor").mkdir(parents=True)
    theirs = {"command": "./lint.sh"}
    (project / ".cursor" / "hooks.json").write_text(json.dumps({"version": 1, "hooks": {"afterFileEdit": [theirs]}}))
    assert integrate("cursor", project, mcp=True, dry_run=True)
    assert "snapstore" not in (project / ".cursor" / "hooks.json").read_text()  # a dry run wrote nothing
    assert integrate("cursor", project, mcp=True)
    doc = json.loads((project / ".cursor" / "hooks.json").read_text())
    assert doc["version"] == 1 and set(doc["hooks"]) == set(cursor.EVENTS)
    assert doc["hooks"]["afterFileEdit"] == [theirs, {"command": f"{SNAP} hook cursor", "timeout": 20}]
    assert doc["hooks"]["preToolUse"][0]["matcher"] == cursor.MATCHER
    assert json.loads((project / ".cursor" / "mcp.json").read_text())["mcpServers"]["snapstore"]["args"] == ["mcp"]
    assert integrate("cursor", project, mcp=True) == []  # idempotent
    integrate("cursor", project, mcp=True, remove=True)
    assert json.loads((project / ".cursor" / "hooks.json").read_text()) == {"version": 1, "hooks": {"afterFileEdit": [theirs]}}
    assert "snapstore" not in json.loads((project / ".cursor" / "mcp.json").read_text()).get("mcpServers", {})


def test_windsurf_merges_hooks_json(tmp_path: Path):
    project = tmp_path / "proj"
    (project / ".windsurf").mkdir(parents=True)
    theirs = {"command": "python3 audit.py", "show_output": True}
    (project / ".windsurf" / "hooks.json").write_text(json.dumps({"hooks": {"post_write_code": [theirs]}}))
    integrate("windsurf", project)
    doc = json.loads((project / ".windsurf" / "hooks.json").read_text())
    assert set(doc["hooks"]) == set(windsurf.EVENTS)
    assert doc["hooks"]["post_write_code"] == [theirs, {"command": f"{SNAP} hook windsurf", "show_output": False}]
    assert integrate("windsurf", project) == []
    integrate("windsurf", project, remove=True)
    assert json.loads((project / ".windsurf" / "hooks.json").read_text()) == {"hooks": {"post_write_code": [theirs]}}
    home = tmp_path / "home"
    windsurf.integrate(str(project), scope="user", home=str(home))
    assert (home / ".codeium" / "windsurf" / "hooks.json").exists()
    # MCP: Windsurf's one mcp_config.json for every workspace, the server rooted at this project.
    config = home / ".codeium" / "windsurf" / "mcp_config.json"
    config.write_text('{"mcpServers": {"github": {"command": "gh-mcp"}}}')
    assert any("added MCP server snapstore" in line for line in windsurf.integrate(str(project), mcp=True, home=str(home)))
    servers = json.loads(config.read_text())["mcpServers"]
    assert servers["github"] == {"command": "gh-mcp"}
    assert servers["snapstore"] == {"command": SNAP, "args": ["mcp", "--root", str(project)]}
    windsurf.integrate(str(project), mcp=True, remove=True, home=str(home))
    assert json.loads(config.read_text()) == {"mcpServers": {"github": {"command": "gh-mcp"}}}


def test_kiro_owns_one_hook_file_and_merges_mcp_json(tmp_path: Path):
    project = tmp_path / "proj"
    (project / ".kiro" / "hooks").mkdir(parents=True)
    (project / ".kiro" / "hooks" / "lint.json").write_text('{"version": "v1", "hooks": []}')
    integrate("kiro", project, mcp=True)
    doc = json.loads((project / ".kiro" / "hooks" / "snapstore.json").read_text())
    assert doc["version"] == "v1" and [h["trigger"] for h in doc["hooks"]] == list(kiro.TRIGGERS)
    assert all(h["action"] == {"type": "command", "command": f"{SNAP} hook kiro"} for h in doc["hooks"])
    assert all(h.get("matcher", ".*") == ".*" for h in doc["hooks"])  # a regex: "*" is not one
    assert json.loads((project / ".kiro" / "settings" / "mcp.json").read_text())["mcpServers"]["snapstore"]["command"] == SNAP
    assert integrate("kiro", project, mcp=True) == []
    integrate("kiro", project, mcp=True, remove=True)
    assert not (project / ".kiro" / "hooks" / "snapstore.json").exists()
    assert (project / ".kiro" / "hooks" / "lint.json").exists()
    (project / ".kiro" / "hooks" / "snapstore.json").write_text('{"version": "v1", "hooks": []}')
    with pytest.raises(ConflictError, match="not the file snapstore writes"):
        integrate("kiro", project)


def test_cline_writes_executable_scripts_and_never_a_users(tmp_path: Path):
    project = tmp_path / "proj"
    hooks = project / ".clinerules" / "hooks"
    integrate("cline", project)
    for event in cline.EVENTS:
        script = hooks / event
        assert f"out=$({SNAP} hook cline); rc=$?" in script.read_text()
        assert stat.S_IMODE(script.stat().st_mode) == 0o755
    assert integrate("cline", project) == []
    integrate("cline", project, remove=True)
    assert not any(hooks.iterdir())
    (hooks / "PreToolUse").write_text("#!/bin/sh\necho mine\n")
    with pytest.raises(ConflictError, match="not the file snapstore writes"):
        integrate("cline", project)
    assert [p.name for p in hooks.iterdir()] == ["PreToolUse"]  # refused before writing any
    # MCP: into the editors' Cline settings that exist, rooted at the project.
    home = tmp_path / "home"
    settings = home / cline.MCP_SETTINGS[0]
    with pytest.raises(UsageError, match="print cline"):
        cline.integrate(str(tmp_path / "other"), mcp=True, home=str(home))
    settings.parent.mkdir(parents=True)
    settings.write_text('{"mcpServers": {"github": {"command": "gh-mcp"}}}')
    cline.integrate(str(tmp_path / "other"), mcp=True, home=str(home))
    servers = json.loads(settings.read_text())["mcpServers"]
    assert servers["github"] == {"command": "gh-mcp"}
    assert servers["snapstore"]["args"] == ["mcp", "--root", str(tmp_path / "other")]


def test_opencode_writes_its_plugin_and_the_mcp_entry(tmp_path: Path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "opencode.json").write_text('{"$schema": "https://opencode.ai/config.json", "model": "x"}')
    integrate("opencode", project, mcp=True)
    plugin = project / ".opencode" / "plugins" / "snapstore.js"
    assert plugin.read_text() == opencode.plugin_text()
    config = json.loads((project / "opencode.json").read_text())
    assert config["model"] == "x" and config["mcp"]["snapstore"] == opencode.mcp_entry()
    assert integrate("opencode", project, mcp=True) == []
    integrate("opencode", project, mcp=True, remove=True)
    assert not plugin.exists() and "snapstore" not in json.loads((project / "opencode.json").read_text()).get("mcp", {})


def test_project_files_reached_through_a_symlink_out_of_the_project_are_refused(tmp_path: Path):
    project, outside = tmp_path / "proj", tmp_path / "elsewhere"
    project.mkdir()
    outside.mkdir()
    (project / ".cursor").symlink_to(outside)
    with pytest.raises(Exception, match="leads out of the project"):
        integrate("cursor", project)
    assert list(outside.iterdir()) == []


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node to run OpenCode's plugin")
def test_the_opencode_plugin_run_by_node_records_the_session(tmp_path: Path):
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    plugin = tmp_path / "plugin.mjs"  # the plugin file as written, as an ES module for Node
    plugin.write_text(opencode.plugin_text())
    driver = tmp_path / "drive.mjs"
    driver.write_text(f"""
import {{ writeFileSync }} from "node:fs"
import {{ Snapstore }} from {json.dumps(str(plugin))}
const dir = {json.dumps(str(tree))}
const h = await Snapstore({{ directory: dir, worktree: dir, $: null, client: null, project: {{}} }})
await h["chat.message"]({{ sessionID: "oc-9", messageID: "m1" }}, {{ message: {{}}, parts: [{{ type: "text", text: "rename x" }}] }})
writeFileSync(dir + "/mine.txt", "the user's\\n")
await h["tool.execute.before"]({{ tool: "edit", sessionID: "oc-9", callID: "c1" }}, {{ args: {{ filePath: dir + "/a.py" }} }})
writeFileSync(dir + "/a.py", "y = 1\\n")
await h["tool.execute.after"]({{ tool: "edit", sessionID: "oc-9", callID: "c1", args: {{ filePath: dir + "/a.py" }} }}, {{ title: "", output: "", metadata: {{}} }})
await h["tool.execute.before"]({{ tool: "bash", sessionID: "oc-9", callID: "c2" }}, {{ args: {{ command: "make" }} }})
writeFileSync(dir + "/out.o", "")
await h["tool.execute.after"]({{ tool: "bash", sessionID: "oc-9", callID: "c2", args: {{ command: "make" }} }}, {{ title: "", output: "", metadata: {{ exit: 2 }} }})
await h.event({{ event: {{ type: "session.idle", properties: {{ sessionID: "oc-9" }} }} }})
""")
    # The plugin names snapstore by its absolute path: node's PATH needs no snapstore on it.
    node = shutil.which("node")
    assert node is not None
    env = subprocess_env(PATH="/usr/bin:/bin", SNAPSTORE_NO_SERVICE="1", HOME=str(tmp_path / "home"))
    env = {k: v for k, v in env.items() if not k.startswith(("CLAUDE_", "GEMINI_"))}
    done = subprocess.run([node, str(driver)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    with Store.open(tree) as store:
        rows = [(c.message, c.metadata["actor"], c.metadata["agent"]) for c in reversed(store.checkpoints(task="oc-9"))]
    assert rows == [
        ("rename x", "user", "opencode"),
        ("before Edit: a.py", "user", "opencode"),
        ("after Edit: a.py", "agent", "opencode"),
        ("after failed Bash: make", "agent", "opencode"),
        ("end of turn", "user", "opencode"),
    ], rows
