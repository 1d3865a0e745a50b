"""Issue 38 class 9: ``integrate`` owns only what snapstore wrote byte for byte, and edits
Codex's config.toml only after parsing it (tomllib) and checking the result.  Hostile cases: a
user's own hook script that also calls snapstore, an edited copy of ours, a commented-out table,
a table header inside a multi-line string, an inline table, invalid TOML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SNAPSTORE_SCRIPT, subprocess_env

from snapstore.errors import ConflictError, UsageError
from snapstore.integrations import agents, cline, codex, copilot, kiro, opencode
from snapstore.integrations.executable import Executable
from snapstore.integrations.hook_files import bare_digest

tomllib = pytest.importorskip("tomllib")
SNAP = str(SNAPSTORE_SCRIPT)
LEGACY = Executable(("snapstore",))


def integrate(agent: str, project: Path, **kw: object) -> list[str]:
    return agents.integrate(agent, str(project), **{"scope": "project", "mcp": False, "remove": False, "dry_run": False, **kw})  # type: ignore[arg-type]


#: agent -> (the file snapstore owns, a user's file there that also calls snapstore)
USERS = {
    "cline": (".clinerules/hooks/PreToolUse", "#!/bin/sh\n# my own hook\nsnapstore hook cline\n./lint.sh\n"),
    "kiro": (".kiro/hooks/snapstore.json", json.dumps({"version": "v1", "hooks": [
        {"name": "mine", "trigger": "PostToolUse", "matcher": "fs_write", "action": {"type": "command", "command": "snapstore hook kiro && ./lint"}}]})),
    "copilot": (".github/hooks/snapstore.json", json.dumps({"version": 1, "hooks": {"PostToolUse": [
        {"type": "command", "bash": "snapstore hook copilot; ./notify.sh", "timeoutSec": 5}]}})),
    "opencode": (".opencode/plugins/snapstore.js", "// my plugin; it runs snapstore hook opencode and more\nexport const Mine = async () => ({})\n"),
}


@pytest.mark.parametrize("agent", sorted(USERS))
def test_a_users_file_that_calls_snapstore_is_never_overwritten_or_removed(agent: str, tmp_path: Path):
    rel, text = USERS[agent]
    project = tmp_path / "proj"
    path = project / rel
    path.parent.mkdir(parents=True)
    path.write_text(text)
    for remove in (False, True):
        with pytest.raises(ConflictError, match="not the file snapstore writes"):
            integrate(agent, project, remove=remove)
        assert path.read_text() == text
    if agent == "cline":  # refused before any script was written
        assert sorted(p.name for p in path.parent.iterdir()) == ["PreToolUse"]


@pytest.mark.parametrize("agent", sorted(USERS))
def test_an_edited_copy_of_ours_is_the_users(agent: str, tmp_path: Path):
    rel, _ = USERS[agent]
    project = tmp_path / "proj"
    integrate(agent, project)
    path = project / rel
    edited = path.read_text() + ("# and my line\n" if agent == "cline" else "\n\n")
    path.write_text(edited)
    with pytest.raises(ConflictError):
        integrate(agent, project, remove=True)
    assert path.read_text() == edited


def test_the_refusal_is_one_line_and_exit_9(tmp_path: Path):
    rel, text = USERS["cline"]
    project = tmp_path / "proj"
    (project / rel).parent.mkdir(parents=True)
    (project / rel).write_text(text)
    done = subprocess.run([sys.executable, "-m", "snapstore", "integrate", "cline", "--remove"], cwd=project,
                          env=subprocess_env(HOME=str(tmp_path / "home")), capture_output=True, text=True, timeout=60)
    assert done.returncode == 9 and done.stderr.count("\n") == 1 and "not the file snapstore writes" in done.stderr, done.stderr
    assert (project / rel).read_text() == text


#: The old texts, byte for byte as the previous version wrote them (a bare snapstore).
OLD_EVENTS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "PreCompact")


def _old_text(agent: str) -> str:
    if agent == "cline":
        return "#!/bin/sh\n# snapstore hook cline: a checkpoint per event (snapstore integrate cline --remove takes it out)\nexec snapstore hook cline\n"
    if agent == "copilot":
        entry = {"type": "command", "bash": "snapstore hook copilot", "powershell": "snapstore hook copilot", "timeoutSec": 20}
        return json.dumps({"version": 1, "hooks": {e: [dict(entry)] for e in OLD_EVENTS}}, indent=2) + "\n"
    hooks = []
    for trigger in ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"):
        hook: dict[str, object] = {"name": f"snapstore {trigger}", "trigger": trigger}
        if trigger in ("PreToolUse", "PostToolUse"):
            hook["matcher"] = "*"
        hook.update(action={"type": "command", "command": "snapstore hook kiro"}, timeout=20, enabled=True)
        hooks.append(hook)
    return json.dumps({"version": "v1", "hooks": hooks}, indent=2) + "\n"


@pytest.mark.parametrize("agent", ["cline", "copilot", "kiro"])
def test_what_an_earlier_snapstore_wrote_is_still_ours(agent: str, tmp_path: Path):
    rel, _ = USERS[agent]
    project = tmp_path / "proj"
    path = project / rel
    path.parent.mkdir(parents=True)
    old = _old_text(agent)
    path.write_text(old)
    lines = integrate(agent, project)
    assert agent == "copilot" or any("updated" in line for line in lines), lines
    assert SNAP in path.read_text()
    integrate(agent, project, remove=True)
    assert not path.exists()


#: bare_digest of what integrate writes now, per owned file.  When this test fails, the file
#: changed: add the digest below to the module's legacy set (so files written before stay
#: snapstore's to replace and remove), then pin the new one here.
PINNED = {
    "cline": "49c02f1b4b33212c9444b551575f10669cb46ba6c5572295a93c59a5fd993cc0",
    "kiro": "18511f31a9c7c5c40d24de0acda77b490bcd27d85d553193ea8183daa16b21f6",
    "copilot": "c36a3b08dac89ed410562ee01ff64394f094c12743cb67017e10012f01c1c711",
    "opencode": "ed9fb3a7adb02b6467374a246eff2320e31f898b891cb501eff222cadb0afd6e",
}
RENDER = {"cline": (cline.script, cline.owns), "kiro": (kiro.hooks_text, kiro.owns),
          "copilot": (copilot.hooks_text, copilot.owns), "opencode": (opencode.plugin_text, opencode.owns)}


@pytest.mark.parametrize("agent", sorted(PINNED))
def test_a_changed_template_keeps_files_written_before_owned(agent: str):
    render, owns = RENDER[agent]
    assert bare_digest(render(LEGACY), ["snapstore"]) == PINNED[agent], "the owned file changed: see PINNED"
    # Whatever path it names (spaces, quotes), a file written by this version is known as ours.
    for program in ("/home/a b/.venv/bin/snapstore", "/opt/it's/snapstore-py"):
        text = render(Executable((program,)))
        assert owns(text) and bare_digest(text, [program]) == PINNED[agent]
        assert not owns(text.replace("hook", "hook ", 1))


CONFIG = 'model = "o4"\n\n[mcp_servers.github]\ncommand = "gh-mcp"\n'


def _codex(project: Path, **kw: object) -> list[str]:
    return codex.integrate(str(project), mcp=True, home=str(project.parent / "home"), **kw)  # type: ignore[arg-type]


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proj" / ".codex" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_a_commented_out_table_does_not_block_mcp(tmp_path: Path):
    path = _config(tmp_path, CONFIG + '\n# [mcp_servers.snapstore]\n# command = "snapstore"\n')
    lines = _codex(path.parent.parent)
    assert any("added [mcp_servers.snapstore]" in line for line in lines), lines
    doc = tomllib.loads(path.read_text())
    assert doc["mcp_servers"]["snapstore"] == {"command": SNAP, "args": ["mcp"]}
    assert "# command = \"snapstore\"" in path.read_text()  # the user's comment stays
    assert _codex(path.parent.parent) == []  # idempotent: the comment is not mistaken for the table


HEADER_IN_STRINGS = (
    'notes = """\n[mcp_servers.snapstore]\ncommand = "x"\n"""\n'
    + CONFIG
    + '\n[mcp_servers.snapstore]\ncommand = "snapstore"\nargs = ["mcp"]\n\n'
    + '[profiles.fast]\nprompt = """\n[mcp_servers.github]\n[not.a.table]\n"""\nmodel = "o3"\n'
)


def test_a_header_inside_a_multiline_string_never_costs_the_users_keys(tmp_path: Path):
    path = _config(tmp_path, HEADER_IN_STRINGS)
    before = tomllib.loads(HEADER_IN_STRINGS)
    lines = _codex(path.parent.parent, remove=True)
    assert any("removed [mcp_servers.snapstore]" in line for line in lines), lines
    after = tomllib.loads(path.read_text())  # valid TOML
    del before["mcp_servers"]["snapstore"]
    assert after == before  # every key of the user's, strings included, is kept
    # Adding it back and updating a stale path go through the same check.
    _codex(path.parent.parent)
    assert tomllib.loads(path.read_text())["mcp_servers"]["snapstore"]["command"] == SNAP


def test_invalid_or_inline_toml_and_a_foreign_server_are_refused_untouched(tmp_path: Path):
    path = _config(tmp_path, 'model = "o4\n')
    with pytest.raises(UsageError, match="not valid TOML"):
        _codex(path.parent.parent)
    assert path.read_text() == 'model = "o4\n'
    inline = 'mcp_servers = { github = { command = "gh-mcp" } }\n'
    path.write_text(inline)
    with pytest.raises(UsageError, match="cannot be added to this file safely"):
        _codex(path.parent.parent)
    assert path.read_text() == inline
    foreign = '[mcp_servers.snapstore]\ncommand = "/usr/local/bin/other-tool"\n'
    path.write_text(foreign)
    with pytest.raises(ConflictError, match="does not run snapstore"):
        _codex(path.parent.parent)
    assert _codex(path.parent.parent, remove=True) == []
    assert path.read_text() == foreign  # --remove leaves a server that is not snapstore's


def test_a_hook_entry_that_also_runs_the_users_command_is_the_users(tmp_path: Path):
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    (project / ".cursor").mkdir()
    theirs = {"type": "command", "command": "snapstore hook claude-code && notify-send done"}
    (project / ".claude" / "settings.json").write_text(json.dumps({"hooks": {"Stop": [{"hooks": [theirs]}]}}))
    flat = {"command": "/opt/bin/snapstore hook cursor; ./lint.sh"}
    (project / ".cursor" / "hooks.json").write_text(json.dumps({"version": 1, "hooks": {"stop": [flat]}}))
    for agent in ("claude-code", "cursor"):
        integrate(agent, project)
        integrate(agent, project, remove=True)
    assert json.loads((project / ".claude" / "settings.json").read_text()) == {"hooks": {"Stop": [{"hooks": [theirs]}]}}
    assert json.loads((project / ".cursor" / "hooks.json").read_text()) == {"version": 1, "hooks": {"stop": [flat]}}


def test_a_crlf_config_toml_loses_only_our_table(tmp_path: Path):
    text = 'model = "o4"\r\n\r\n[mcp_servers.snapstore]\r\ncommand = "snapstore"\r\nargs = ["mcp"]\r\n\r\n[mcp_servers.github]\r\ncommand = "gh-mcp"\r\n'
    path = _config(tmp_path, "")
    path.write_bytes(text.encode())
    _codex(path.parent.parent, remove=True)
    assert tomllib.loads(path.read_text()) == {"model": "o4", "mcp_servers": {"github": {"command": "gh-mcp"}}}


@pytest.mark.parametrize("agent", ["claude-code", "cursor", "kiro"])
def test_an_mcp_server_named_snapstore_that_is_not_ours_refuses_before_anything_is_written(agent: str, tmp_path: Path):
    project = tmp_path / "proj"
    rel = {"claude-code": ".mcp.json", "cursor": ".cursor/mcp.json", "kiro": ".kiro/settings/mcp.json"}[agent]
    (project / rel).parent.mkdir(parents=True)
    theirs = json.dumps({"mcpServers": {"snapstore": {"command": "/usr/local/bin/my-snapshot-tool", "args": ["serve"]}}})
    (project / rel).write_text(theirs)
    with pytest.raises(ConflictError, match="does not run snapstore"):
        integrate(agent, project, mcp=True)
    assert (project / rel).read_text() == theirs
    assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()) == [rel]  # no hooks either
