"""Cursor, Cline, Windsurf, Kiro and OpenCode (issue 23 req 4): each agent's payloads, written
from its documented schema, mapped onto the one event model and recorded with exact
attribution, through a real `snapstore hook AGENT` process; each agent's stdout contract; a
before and its after event open and close one call."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import subprocess_env

from snapstore.integrations import agents
from snapstore.store import Store

Payload = dict[str, Any]


def _cursor(tree: Path) -> dict[str, Callable[..., Payload]]:
    def base(name: str, **f: Any) -> Payload:
        return {"conversation_id": "cu-1", "generation_id": "gen-1", "hook_event_name": name,
                "workspace_roots": [str(tree)], **f}
    return {
        "prompt": lambda text: base("beforeSubmitPrompt", prompt=text, attachments=[]),
        "pre_edit": lambda p: base("preToolUse", tool_name="StrReplace", tool_input={"file_path": str(tree / p), "old_string": "1", "new_string": "2"}),
        "post_edit": lambda p: base("afterFileEdit", file_path=str(tree / p), edits=[{"old_string": "1", "new_string": "2"}]),
        "pre_shell": lambda c: base("beforeShellExecution", command=c, cwd=str(tree)),
        "post_shell": lambda c: base("postToolUseFailure", tool_name="Shell", tool_input={"command": c}, error="exit 3"),
        "stop": lambda: base("stop", status="completed", loop_count=0),
    }


def _cline(tree: Path) -> dict[str, Callable[..., Payload]]:
    def base(name: str, **f: Any) -> Payload:
        return {"clineVersion": "3.40.0", "hookName": name, "timestamp": "1764130000000", "taskId": "cl-1",
                "workspaceRoots": [str(tree)], "userId": "u-1", **f}
    return {
        "prompt": lambda text: base("UserPromptSubmit", userPromptSubmit={"prompt": text, "attachments": []}),
        "pre_edit": lambda p: base("PreToolUse", preToolUse={"toolName": "replace_in_file", "parameters": {"path": p, "diff": "..."}}),
        "post_edit": lambda p: base("PostToolUse", postToolUse={"toolName": "replace_in_file", "parameters": {"path": p, "diff": "..."}, "result": "ok", "success": True, "executionTimeMs": 4}),
        "pre_shell": lambda c: base("PreToolUse", preToolUse={"toolName": "execute_command", "parameters": {"command": c, "requires_approval": "false"}}),
        "post_shell": lambda c: base("PostToolUse", postToolUse={"toolName": "execute_command", "parameters": {"command": c, "requires_approval": "false"}, "result": "exit 3", "success": False, "executionTimeMs": 9}),
        "stop": lambda: base("TaskComplete", taskComplete={"taskMetadata": {"taskId": "cl-1"}}),
    }


def _windsurf(tree: Path) -> dict[str, Callable[..., Payload]]:
    def base(name: str, info: dict[str, Any]) -> Payload:
        return {"agent_action_name": name, "trajectory_id": "ws-1", "execution_id": "ex-1",
                "timestamp": "2026-11-26T10:00:00Z", "tool_info": info}
    return {
        "prompt": lambda text: base("pre_user_prompt", {"user_prompt": text}),
        "pre_edit": lambda p: base("pre_write_code", {"file_path": str(tree / p)}),
        "post_edit": lambda p: base("post_write_code", {"file_path": str(tree / p), "edits": [{"old_string": "1", "new_string": "2"}]}),
        "pre_shell": lambda c: base("pre_run_command", {"command_line": c, "cwd": str(tree)}),
        "post_shell": lambda c: base("post_run_command", {"command_line": c, "cwd": str(tree)}),
        "stop": lambda: base("post_cascade_response", {"response": "done"}),
    }


def _kiro(tree: Path) -> dict[str, Callable[..., Payload]]:
    def base(name: str, **f: Any) -> Payload:
        return {"hook_event_name": name, "cwd": str(tree), **f}
    edit = {"tool_name": "fs_write", "tool_input": {"command": "str_replace", "path": "", "old_str": "1", "new_str": "2"}}

    def tool(p: str) -> dict[str, Any]:
        return {**edit, "tool_input": {**edit["tool_input"], "path": str(tree / p)}}
    return {
        "prompt": lambda text: base("userPromptSubmit", prompt=text),
        "pre_edit": lambda p: base("preToolUse", **tool(p)),
        "post_edit": lambda p: base("postToolUse", **tool(p), tool_response={"success": True, "result": ["ok"]}),
        "pre_shell": lambda c: base("preToolUse", tool_name="execute_bash", tool_input={"command": c}),
        "post_shell": lambda c: base("postToolUse", tool_name="execute_bash", tool_input={"command": c}, tool_response={"success": False, "result": ["exit 3"]}),
        "stop": lambda: base("stop"),
    }


def _opencode(tree: Path) -> dict[str, Callable[..., Payload]]:
    def base(name: str, **f: Any) -> Payload:
        return {"hook_event_name": name, "sessionID": "oc-1", "directory": str(tree), **f}
    return {
        "prompt": lambda text: base("chat.message", prompt=text),
        "pre_edit": lambda p: base("tool.execute.before", callID=f"call-{p}", tool="edit", args={"filePath": str(tree / p), "oldString": "1", "newString": "2"}),
        "post_edit": lambda p: base("tool.execute.after", callID=f"call-{p}", tool="edit", args={"filePath": str(tree / p), "oldString": "1", "newString": "2"}),
        "pre_shell": lambda c: base("tool.execute.before", callID="call_2", tool="bash", args={"command": c, "description": "d"}),
        "post_shell": lambda c: base("tool.execute.after", callID="call_2", tool="bash", args={"command": c, "description": "d"}, exit=3),
        "stop": lambda: base("session.idle"),
    }


AGENTS: dict[str, tuple[Callable[[Path], dict[str, Callable[..., Payload]]], str, str, bool]] = {
    # agent: (payloads, session, what stdout must be, whether a failed shell call is reported)
    "cursor": (_cursor, "cu-1", "{}", True),
    "cline": (_cline, "cl-1", '{"cancel": false}', True),
    "windsurf": (_windsurf, "ws-1", "", False),
    "kiro": (_kiro, "", "", True),  # no session id: one derived from Kiro's session boundaries
    "opencode": (_opencode, "oc-1", "", True),
}


def hook(agent: str, doc: Payload, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in subprocess_env().items() if not k.startswith(("CLAUDE_", "GEMINI_"))}
    return subprocess.run([sys.executable, "-m", "snapstore", "hook", agent, "--no-service"], input=json.dumps(doc),
                          cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_session_is_recorded_with_exact_attribution(agent: str, tmp_path: Path):
    make, session, stdout, reports_failure = AGENTS[agent]
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    events = make(tree)
    # Hooks run in the project for Windsurf and Kiro (they name it by their cwd); the others
    # name the project in the payload, so they run elsewhere to show it.
    where = tree if agent in ("windsurf", "kiro") else tmp_path
    outs = [hook(agent, events["prompt"]("fix the bug"), where)]
    (tree / "mine.txt").write_text("the user's\n")
    outs.append(hook(agent, events["pre_edit"]("a.py"), where))
    (tree / "a.py").write_text("x = 2\n")
    outs.append(hook(agent, events["post_edit"]("a.py"), where))
    outs.append(hook(agent, events["pre_shell"]("touch made.txt; exit 3"), where))
    (tree / "made.txt").write_text("")
    outs.append(hook(agent, events["post_shell"]("touch made.txt; exit 3"), where))
    (tree / "mine2.txt").write_text("also the user's\n")
    outs.append(hook(agent, events["stop"](), where))
    for done in outs:
        assert done.returncode == 0 and done.stdout.strip() == stdout, (done.stdout, done.stderr)
    with Store.open(tree) as store:
        if not session:
            session = str(store.checkpoints()[0].task)
            assert session.startswith("kiro-"), session
        rows = [(c.message, c.metadata["actor"], c.metadata["agent"], c.metadata["session_id"])
                for c in reversed(store.checkpoints(task=session))]
    shell = "after failed Bash" if reports_failure else "after Bash"
    assert rows == [
        ("fix the bug", "user", agent, session),
        ("before Edit: a.py", "user", agent, session),
        ("after Edit: a.py", "agent", agent, session),
        (f"{shell}: touch made.txt; exit 3", "agent", agent, session),
        ("end of turn", "user", agent, session),
    ], rows
    assert not (tmp_path / ".snapstore").exists()  # the payload's project, not the hook's cwd
    with Store.open(tree) as store:
        store.revert(task=session, actor="agent")
    assert (tree / "a.py").read_text() == "x = 1\n" and not (tree / "made.txt").exists()
    assert (tree / "mine.txt").exists() and (tree / "mine2.txt").exists()


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_a_before_and_its_after_open_and_close_one_call(agent: str, tmp_path: Path):
    module = agents.adapter(agent)
    events = AGENTS[agent][0](tmp_path)
    for pre, post, arg in (("pre_edit", "post_edit", "a.py"), ("pre_shell", "post_shell", "make")):
        before, after = module.normalize(events[pre](arg)), module.normalize(events[post](arg))
        assert before["hook_event_name"] == "PreToolUse" and after["hook_event_name"].startswith("PostToolUse")
        assert before["tool_use_id"] == after["tool_use_id"] != ""
    other = module.normalize(events["pre_edit"]("b.py"))
    assert other["tool_use_id"] != module.normalize(events["pre_edit"]("a.py"))["tool_use_id"]


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_events_that_record_nothing_print_what_the_agent_expects(agent: str, tmp_path: Path):
    tree = tmp_path / "proj"
    tree.mkdir()
    junk: list[Payload] = [
        {"hook_event_name": "sessionStart", "hookName": "TaskStart", "agent_action_name": "pre_read_code"},
        {"hook_event_name": "preToolUse", "hookName": "PreToolUse", "tool_name": "fs_read", "tool": "read",
         "preToolUse": {"toolName": "read_file", "parameters": {"path": "a"}}, "agent_action_name": "pre_mcp_tool_use"},
    ]
    for doc in junk:
        done = hook(agent, doc, tree)
        assert done.returncode == 0 and done.stdout.strip() == AGENTS[agent][2], done
    bad = subprocess.run([sys.executable, "-m", "snapstore", "hook", agent, "--no-service"], input="not json",
                         cwd=tree, env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 0 and bad.stdout.strip() == AGENTS[agent][2] and "Traceback" not in bad.stderr
    assert not (tree / ".snapstore").exists()  # nothing recorded, nothing created


def test_cursor_reports_a_shell_command_twice_as_one_call(tmp_path: Path):
    tree = tmp_path / "proj"
    tree.mkdir()
    events = _cursor(tree)
    base = {"conversation_id": "cu-1", "workspace_roots": [str(tree)]}
    hook("cursor", events["prompt"]("go"), tree)
    hook("cursor", {**base, "hook_event_name": "preToolUse", "tool_name": "Shell", "tool_input": {"command": "make"}}, tree)
    hook("cursor", {**base, "hook_event_name": "beforeShellExecution", "command": "make", "cwd": str(tree)}, tree)
    (tree / "out.o").write_text("built")
    hook("cursor", {**base, "hook_event_name": "postToolUse", "tool_name": "Shell", "tool_input": {"command": "make"}}, tree)
    hook("cursor", {**base, "hook_event_name": "afterShellExecution", "command": "make", "output": ""}, tree)
    (tree / "mine.txt").write_text("the user's, after the call ended\n")
    hook("cursor", events["stop"](), tree)
    with Store.open(tree) as store:
        rows = [(c.message, c.metadata["actor"]) for c in reversed(store.checkpoints(task="cu-1"))]
    # The call closed at its first after-event: the user's later file is the user's.
    assert rows == [("go", "user"), ("after Bash: make", "agent"), ("end of turn", "user")], rows


#: Every event each adapter subscribes to, as the agent sends it (documented schema), and the
#: event of the model it becomes (None: recorded as nothing).
EVERY_EVENT: list[tuple[str, Payload, str | None]] = [
    ("cursor", {"hook_event_name": "beforeSubmitPrompt", "conversation_id": "c", "prompt": "p"}, "UserPromptSubmit"),
    ("cursor", {"hook_event_name": "preToolUse", "conversation_id": "c", "tool_name": "Write", "tool_input": {"file_path": "/p/a"}}, "PreToolUse"),
    ("cursor", {"hook_event_name": "postToolUse", "conversation_id": "c", "tool_name": "Edit", "tool_input": {"file_path": "/p/a"}}, "PostToolUse"),
    ("cursor", {"hook_event_name": "postToolUseFailure", "conversation_id": "c", "tool_name": "Shell", "tool_input": {"command": "x"}}, "PostToolUseFailure"),
    ("cursor", {"hook_event_name": "beforeShellExecution", "conversation_id": "c", "command": "x", "cwd": "/p"}, "PreToolUse"),
    ("cursor", {"hook_event_name": "afterShellExecution", "conversation_id": "c", "command": "x", "output": ""}, "PostToolUse"),
    ("cursor", {"hook_event_name": "afterFileEdit", "conversation_id": "c", "file_path": "/p/a", "edits": []}, "PostToolUse"),
    ("cursor", {"hook_event_name": "stop", "conversation_id": "c", "status": "completed", "loop_count": 0}, "Stop"),
    ("cursor", {"hook_event_name": "preCompact", "conversation_id": "c"}, "PreCompact"),
    ("cursor", {"hook_event_name": "preToolUse", "conversation_id": "c", "tool_name": "Read", "tool_input": {}}, None),
    ("cline", {"hookName": "UserPromptSubmit", "taskId": "t", "userPromptSubmit": {"prompt": "p"}}, "UserPromptSubmit"),
    ("cline", {"hookName": "PreToolUse", "taskId": "t", "preToolUse": {"toolName": "write_to_file", "parameters": {"path": "a"}}}, "PreToolUse"),
    ("cline", {"hookName": "PostToolUse", "taskId": "t", "postToolUse": {"toolName": "apply_patch", "parameters": {"path": "a"}, "success": True}}, "PostToolUse"),
    ("cline", {"hookName": "PostToolUse", "taskId": "t", "postToolUse": {"toolName": "execute_command", "parameters": {"command": "x"}, "success": False}}, "PostToolUseFailure"),
    ("cline", {"hookName": "TaskComplete", "taskId": "t", "taskComplete": {}}, "Stop"),
    ("cline", {"hookName": "TaskCancel", "taskId": "t", "taskCancel": {}}, "Stop"),
    ("cline", {"hookName": "PreCompact", "taskId": "t", "preCompact": {}}, "PreCompact"),
    ("cline", {"hookName": "TaskStart", "taskId": "t", "taskStart": {}}, None),
    ("cline", {"hookName": "PreToolUse", "taskId": "t", "preToolUse": {"toolName": "read_file", "parameters": {"path": "a"}}}, None),
    ("windsurf", {"agent_action_name": "pre_user_prompt", "trajectory_id": "w", "tool_info": {"user_prompt": "p"}}, "UserPromptSubmit"),
    ("windsurf", {"agent_action_name": "pre_write_code", "trajectory_id": "w", "tool_info": {"file_path": "/p/a"}}, "PreToolUse"),
    ("windsurf", {"agent_action_name": "post_write_code", "trajectory_id": "w", "tool_info": {"file_path": "/p/a", "edits": []}}, "PostToolUse"),
    ("windsurf", {"agent_action_name": "pre_run_command", "trajectory_id": "w", "tool_info": {"command_line": "x", "cwd": "/"}}, "PreToolUse"),
    ("windsurf", {"agent_action_name": "post_run_command", "trajectory_id": "w", "tool_info": {"command_line": "x", "cwd": "/"}}, "PostToolUse"),
    ("windsurf", {"agent_action_name": "post_cascade_response", "trajectory_id": "w", "tool_info": {"response": "r"}}, "Stop"),
    ("windsurf", {"agent_action_name": "pre_read_code", "trajectory_id": "w", "tool_info": {"file_path": "/p/a"}}, None),
    ("kiro", {"hook_event_name": "userPromptSubmit", "cwd": "/", "prompt": "p"}, "UserPromptSubmit"),
    ("kiro", {"hook_event_name": "preToolUse", "cwd": "/", "tool_name": "fs_write", "tool_input": {"path": "a"}}, "PreToolUse"),
    ("kiro", {"hook_event_name": "postToolUse", "cwd": "/", "tool_name": "execute_bash", "tool_input": {"command": "x"}, "tool_response": {"success": True}}, "PostToolUse"),
    ("kiro", {"hook_event_name": "postToolUse", "cwd": "/", "tool_name": "@git/commit", "tool_input": {}, "tool_response": {"success": False}}, "PostToolUseFailure"),
    ("kiro", {"hook_event_name": "stop", "cwd": "/"}, "Stop"),
    ("kiro", {"hook_event_name": "agentSpawn", "cwd": "/"}, None),
    ("kiro", {"hook_event_name": "preToolUse", "cwd": "/", "tool_name": "fs_read", "tool_input": {"path": "a"}}, None),
    ("opencode", {"hook_event_name": "chat.message", "sessionID": "o", "prompt": "p"}, "UserPromptSubmit"),
    ("opencode", {"hook_event_name": "tool.execute.before", "sessionID": "o", "callID": "c", "tool": "write", "args": {"filePath": "/p/a"}}, "PreToolUse"),
    ("opencode", {"hook_event_name": "tool.execute.after", "sessionID": "o", "callID": "c", "tool": "patch", "args": {}}, "PostToolUse"),
    ("opencode", {"hook_event_name": "tool.execute.after", "sessionID": "o", "callID": "c", "tool": "bash", "args": {"command": "x"}, "exit": 1}, "PostToolUseFailure"),
    ("opencode", {"hook_event_name": "session.idle", "sessionID": "o"}, "Stop"),
    ("opencode", {"hook_event_name": "session.compacted", "sessionID": "o"}, "PreCompact"),
    ("opencode", {"hook_event_name": "tool.execute.before", "sessionID": "o", "callID": "c", "tool": "read", "args": {}}, None),
]


@pytest.mark.parametrize(("agent", "payload", "expected"), EVERY_EVENT, ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(EVERY_EVENT)])
def test_every_subscribed_event_maps_onto_the_model(agent: str, payload: Payload, expected: str | None):
    event = agents.adapter(agent).normalize(payload)
    if expected is None:
        assert event is None
        return
    assert event is not None and event["hook_event_name"] == expected
    assert event["session_id"]  # every checkpoint of the session lands in one task
    if expected in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        assert event["tool_use_id"] and event["tool_name"]


def test_every_event_an_integration_subscribes_to_is_in_the_table():
    from snapstore.integrations import cline, cursor, kiro, windsurf

    seen = {(a, str(p.get("hook_event_name") or p.get("hookName") or p.get("agent_action_name"))) for a, p, _ in EVERY_EVENT}
    subscribed = ({("cursor", e) for e in cursor.EVENTS} | {("cline", e) for e in cline.EVENTS}
                  | {("windsurf", e) for e in windsurf.EVENTS}
                  | {("kiro", e[:1].lower() + e[1:]) for e in kiro.TRIGGERS})
    assert subscribed <= seen, subscribed - seen
