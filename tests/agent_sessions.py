"""Each agent's hook payloads, in the shape its documentation gives (issue 37 req 7), behind one
interface the attribution differential test drives: a prompt, a file edit's before/after, a
shell call's before/after (failing, or backgrounded by the agent's own flag), a turn's end and,
where the agent has one, its word that a background command finished.

Sources: research/agents-hooks.md (Claude Code, Codex, Gemini, Copilot CLI's "VS Code
compatible" PascalCase form and its Notification hook, Cursor, Cline, Windsurf, Kiro CLI,
OpenCode through snapstore's plugin)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Payload = dict[str, Any]


@dataclass
class Shell:
    """One shell call as the agent reports it."""

    call: str  # an id for agents that send one
    command: str
    flagged: bool = False  # backgrounded by the agent's own flag
    failed: bool = False


@dataclass
class Profile:
    agent: str
    #: The task (session) its checkpoints go to.
    session: str
    #: Whether the agent has a flag of its own that backgrounds a shell call.
    has_flag: bool
    prompt: Callable[[str], Payload]
    edit: Callable[[str, str, Path, str], Payload]  # (phase "pre"/"post", call, file, text)
    shell: Callable[[str, Shell], Payload]
    #: The turn's end (the calls still running in the background, by call id).
    stop: Callable[[list[str]], Payload]
    #: The agent's word that a background command finished (None: it never says).
    done: Callable[[], Payload] | None = None
    #: The session's first event, where the agent has one (Kiro's agentSpawn: its payloads carry
    #: no session id, so the task is made there and :attr:`session` is only its prefix).
    spawn: Callable[[], Payload] | None = None


def _claude_like(tree: Path, agent: str, session: str) -> Profile:
    base = {"session_id": session, "transcript_path": str(tree.parent / f"{session}.jsonl"), "cwd": str(tree)}

    def tool(phase: str, name: str, call: str, tool_input: Payload, failed: bool = False) -> Payload:
        event = {"pre": "PreToolUse", "post": "PostToolUse"}[phase]
        doc = {**base, "hook_event_name": event, "tool_name": name, "tool_input": tool_input, "tool_use_id": call}
        if phase == "post" and failed and agent == "claude-code":
            return {**doc, "hook_event_name": "PostToolUseFailure", "error": "Exit code 3", "is_interrupt": False}
        if phase == "post":
            doc["tool_response"] = {"exit_code": 3} if failed else {"success": True}
        return doc

    def edit(phase: str, call: str, path: Path, text: str) -> Payload:
        if agent == "codex":  # file edits are apply_patch, the patch in tool_input.command
            patch = f"*** Begin Patch\n*** Add File: {path.name}\n+{text}\n*** End Patch\n"
            return tool(phase, "apply_patch", call, {"command": patch})
        return tool(phase, "Write", call, {"file_path": str(path), "content": text})

    def shell(phase: str, s: Shell) -> Payload:
        tool_input: Payload = {"command": s.command, "description": "run it"}
        if s.flagged:
            tool_input["run_in_background"] = True
        return tool(phase, "Bash", s.call, tool_input, s.failed)

    def stop(running: list[str]) -> Payload:
        doc = {**base, "hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": "done"}
        if agent == "claude-code":
            doc["background_tasks"] = [{"id": c, "type": "bash"} for c in running]
        return doc

    return Profile(
        agent, session, agent == "claude-code",
        prompt=lambda text: {**base, "hook_event_name": "UserPromptSubmit", "prompt": text},
        edit=edit, shell=shell, stop=stop,
    )


def _gemini(tree: Path) -> Profile:
    base = {"session_id": "gm-1", "transcript_path": str(tree.parent / "gm.json"), "cwd": str(tree), "timestamp": "2026-11-28T10:00:00Z"}

    def tool(phase: str, name: str, args: Payload, failed: bool = False) -> Payload:
        if phase == "pre":
            return {**base, "hook_event_name": "BeforeTool", "tool_name": name, "tool_input": args}
        response: Payload = {"llmContent": "ok", "returnDisplay": "ok"}
        if failed:
            response["error"] = {"message": "Command exited with code 3", "type": "shell_execute_error"}
        return {**base, "hook_event_name": "AfterTool", "tool_name": name, "tool_input": args, "tool_response": response}

    def shell(phase: str, s: Shell) -> Payload:
        args: Payload = {"command": s.command, "description": "run it", "is_background": s.flagged}
        return tool(phase, "run_shell_command", args, s.failed)

    return Profile(
        "gemini", "gm-1", True,
        prompt=lambda text: {**base, "hook_event_name": "BeforeAgent", "prompt": text},
        edit=lambda phase, call, path, text: tool(phase, "write_file", {"file_path": str(path), "content": text}),
        shell=shell,
        stop=lambda running: {**base, "hook_event_name": "AfterAgent", "prompt": "p", "prompt_response": "r", "stop_hook_active": False},
    )


def _copilot(tree: Path) -> Profile:
    base = {"session_id": "cp-1", "timestamp": "2026-11-28T10:00:00Z", "cwd": str(tree)}

    def tool(phase: str, name: str, args: Payload, failed: bool = False) -> Payload:
        if phase == "pre":
            return {**base, "hook_event_name": "PreToolUse", "tool_name": name, "tool_input": args}
        if failed:
            return {**base, "hook_event_name": "PostToolUseFailure", "tool_name": name, "tool_input": args, "error": "exit code 3"}
        result = {"result_type": "success", "text_result_for_llm": "ok"}
        return {**base, "hook_event_name": "PostToolUse", "tool_name": name, "tool_input": args, "tool_result": result}

    def shell(phase: str, s: Shell) -> Payload:
        args = {"command": s.command, "description": "run it", "mode": "async" if s.flagged else "sync"}
        return tool(phase, "bash", args, s.failed)

    return Profile(
        "copilot", "cp-1", True,
        prompt=lambda text: {**base, "hook_event_name": "UserPromptSubmit", "prompt": text},
        edit=lambda phase, call, path, text: tool(phase, "create", {"path": str(path), "file_text": text}),
        shell=shell,
        stop=lambda running: {**base, "hook_event_name": "Stop", "transcript_path": str(tree.parent / "cp.jsonl"), "stop_reason": "end_turn"},
        done=lambda: {"sessionId": "cp-1", "timestamp": 1764324000000, "cwd": str(tree), "hook_event_name": "Notification",
                      "message": "Shell command completed", "title": "Shell completed", "notification_type": "shell_completed"},
    )


def _cursor(tree: Path) -> Profile:
    base = {"conversation_id": "cu-1", "generation_id": "gen-1", "workspace_roots": [str(tree)]}

    def tool(phase: str, name: str, args: Payload, failed: bool = False) -> Payload:
        event = "preToolUse" if phase == "pre" else ("postToolUseFailure" if failed else "postToolUse")
        doc = {**base, "hook_event_name": event, "tool_name": name, "tool_input": args}
        if phase == "post":
            doc["error" if failed else "tool_output"] = "exit 3" if failed else "ok"
        return doc

    def shell(phase: str, s: Shell) -> Payload:
        return tool(phase, "Shell", {"command": s.command, "is_background": s.flagged}, s.failed)

    return Profile(
        "cursor", "cu-1", True,
        prompt=lambda text: {**base, "hook_event_name": "beforeSubmitPrompt", "prompt": text, "attachments": []},
        edit=lambda phase, call, path, text: tool(phase, "Write", {"file_path": str(path), "contents": text}),
        shell=shell,
        stop=lambda running: {**base, "hook_event_name": "stop", "status": "completed", "loop_count": 0},
    )


def _cline(tree: Path) -> Profile:
    def base(name: str, **f: Any) -> Payload:
        return {"clineVersion": "3.40.0", "hookName": name, "timestamp": "1764324000000", "taskId": "cl-1",
                "workspaceRoots": [str(tree)], "userId": "u-1", **f}

    def tool(phase: str, name: str, params: Payload, result: str = "ok", success: bool = True) -> Payload:
        if phase == "pre":
            return base("PreToolUse", preToolUse={"toolName": name, "parameters": params})
        return base("PostToolUse", postToolUse={"toolName": name, "parameters": params, "result": result,
                                                "success": success, "executionTimeMs": 7})

    def shell(phase: str, s: Shell) -> Payload:
        # Cline's "Proceed While Running": the call returns while the command runs on.
        result = "Command is still running in the user's terminal.\nHere's the output so far:\n" if s.flagged else "exit 3" if s.failed else "ok"
        return tool(phase, "execute_command", {"command": s.command, "requires_approval": "false"}, result, not s.failed)

    return Profile(
        "cline", "cl-1", True,
        prompt=lambda text: base("UserPromptSubmit", userPromptSubmit={"prompt": text, "attachments": []}),
        edit=lambda phase, call, path, text: tool(phase, "write_to_file", {"path": path.name, "content": text}),
        shell=shell,
        stop=lambda running: base("TaskComplete", taskComplete={"taskMetadata": {"taskId": "cl-1"}}),
    )


def _windsurf(tree: Path) -> Profile:
    def base(name: str, info: Payload) -> Payload:
        return {"agent_action_name": name, "trajectory_id": "ws-1", "execution_id": "ex-1",
                "timestamp": "2026-11-28T10:00:00Z", "tool_info": info}

    return Profile(
        "windsurf", "ws-1", False,
        prompt=lambda text: base("pre_user_prompt", {"user_prompt": text}),
        edit=lambda phase, call, path, text: base(f"{phase}_write_code", {"file_path": str(path), **({"edits": [{"old_string": "", "new_string": text}]} if phase == "post" else {})}),
        shell=lambda phase, s: base(f"{phase}_run_command", {"command_line": s.command, "cwd": str(tree)}),
        stop=lambda running: base("post_cascade_response", {"response": "done"}),
    )


def _kiro(tree: Path) -> Profile:
    def base(name: str, **f: Any) -> Payload:
        return {"hook_event_name": name, "cwd": str(tree), **f}

    def tool(phase: str, name: str, args: Payload, failed: bool = False) -> Payload:
        if phase == "pre":
            return base("preToolUse", tool_name=name, tool_input=args)
        return base("postToolUse", tool_name=name, tool_input=args, tool_response={"success": not failed, "result": ["exit 3" if failed else "ok"]})

    return Profile(
        "kiro", "kiro", False,
        prompt=lambda text: base("userPromptSubmit", prompt=text),
        edit=lambda phase, call, path, text: tool(phase, "fs_write", {"command": "create", "path": str(path), "file_text": text}),
        shell=lambda phase, s: tool(phase, "execute_bash", {"command": s.command}, s.failed),
        stop=lambda running: base("stop"),
        spawn=lambda: base("agentSpawn"),
    )


def _opencode(tree: Path) -> Profile:
    def base(name: str, **f: Any) -> Payload:
        return {"hook_event_name": name, "sessionID": "oc-1", "directory": str(tree), **f}

    def tool(phase: str, call: str, name: str, args: Payload, exit_code: int | None = None) -> Payload:
        event = "tool.execute.before" if phase == "pre" else "tool.execute.after"
        extra = {"exit": exit_code} if phase == "post" and exit_code is not None else {}
        return base(event, callID=call, tool=name, args=args, **extra)

    return Profile(
        "opencode", "oc-1", False,
        prompt=lambda text: base("chat.message", prompt=text),
        edit=lambda phase, call, path, text: tool(phase, call, "write", {"filePath": str(path), "content": text}),
        shell=lambda phase, s: tool(phase, s.call, "bash", {"command": s.command, "description": "run it"}, 3 if s.failed else 0),
        stop=lambda running: base("session.idle"),
    )


def profile(agent: str, tree: Path) -> Profile:
    """The payload builders of ``agent`` for a session in ``tree``."""
    if agent in ("claude-code", "codex"):
        return _claude_like(tree, agent, "cc-1" if agent == "claude-code" else "cx-1")
    return {
        "gemini": _gemini, "copilot": _copilot, "cursor": _cursor, "cline": _cline,
        "windsurf": _windsurf, "kiro": _kiro, "opencode": _opencode,
    }[agent](tree)
