"""GitHub Copilot CLI: its hooks, in their "VS Code compatible" form.

Copilot CLI loads every ``.github/hooks/*.json`` of the repository; snapstore's entries are one
file of its own, ``.github/hooks/snapstore.json``, so adding and removing never touch the user's
hooks.  Configured with PascalCase event names, Copilot sends snake_case payloads in Claude
Code's shape (``hook_event_name``, ``session_id``, ``cwd``, ``tool_name``, ``tool_input``,
``transcript_path`` on Stop), including ``PostToolUseFailure``; tool events carry no call id
and fire for every tool, so only the tools that change files are recorded (``bash``,
``powershell``, ``create``, ``edit``, named as the event model names them) and a call id is made
from the tool's name and arguments.  A ``bash`` call with ``mode: "async"`` or ``detach`` runs on
after its ``postToolUse``: what changes until Copilot's ``Notification`` of type
``shell_completed`` (or ``shell_detached_completed``) is labelled ``unknown``
(:mod:`snapstore.integrations.hook_state`).  Copilot reads a ``preToolUse`` hook's stdout as a
permission decision: the hook prints nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from snapstore.integrations import event_model, hook_state
from snapstore.integrations.settings import HOOK_TIMEOUT

EVENTS = (
    "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "PreCompact",
    "Notification",
)
#: Copilot's notifications that a background (async or detached) shell command finished.
SHELL_DONE = ("shell_completed", "shell_detached_completed")
TOOL_NAMES = {"bash": "Bash", "powershell": "PowerShell", "create": "Write", "edit": "Edit"}
COMMAND = "snapstore hook copilot"
FILENAME = "snapstore.json"
#: Copilot CLI's MCP server entry (``~/.copilot/mcp-config.json``): a local server, every tool.
MCP_ENTRY: dict[str, Any] = {"type": "local", "command": "snapstore", "args": ["mcp"], "tools": ["*"]}


def normalize(event: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None when there is nothing to record (a tool that
    changes no file, an event snapstore does not use)."""
    name = str(event.get("hook_event_name", ""))
    if name not in EVENTS:
        return None
    if name == "Notification":
        if event.get("notification_type") not in SHELL_DONE:
            return None
        session = str(event.get("session_id") or event.get("sessionId") or "")
        return event_model.event(hook_state.DONE_EVENT, session, cwd=event.get("cwd"))
    out = dict(event)
    if name in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        tool = str(event.get("tool_name", ""))
        if tool not in TOOL_NAMES:
            return None
        out["tool_name"] = TOOL_NAMES[tool]
        out["tool_use_id"] = event_model.call_id("copilot", tool, event.get("tool_input"))
        result = event.get("tool_result")
        if name == "PostToolUse" and isinstance(result, dict) and result.get("result_type") in ("failure", "error"):
            out["hook_event_name"] = "PostToolUseFailure"
    return out


def hooks_document() -> dict[str, Any]:
    """The whole ``.github/hooks/snapstore.json``."""
    entry = {"type": "command", "bash": COMMAND, "powershell": COMMAND, "timeoutSec": HOOK_TIMEOUT}
    return {"version": 1, "hooks": {event: [dict(entry)] for event in EVENTS}}


def project_of(event: dict[str, Any]) -> str | None:
    return event_model.directory(event.get("cwd"))


def reply(out: str) -> str:
    """Nothing: Copilot reads a preToolUse hook's output as a permission decision."""
    return ""


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Write (or ``remove``) ``.github/hooks/snapstore.json``; the changes."""
    from snapstore.errors import UsageError
    from snapstore.integrations.hook_files import own_file, server_file

    if scope != "project":
        raise UsageError("Copilot CLI reads hooks from the repository only (.github/hooks/): use --scope project")
    project = os.path.abspath(project)
    path = os.path.join(project, ".github", "hooks", FILENAME)
    text = json.dumps(hooks_document(), indent=2) + "\n"
    out = own_file(path, project, text, COMMAND, remove=remove, dry_run=dry_run)
    if mcp:  # Copilot CLI keeps MCP servers per user only
        config = os.path.join(home if home is not None else os.path.expanduser("~"), ".copilot", "mcp-config.json")
        out += server_file(config, None, ["mcpServers"], MCP_ENTRY, remove=remove, dry_run=dry_run)
    return out
