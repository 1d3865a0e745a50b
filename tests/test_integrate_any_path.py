"""Issue 37 req 1 and 3: a configuration ``integrate`` writes runs from the agent's PATH
(``/usr/bin:/bin``, no snapstore on it), every hook fails open in its agent's format and logs
what failed where ``snapstore doctor`` shows it, and every tool that may write is bracketed."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers import SNAPSTORE_SCRIPT, subprocess_env

from snapstore.integrations import agents, cline, executable, kiro
from snapstore.integrations.claude_code import MATCHER
from snapstore.store import Store

SNAP = str(SNAPSTORE_SCRIPT)
#: Every agent's "go on" answer (what stdout must be when there is nothing to say).
GO_ON = {"gemini": "{}", "cursor": "{}", "cline": '{"cancel": false}'}


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in subprocess_env().items() if not k.startswith(("CLAUDE_", "GEMINI_", "XDG_"))}
    env.pop("PYTHONPATH", None)  # the configured executable finds snapstore on its own
    env.update(PATH="/usr/bin:/bin", HOME=str(tmp / "home"), XDG_STATE_HOME=str(tmp / "state"),
               XDG_RUNTIME_DIR=str(tmp / "run"), SNAPSTORE_NO_SERVICE="1", **extra)
    (tmp / "run").mkdir(exist_ok=True)
    return env


def _prompt_hook(agent: str, project: Path) -> tuple[list[str], dict[str, Any]]:
    """(argv running the prompt hook as the agent configured it, the prompt event's payload)."""
    def cmd(doc: Any) -> list[str]:
        return ["/bin/sh", "-c", doc]

    read = lambda rel: json.loads((project / rel).read_text())  # noqa: E731
    p = str(project)
    if agent in ("claude-code", "codex"):
        rel = ".claude/settings.json" if agent == "claude-code" else ".codex/hooks.json"
        return cmd(read(rel)["hooks"]["UserPromptSubmit"][0]["hooks"][0]["command"]), {
            "hook_event_name": "UserPromptSubmit", "session_id": "s-1", "prompt": "hello", "cwd": p}
    if agent == "gemini":
        return cmd(read(".gemini/settings.json")["hooks"]["BeforeAgent"][0]["hooks"][0]["command"]), {
            "hook_event_name": "BeforeAgent", "session_id": "s-1", "prompt": "hello", "cwd": p}
    if agent == "copilot":
        return cmd(read(".github/hooks/snapstore.json")["hooks"]["UserPromptSubmit"][0]["bash"]), {
            "hook_event_name": "UserPromptSubmit", "session_id": "s-1", "prompt": "hello", "cwd": p}
    if agent == "cursor":
        return cmd(read(".cursor/hooks.json")["hooks"]["beforeSubmitPrompt"][0]["command"]), {
            "hook_event_name": "beforeSubmitPrompt", "conversation_id": "s-1", "prompt": "hello", "workspace_roots": [p]}
    if agent == "cline":
        return [str(project / ".clinerules" / "hooks" / "UserPromptSubmit")], {
            "hookName": "UserPromptSubmit", "taskId": "s-1", "workspaceRoots": [p], "userPromptSubmit": {"prompt": "hello"}}
    if agent == "windsurf":
        return cmd(read(".windsurf/hooks.json")["hooks"]["pre_user_prompt"][0]["command"]), {
            "agent_action_name": "pre_user_prompt", "trajectory_id": "s-1", "tool_info": {"user_prompt": "hello"}}
    assert agent == "kiro"
    entry = next(h for h in read(".kiro/hooks/snapstore.json")["hooks"] if h["trigger"] == "UserPromptSubmit")
    return cmd(entry["action"]["command"]), {"hook_event_name": "userPromptSubmit", "cwd": p, "prompt": "hello"}


COMMAND_AGENTS = [a for a in agents.AGENTS if a != "opencode"]  # OpenCode's plugin: test_agent_integrate (node)


@pytest.mark.parametrize("agent", COMMAND_AGENTS)
def test_a_written_config_records_with_a_path_that_lacks_snapstore(agent: str, tmp_path: Path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    lines = agents.integrate(agent, str(project), scope="project", mcp=False, remove=False, dry_run=False)
    assert lines and not any(line.startswith("note:") for line in lines)
    argv, payload = _prompt_hook(agent, project)
    assert SNAP in " ".join(argv) or SNAP in (project / ".clinerules/hooks/UserPromptSubmit").read_text()
    done = subprocess.run(argv, input=json.dumps(payload), cwd=project, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == GO_ON.get(agent, ""), done.stdout
    with Store.open(project) as store:
        assert [c.message for c in store.checkpoints()] == ["hello"]


@pytest.mark.parametrize("agent", COMMAND_AGENTS)
def test_a_hook_fails_open_in_its_agents_format_on_a_broken_store_and_a_payload_bomb(agent: str, tmp_path: Path):
    project = tmp_path / "proj"
    project.mkdir()
    agents.integrate(agent, str(project), scope="project", mcp=False, remove=False, dry_run=False)
    argv, payload = _prompt_hook(agent, project)
    env = _env(tmp_path, CLAUDE_PROJECT_DIR=str(project)) if agent == "claude-code" else _env(tmp_path)
    (project / ".snapstore").write_text("not a store\n")  # a broken store
    bomb = "[" * 200_000 + "]" * 200_000  # no parser survives it (RecursionError)
    for raw in (json.dumps(payload), bomb):
        done = subprocess.run(argv, input=raw, cwd=project, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        out = done.stdout.strip()
        if agent in GO_ON:
            assert out == GO_ON[agent] or isinstance(json.loads(out), dict), out
        else:
            assert out == "" or isinstance(json.loads(out), dict), out


@pytest.mark.parametrize("agent", agents.AGENTS)
def test_whatever_escapes_the_hook_is_logged_and_answered_in_the_agents_format(agent: str, tmp_path: Path, run_cli, monkeypatch):
    def broken(*_args: object, **_kw: object) -> str:
        raise RuntimeError("a bug in snapstore")

    monkeypatch.setattr(agents, "hook", broken)
    r = run_cli("hook", agent, stdin=b"{}", env={"XDG_STATE_HOME": str(tmp_path / "state")}, cwd=tmp_path)
    assert r.code == 0 and r.text.strip() == GO_ON.get(agent, ""), (r.text, r.err)
    log = (tmp_path / "state" / "snapstore" / "hook-failures.log").read_text()
    assert f" {agent}: RuntimeError: a bug in snapstore" in log, log


def test_clines_script_goes_on_and_logs_when_snapstore_is_gone_and_doctor_shows_it(tmp_path: Path, run_cli):
    project = tmp_path / "proj"
    hooks = project / ".clinerules" / "hooks"
    hooks.mkdir(parents=True)
    gone = str(tmp_path / "moved-venv" / "bin" / "snapstore")
    script = hooks / "PreToolUse"
    script.write_text(cline.script(executable.Executable((gone,))))
    script.chmod(0o755)
    event = {"hookName": "PreToolUse", "taskId": "t", "workspaceRoots": [str(project)],
             "preToolUse": {"toolName": "write_to_file", "parameters": {"path": "a"}}}
    env = _env(tmp_path)
    done = subprocess.run([str(script)], input=json.dumps(event), cwd=project, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout == '{"cancel": false}\n', (done.stdout, done.stderr)
    log = tmp_path / "state" / "snapstore" / "hook-failures.log"
    assert f"cline: {script}: snapstore exited 127" in log.read_text()
    assert os.stat(log).st_mode & 0o077 == 0
    r = run_cli("doctor", cwd=project, env={"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")})
    assert r.code == 0
    assert f"problem: cline runs {gone}, which does not exist" in r.text, r.text
    assert "exited 127" in r.text and r.text.rstrip().endswith("problem(s)")


def test_doctor_flags_a_bare_snapstore_and_integrate_again_repoints_it(tmp_path: Path, run_cli):
    project = tmp_path / "proj"
    (project / ".claude").mkdir(parents=True)
    old = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "snapstore hook claude-code", "timeout": 20}]}]}}
    (project / ".claude" / "settings.json").write_text(json.dumps(old))
    env = {"HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state")}
    r = run_cli("doctor", cwd=project, env=env)
    assert "problem: claude-code runs 'snapstore' by name" in r.text and "out of date" in r.text, r.text
    again = run_cli("integrate", "claude-code", cwd=project, env=env)
    assert again.code == 0 and "updated hook Stop: " + SNAP in again.text, again.text
    stop = json.loads((project / ".claude" / "settings.json").read_text())["hooks"]["Stop"]
    assert stop == [{"hooks": [{"type": "command", "command": f"{SNAP} hook claude-code", "timeout": 20}]}]
    assert run_cli("doctor", cwd=project, env=env).text.rstrip().endswith("no problems found")


def test_resolution_prefers_the_native_client_then_the_python_entry_point(tmp_path: Path):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.write_text("")
    none = executable.resolve(argv0="-c", python=str(python), which=lambda _name: None)
    assert none.argv == (str(python), "-m", "snapstore")
    py_client = bin_dir / "snapstore-py"
    py_client.write_text(f"#!{python}\n")
    py_client.chmod(0o755)
    assert executable.resolve(argv0="-c", python=str(python)).argv == (str(py_client),)
    native = bin_dir / "snapstore"
    native.write_bytes(b"\x7fELF\x00\x00" + os.fsencode(py_client) + b"\x00")
    native.chmod(0o755)
    found = executable.resolve(argv0=str(py_client), python="/usr/bin/python3")
    assert found.argv == (str(native),)
    assert found.note is not None and "temporary directory" in found.note  # pytest's tmp_path is under /tmp


def test_a_moved_venv_is_noted(monkeypatch, tmp_path: Path):
    monkeypatch.setattr(executable, "in_temporary_directory", lambda _path: False)
    script = tmp_path / "snapstore"
    script.write_text("#!/old/place/.venv/bin/python\nimport sys\n")
    script.chmod(0o755)
    note = executable.note_for(str(script))
    assert note is not None and "looks moved" in note and "/old/place/.venv/bin/python" in note
    native = tmp_path / "native"
    native.write_bytes(b"\x7fELF\x02\x01junk\x00/old/place/.venv/bin/snapstore-py\x00more")
    assert executable.missing_dependency(str(native)) == "/old/place/.venv/bin/snapstore-py"
    native.write_bytes(b"\x7fELF\x02\x01junk\x00" + os.fsencode(script) + b"-py\x00")
    assert executable.missing_dependency(str(native)) is not None
    assert executable.note_for(SNAP) is None  # this checkout's own client names a Python client that exists


def test_every_tool_that_may_write_is_bracketed_and_an_unchanged_tree_records_nothing(tmp_path: Path):
    from snapstore.integrations import codex, cursor, gemini

    for tool in ("mcp__filesystem__write_file", "mcp__github__push_files", "Bash", "Write", "NotebookEdit"):
        assert re.search(MATCHER, tool) and re.search(codex.HOOKS.matcher, "mcp__fs__write") and re.search(gemini.HOOKS.matcher, tool if tool.startswith("mcp__") else "write_file")
    for pattern in (MATCHER, codex.HOOKS.matcher, gemini.HOOKS.matcher, cursor.MATCHER, kiro.MATCHER):
        re.compile(pattern)  # every matcher is a regex (Kiro's "*" was not)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "a.txt").write_text("1\n")
    agents.integrate("claude-code", str(project), scope="project", mcp=False, remove=False, dry_run=False)
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    pre = settings["hooks"]["PreToolUse"][0]
    assert pre["matcher"] == MATCHER
    env = _env(tmp_path, CLAUDE_PROJECT_DIR=str(project))

    def send(name: str, tool: str, call: str) -> None:
        event = {"hook_event_name": name, "session_id": "s", "tool_name": tool, "tool_use_id": call,
                 "tool_input": {"path": str(project / "b.txt")}, "cwd": str(project)}
        done = subprocess.run(["/bin/sh", "-c", pre["hooks"][0]["command"]], input=json.dumps(event), cwd=project,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout == "", done.stderr

    Store.init(project).close()
    with Store.open(project) as store:
        store.snapshot("base")
    send("PreToolUse", "mcp__filesystem__read_file", "c1")
    send("PostToolUse", "mcp__filesystem__read_file", "c1")
    with Store.open(project) as store:
        assert [c.message for c in store.checkpoints()] == ["base"]  # an unchanged tree records nothing
    send("PreToolUse", "mcp__filesystem__write_file", "c2")
    (project / "b.txt").write_text("written by an MCP server\n")
    send("PostToolUse", "mcp__filesystem__write_file", "c2")
    with Store.open(project) as store:
        rows = [(c.message, c.metadata.get("actor")) for c in store.checkpoints()]
    assert rows == [("after mcp__filesystem__write_file: b.txt", "agent"), ("base", None)], rows


def test_kiro_sessions_follow_agent_spawn(tmp_path: Path):
    project = tmp_path / "proj"
    project.mkdir()
    agents.integrate("kiro", str(project), scope="project", mcp=False, remove=False, dry_run=False)
    doc = json.loads((project / ".kiro" / "hooks" / "snapstore.json").read_text())
    assert {h["trigger"] for h in doc["hooks"]} >= {"AgentSpawn", "Stop"}
    command = doc["hooks"][0]["action"]["command"]
    env = _env(tmp_path)

    def send(event: dict[str, Any]) -> None:
        done = subprocess.run(["/bin/sh", "-c", command], input=json.dumps({**event, "cwd": str(project)}), cwd=project,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout == "", done.stderr

    for prompt in ("first session", "second session"):
        send({"hook_event_name": "agentSpawn"})
        send({"hook_event_name": "userPromptSubmit", "prompt": prompt})
        (project / f"{prompt}.txt").write_text("x\n")
        send({"hook_event_name": "stop"})
    with Store.open(project) as store:
        tasks = {c.message: c.task for c in store.checkpoints()}
    assert tasks["first session"] != tasks["second session"]
    assert all(str(t).startswith("kiro-") for t in tasks.values()) and len(set(tasks.values())) == 2


def test_copilot_and_cursor_bracket_mcp_tools_and_skip_read_only_ones():
    from snapstore.integrations import copilot, cursor

    base = {"session_id": "s", "cwd": "/", "tool_input": {"path": "a.txt", "content": "x"}}
    mcp = copilot.normalize({**base, "hook_event_name": "PreToolUse", "tool_name": "github-mcp-server-create_or_update_file"})
    assert mcp is not None and mcp["tool_name"] == "github-mcp-server-create_or_update_file" and mcp["tool_use_id"]
    for read_only in copilot.READ_ONLY_TOOLS:
        assert copilot.normalize({**base, "hook_event_name": "PreToolUse", "tool_name": read_only}) is None
    assert re.fullmatch(cursor.MATCHER, "MCP:filesystem:write_file")
    event = {"conversation_id": "c", "workspace_roots": ["/"], "tool_name": "MCP:filesystem:write_file",
             "tool_input": {"path": "/a.txt", "content": "x"}}
    pre = cursor.normalize({**event, "hook_event_name": "preToolUse"})
    post = cursor.normalize({**event, "hook_event_name": "postToolUse"})
    assert pre is not None and post is not None
    assert pre["tool_name"] == "MCP:filesystem:write_file" and pre["tool_use_id"] == post["tool_use_id"]


INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}) + "\n"


@pytest.mark.parametrize("agent", ["claude-code", "opencode", "codex"])
def test_a_written_mcp_server_entry_starts_with_a_path_that_lacks_snapstore(agent: str, tmp_path: Path):
    pytest.importorskip("mcp")
    tomllib = pytest.importorskip("tomllib")
    project = tmp_path / "proj"
    project.mkdir()
    agents.integrate(agent, str(project), scope="project", mcp=True, remove=False, dry_run=False)
    if agent == "claude-code":
        entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["snapstore"]
        argv = [entry["command"], *entry["args"]]
    elif agent == "opencode":
        argv = json.loads((project / "opencode.json").read_text())["mcp"]["snapstore"]["command"]
    else:
        entry = tomllib.loads((project / ".codex" / "config.toml").read_text())["mcp_servers"]["snapstore"]
        argv = [entry["command"], *entry["args"]]
    assert argv[0] == SNAP
    done = subprocess.run(argv, input=INITIALIZE, cwd=project, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["serverInfo"], done.stderr


def test_integrate_says_once_on_stderr_when_the_executable_is_fragile(tmp_path: Path, run_cli, monkeypatch):
    temp_venv = tmp_path / "venv" / "bin"
    temp_venv.mkdir(parents=True)
    (temp_venv / "python").write_text("")
    program = temp_venv / "snapstore"
    program.write_text(f"#!{temp_venv / 'python'}\n")
    program.chmod(0o755)
    monkeypatch.setattr(executable.sys, "executable", str(temp_venv / "python"))
    monkeypatch.setattr(executable.sys, "argv", ["-c"])
    project = tmp_path / "proj"
    project.mkdir()
    r = run_cli("integrate", "cursor", cwd=project, env={"HOME": str(tmp_path / "home")})
    assert r.code == 0 and f"{program} hook cursor" in r.text
    notes = [line for line in r.err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "temporary directory" in notes[0] and str(program) in notes[0], r.err


def test_a_silent_agents_refused_store_is_logged_for_doctor(tmp_path: Path, run_cli):
    home = tmp_path / "home"
    home.mkdir()
    agents.integrate("kiro", str(home), scope="project", mcp=False, remove=False, dry_run=False)
    command = json.loads((home / ".kiro" / "hooks" / "snapstore.json").read_text())["hooks"][1]["action"]["command"]
    event = {"hook_event_name": "userPromptSubmit", "cwd": str(home), "prompt": "hi"}
    done = subprocess.run(["/bin/sh", "-c", command], input=json.dumps(event), cwd=home, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "", done.stderr  # Kiro shows nothing: the log must
    assert not (home / ".snapstore").exists()
    r = run_cli("doctor", cwd=home, env={"HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "state")})
    assert "kiro: UserPromptSubmit in " + str(home) in r.text and "snapstore init" in r.text, r.text
