"""Issue 38 class 9: ``integrate`` owns only what snapstore wrote byte for byte, and edits
Codex's config.toml only after parsing it (tomllib) and checking the result.  Hostile cases: a
user's own hook script that also calls snapstore, an edited copy of ours, a commented-out table,
a table header inside a multi-line string, an inline table, invalid TOML."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import SNAPSTORE_SCRIPT, subprocess_env

from snapstore.errors import ConflictError, UsageError
from snapstore.integrations import agents, cline, codex, copilot, kiro
from snapstore.integrations.executable import Executable

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


@pytest.mark.parametrize("agent", ["cline", "copilot", "kiro"])
def test_what_an_earlier_snapstore_wrote_is_still_ours(agent: str, tmp_path: Path):
    rel, _ = USERS[agent]
    project = tmp_path / "proj"
    path = project / rel
    path.parent.mkdir(parents=True)
    if agent == "cline":  # byte for byte what the previous version wrote (a bare snapstore)
        old = "#!/bin/sh\n# snapstore hook cline: a checkpoint per event (snapstore integrate cline --remove takes it out)\nexec snapstore hook cline\n"
    elif agent == "copilot":
        old = copilot.hooks_text(LEGACY)
    else:
        doc = kiro.hooks_document(LEGACY)
        doc["hooks"] = [h for h in doc["hooks"] if h["trigger"] != "AgentSpawn"]
        for h in doc["hooks"]:
            if "matcher" in h:
                h["matcher"] = "*"
        old = json.dumps(doc, indent=2) + "\n"
    assert agent == "copilot" or hashlib.sha256(old.encode()).hexdigest() in cline.LEGACY_SCRIPTS | kiro.LEGACY_FILES
    path.write_text(old)
    lines = integrate(agent, project)
    assert any("updated" in line for line in lines), lines
    assert SNAP in path.read_text()
    integrate(agent, project, remove=True)
    assert not path.exists()


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
