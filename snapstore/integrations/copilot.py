"""GitHub Copilot CLI: its hooks, in their "VS Code compatible" form.

Copilot CLI loads every ``.github/hooks/*.json`` of the repository; snapstore's entries are one
file of its own, ``.github/hooks/snapstore.json``, so adding and removing never touch the user's
hooks.  Configured with PascalCase event names, Copilot sends snake_case payloads in Claude
Code's shape (``hook_event_name``, ``session_id``, ``cwd``, ``tool_name``, ``tool_input``,
``transcript_path`` on Stop), including ``PostToolUseFailure``; tool events carry no call id
and fire for every tool: every tool but the read-only built-ins is bracketed (``bash``,
``powershell``, ``create``, ``edit`` named as the event model names them; MCP servers' tools
and the rest under their own names: one that changed nothing records nothing) and a call id is
made from the tool's name and arguments.  A ``bash`` call with ``mode: "async"`` or ``detach``
runs on after its ``postToolUse``: what changes until Copilot's ``Notification`` of type
``shell_completed`` (or ``shell_detached_completed``) is labelled ``unknown``
(:mod:`snapstore.integrations.hook_state`).  Copilot reads a ``preToolUse`` hook's stdout as a
permission decision: the hook prints nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from snapstore.integrations import event_model, hook_state
from snapstore.integrations.executable import Executable, resolve
from snapstore.integrations.settings import HOOK_TIMEOUT

AGENT = "copilot"
EVENTS = (
    "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "PreCompact",
    "Notification",
)
#: Copilot's notifications that a background (async or detached) shell command finished.
SHELL_DONE = ("shell_completed", "shell_detached_completed")
TOOL_NAMES = {"bash": "Bash", "powershell": "PowerShell", "create": "Write", "edit": "Edit"}
#: Copilot's built-in tools that change no file (its hooks reference's table).
READ_ONLY_TOOLS = ("view", "glob", "grep", "web_fetch", "ask_user")
FILENAME = "snapstore.json"
#: :func:`~snapstore.integrations.hook_files.bare_digest` of the hook files earlier versions wrote.
LEGACY_FILES = frozenset({"6dabb5daa513182a42b82fe67915965a8353fb9d8bec3c49a8aa545c43689185"})


def mcp_entry(exe: Executable | None = None) -> dict[str, Any]:
    """Copilot CLI's MCP server entry (``~/.copilot/mcp-config.json``): a local server, every tool."""
    from snapstore.integrations.settings import mcp_entry as entry

    return {**entry(exe, type="local"), "tools": ["*"]}


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
        if not tool or tool in READ_ONLY_TOOLS:
            return None
        out["tool_name"] = TOOL_NAMES.get(tool, tool)
        out["tool_use_id"] = event_model.call_id("copilot", tool, event.get("tool_input"))
        result = event.get("tool_result")
        if name == "PostToolUse" and isinstance(result, dict) and result.get("result_type") in ("failure", "error"):
            out["hook_event_name"] = "PostToolUseFailure"
    return out


def hooks_document(exe: Executable | None = None) -> dict[str, Any]:
    """The whole ``.github/hooks/snapstore.json``."""
    command = (exe or resolve()).command("hook", AGENT)
    entry = {"type": "command", "bash": command, "powershell": command, "timeoutSec": HOOK_TIMEOUT}
    return {"version": 1, "hooks": {event: [dict(entry)] for event in EVENTS}}


def hooks_text(exe: Executable) -> str:
    return json.dumps(hooks_document(exe), indent=2) + "\n"


def owns(text: str) -> bool:
    """Whether a hook file is byte for byte one snapstore writes (or wrote: the same with a bare
    ``snapstore``)."""
    from snapstore.integrations.hook_files import json_commands, written_by_snapstore

    return written_by_snapstore(text, hooks_text, lambda t: json_commands(t, AGENT), LEGACY_FILES)


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
    exe = resolve()
    out = own_file(path, project, hooks_text(exe), owns, remove=remove, dry_run=dry_run)
    if mcp:  # Copilot CLI keeps MCP servers per user only
        config = os.path.join(home if home is not None else os.path.expanduser("~"), ".copilot", "mcp-config.json")
        out += server_file(config, None, ["mcpServers"], mcp_entry(exe), remove=remove, dry_run=dry_run)
    return out
