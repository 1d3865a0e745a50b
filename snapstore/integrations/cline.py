"""Cline: one hook script per event (``.clinerules/hooks/<Event>``) and its MCP settings.

Cline runs the executable file named after the event, with one JSON object on stdin: base
fields ``hookName``, ``taskId`` (the session), ``workspaceRoots`` (the project is the first),
and the event's own object (``preToolUse: {toolName, parameters}``, ``postToolUse: {toolName,
parameters, result, success}``, ``userPromptSubmit: {prompt}``).  It reads stdout as JSON
(``{"cancel": false}`` lets the task go on).  An ``execute_command`` the user let "Proceed While
Running" ends with the command still running (its result says so): what changes next is
``unknown`` (:mod:`snapstore.integrations.hook_state`).  Cline starts MCP servers in ``/``: the printed
and written server entries name the project with ``--root``.

=====================================  ===========================================================
Cline                                  the event model
=====================================  ===========================================================
``UserPromptSubmit``                   ``UserPromptSubmit``
``PreToolUse`` / ``PostToolUse``       ``PreToolUse`` / ``PostToolUse`` (``PostToolUseFailure``
                                       when ``success`` is false) of write_to_file (Write),
                                       replace_in_file (Edit), execute_command (Bash)
``TaskComplete`` / ``TaskCancel``      ``Stop``
``PreCompact``                         ``PreCompact``
=====================================  ===========================================================
"""

from __future__ import annotations

import json
import os
from typing import Any

from snapstore.errors import UsageError
from snapstore.integrations import event_model
from snapstore.integrations.hook_files import own_file, server_file, where

AGENT = "cline"
COMMAND = f"snapstore hook {AGENT}"
EVENTS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "TaskComplete", "TaskCancel", "PreCompact")
TOOLS = {"write_to_file": "Write", "replace_in_file": "Edit", "apply_patch": "Edit", "execute_command": "Bash"}
#: What Cline's execute_command result says when the user let the task proceed while it runs.
STILL_RUNNING = "command is still running in the user's terminal"
SCRIPT = f"#!/bin/sh\n# {COMMAND}: a checkpoint per event (snapstore integrate cline --remove takes it out)\nexec {COMMAND}\n"
#: Where VS Code-like editors keep Cline's MCP settings, under the home directory.
MCP_SETTINGS = tuple(
    os.path.join(".config", editor, "User", "globalStorage", "saoudrizwan.claude-dev", "settings", "cline_mcp_settings.json")
    for editor in ("Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf")
)


def normalize(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None when there is nothing to record."""
    name = str(doc.get("hookName", ""))
    session = str(doc.get("taskId") or "")
    if name == "UserPromptSubmit":
        body = doc.get("userPromptSubmit")
        prompt = body.get("prompt") if isinstance(body, dict) else None
        return event_model.event(name, session, prompt=str(prompt or ""))
    if name in ("PreToolUse", "PostToolUse"):
        body = doc.get("preToolUse" if name == "PreToolUse" else "postToolUse")
        body = body if isinstance(body, dict) else {}
        tool = TOOLS.get(str(body.get("toolName", "")))
        if tool is None:
            return None
        raw = body.get("parameters")
        params = raw if isinstance(raw, dict) else {}
        tool_input = {"command": str(params.get("command", ""))} if tool == "Bash" else {"file_path": str(params.get("path", ""))}
        # "Proceed While Running": the call ends with the command still running (its result says so).
        running_on = tool == "Bash" and name == "PostToolUse" and STILL_RUNNING in str(body.get("result", "")).lower()
        return event_model.tool_event(
            AGENT, name, session, tool, tool_input, failed=body.get("success") is False, background=running_on
        )
    if name in ("TaskComplete", "TaskCancel"):
        return event_model.event("Stop", session)
    if name == "PreCompact":
        return event_model.event("PreCompact", session)
    return None


def project_of(doc: dict[str, Any]) -> str | None:
    return event_model.first_directory(doc.get("workspaceRoots"))


def reply(out: str) -> str:
    """Cline reads stdout as JSON: go on, with snapstore's failure as the error message."""
    answer: dict[str, Any] = {"cancel": False}
    if out:
        try:
            answer["errorMessage"] = json.loads(out).get("systemMessage", out)
        except (ValueError, AttributeError):
            answer["errorMessage"] = out
    return json.dumps(answer)


def server_entry(project: str) -> dict[str, Any]:
    """Cline's MCP server entry for ``project`` (Cline starts servers in ``/``)."""
    return {"command": "snapstore", "args": ["mcp", "--root", os.path.abspath(project)], "disabled": False, "autoApprove": []}


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Write (or ``remove``) the hook scripts in ``.clinerules/hooks/`` (user scope:
    ``~/Documents/Cline/Hooks/``); with ``mcp``, the server (rooted at the project) in the
    editors' Cline MCP settings that exist; the changes."""
    base, inside, project = where("Cline", scope, project, home)
    folder = os.path.join(base, *((".clinerules", "hooks") if inside else ("Documents", "Cline", "Hooks")))
    home = home if home is not None else os.path.expanduser("~")
    out: list[str] = []
    for event in EVENTS:  # first check every script (someone else's refuses them all), then write
        own_file(os.path.join(folder, event), inside, SCRIPT, COMMAND, remove=remove, dry_run=True, mode=0o755)
    for event in EVENTS:
        out += own_file(os.path.join(folder, event), inside, SCRIPT, COMMAND, remove=remove, dry_run=dry_run, mode=0o755)
    if mcp:
        out += _mcp(project, home, remove, dry_run)
    return out


def _mcp(project: str, home: str, remove: bool, dry_run: bool) -> list[str]:
    found = [os.path.join(home, p) for p in MCP_SETTINGS if os.path.isdir(os.path.dirname(os.path.join(home, p)))]
    if not found:
        raise UsageError(
            "Cline's MCP settings were not found (is Cline installed?): add the output of "
            "'snapstore integrate --print cline' in Cline's MCP Servers > Configure"
        )
    out: list[str] = []
    for path in found:
        out += server_file(path, None, ["mcpServers"], server_entry(project), remove=remove, dry_run=dry_run)
    return out
