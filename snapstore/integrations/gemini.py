"""Google Gemini CLI: its hook events, mapped onto the one event model, and its settings.

Gemini sends Claude Code's base fields (``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``) under other event names, and tool events carry no call id:

==================  ==================================================================
Gemini              the event model (:mod:`snapstore.integrations.claude_code`)
==================  ==================================================================
``BeforeAgent``     ``UserPromptSubmit`` (``prompt``)
``BeforeTool``      ``PreToolUse``
``AfterTool``       ``PostToolUse``, or ``PostToolUseFailure`` when ``tool_response.error``
``AfterAgent``      ``Stop``
``PreCompress``     ``PreCompact``
==================  ==================================================================

A call id is made from the tool's name and arguments (a BeforeTool and its AfterTool carry the
same), so the attribution of running calls holds as for Claude Code; a ``run_shell_command`` with
``is_background`` runs on after its AfterTool (what changes next is ``unknown``).  Gemini parses a hook's
stdout as JSON on exit 0: the hook prints ``{}`` when it has nothing to say.  Hooks and the MCP
server live in ``.gemini/settings.json`` (project) or ``~/.gemini/settings.json`` (user); hook
timeouts are in milliseconds.  The project is ``$GEMINI_PROJECT_DIR``, else the event's ``cwd``.
"""

from __future__ import annotations

import os
from typing import Any

from snapstore.errors import UsageError
from snapstore.integrations import event_model
from snapstore.integrations.executable import resolve
from snapstore.integrations.settings import (
    HookSpec,
    add_hooks,
    add_server,
    check_in_project,
    mcp_entry,
    remove_hooks,
    remove_server,
    update_file,
)

EVENT_MAP = {
    "BeforeAgent": "UserPromptSubmit",
    "BeforeTool": "PreToolUse",
    "AfterTool": "PostToolUse",
    "AfterAgent": "Stop",
    "PreCompress": "PreCompact",
}
#: Gemini's tools that change files: the shell, and its two file editors.
TOOLS = ("run_shell_command", "write_file", "replace")
HOOKS = HookSpec(
    "gemini",
    events=tuple(EVENT_MAP),
    tool_events=("BeforeTool", "AfterTool"),
    # MCP servers' tools reach hooks as mcp__<server>__<tool>: any of them may write.
    matcher="|".join(TOOLS) + "|mcp__.*",
    timeout=20_000,
)
SCOPES = ("project", "user")
#: Gemini's tool names, as the checkpoints name them (the event model's).
TOOL_NAMES = {"run_shell_command": "Bash", "write_file": "Write", "replace": "Edit"}


def normalize(event: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None for an event snapstore does not record."""
    name = EVENT_MAP.get(str(event.get("hook_event_name", "")))
    if name is None:
        return None
    out = dict(event)
    out["hook_event_name"] = name
    tool = str(event.get("tool_name", ""))
    if name in ("PreToolUse", "PostToolUse"):
        out["tool_name"] = TOOL_NAMES.get(tool, tool)
        out["tool_use_id"] = event_model.call_id("gemini", tool, event.get("tool_input"))
        response = event.get("tool_response")
        if name == "PostToolUse" and isinstance(response, dict) and response.get("error"):
            out["hook_event_name"] = "PostToolUseFailure"
    return out


def project_of(event: dict[str, Any]) -> str | None:
    """``$GEMINI_PROJECT_DIR``, else the event's ``cwd`` (an absolute directory), else None."""
    for candidate in (os.environ.get("GEMINI_PROJECT_DIR"), event.get("cwd")):
        if isinstance(candidate, str) and os.path.isabs(candidate) and os.path.isdir(candidate):
            return candidate
    return None


def reply(out: str) -> str:
    """Gemini parses stdout as JSON on exit 0: ``{}`` when there is nothing to say."""
    return out or "{}"


def settings_path(scope: str, project: str, home: str) -> str:
    if scope not in SCOPES:
        raise UsageError(f"Gemini CLI has no {scope!r} scope (use {' or '.join(SCOPES)})")
    return os.path.join(project if scope == "project" else home, ".gemini", "settings.json")


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Add (or ``remove``) snapstore's Gemini hooks, and with ``mcp`` its MCP server, in one
    settings file; the changes."""
    home = home if home is not None else os.path.expanduser("~")
    project = os.path.abspath(project)
    path = settings_path(scope, project, home)
    if scope == "project":
        check_in_project(path, project)
    exe = resolve()

    def change(doc: dict[str, Any]) -> list[str]:
        if remove:
            return remove_hooks(doc, HOOKS) + (remove_server(doc, ["mcpServers"]) if mcp else [])
        return add_hooks(doc, HOOKS, exe) + (add_server(doc, ["mcpServers"], mcp_entry(exe)) if mcp else [])

    return update_file(path, change, dry_run)
