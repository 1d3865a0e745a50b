"""GitHub Copilot CLI: its hooks, in their "VS Code compatible" form.

Copilot CLI loads every ``.github/hooks/*.json`` of the repository; snapstore's entries are one
file of its own, ``.github/hooks/snapstore.json``, so adding and removing never touch the user's
hooks.  Configured with PascalCase event names, Copilot sends snake_case payloads in Claude
Code's shape (``hook_event_name``, ``session_id``, ``cwd``, ``tool_name``, ``tool_input``,
``transcript_path`` on Stop), including ``PostToolUseFailure``; tool events carry no call id
and fire for every tool, so only the tools that change files are recorded (``bash``,
``powershell``, ``create``, ``edit``, named as the event model names them) and a call id is made
from the tool's name and arguments.  Copilot reads a ``preToolUse`` hook's stdout as a
permission decision: the hook prints nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

import blake3

from snapstore.integrations.settings import HOOK_TIMEOUT, check_in_project

EVENTS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "PreCompact")
TOOL_NAMES = {"bash": "Bash", "powershell": "PowerShell", "create": "Write", "edit": "Edit"}
COMMAND = "snapstore hook copilot"
FILENAME = "snapstore.json"


def normalize(event: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None when there is nothing to record (a tool that
    changes no file, an event snapstore does not use)."""
    name = str(event.get("hook_event_name", ""))
    if name not in EVENTS:
        return None
    out = dict(event)
    if name in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        tool = str(event.get("tool_name", ""))
        if tool not in TOOL_NAMES:
            return None
        out["tool_name"] = TOOL_NAMES[tool]
        args = json.dumps(event.get("tool_input"), sort_keys=True, default=str)
        out["tool_use_id"] = "copilot-" + blake3.blake3(f"{tool}\0{args}".encode()).hexdigest()[:16]
        result = event.get("tool_result")
        if name == "PostToolUse" and isinstance(result, dict) and result.get("result_type") in ("failure", "error"):
            out["hook_event_name"] = "PostToolUseFailure"
    return out


def hooks_document() -> dict[str, Any]:
    """The whole ``.github/hooks/snapstore.json``."""
    entry = {"type": "command", "bash": COMMAND, "powershell": COMMAND, "timeoutSec": HOOK_TIMEOUT}
    return {"version": 1, "hooks": {event: [dict(entry)] for event in EVENTS}}


def integrate(project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False) -> list[str]:
    """Write (or ``remove``) ``.github/hooks/snapstore.json``; the changes."""
    from snapstore.errors import UsageError
    from snapstore.integrations.settings import load
    from snapstore.tree.atomic import write_file_atomic

    if scope != "project":
        raise UsageError("Copilot CLI reads hooks from the repository only (.github/hooks/): use --scope project")
    if mcp:
        raise UsageError("snapstore does not write Copilot CLI's MCP configuration yet: add {\"command\": \"snapstore\", \"args\": [\"mcp\"]} to ~/.copilot/mcp-config.json")
    project = os.path.abspath(project)
    path = os.path.join(project, ".github", "hooks", FILENAME)
    check_in_project(path, project)
    doc, raw = load(path)
    wanted = hooks_document()
    if remove:
        if raw is None:
            return []
        if not _ours(doc):
            raise UsageError(f"{path} is not snapstore's (no '{COMMAND}' in it): not removing it")
        if not dry_run:
            os.unlink(path)
        return [f"{path}: removed"]
    if doc == wanted:
        return []
    if raw is not None and not _ours(doc):
        raise UsageError(f"{path} exists and is not snapstore's: not overwriting it")
    if not dry_run:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file_atomic(path, (json.dumps(wanted, indent=2) + "\n").encode(), 0o644)
    return [f"{path}: {'updated' if raw is not None else 'added'} hooks {', '.join(EVENTS)}: {COMMAND}"]


def _ours(doc: dict[str, Any]) -> bool:
    return COMMAND in json.dumps(doc)
