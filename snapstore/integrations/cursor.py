"""Cursor: its agent hooks (``.cursor/hooks.json``) mapped onto the one event model.

Cursor sends one JSON object per event with ``hook_event_name``, ``conversation_id`` (the
session), ``generation_id`` and ``workspace_roots`` (the project is the first).  It has generic
tool events (``preToolUse``, ``postToolUse``, ``postToolUseFailure``: ``tool_name``,
``tool_input``) and, older, specific ones (``beforeShellExecution``/``afterShellExecution``:
``command``; ``afterFileEdit``: ``file_path``).  snapstore subscribes to both: a call's events
get one call id made from the shell command or the file, so a shell command reported twice
opens and closes one call.  A Shell call with ``is_background`` runs on after its
``postToolUse``: what changes next is ``unknown``.  Cursor reads every hook's stdout as JSON: the hook prints ``{}``
(or ``{"user_message": ...}`` when snapstore failed).

==========================================  =============================================
Cursor                                      the event model
==========================================  =============================================
``beforeSubmitPrompt`` (``prompt``)         ``UserPromptSubmit``
``preToolUse``, ``beforeShellExecution``    ``PreToolUse`` (Shell -> Bash; Write, StrReplace,
                                            Edit, MultiEdit, Delete -> Edit; ``MCP:*`` tools
                                            under their own names)
``postToolUse``, ``afterShellExecution``,   ``PostToolUse``
``afterFileEdit``
``postToolUseFailure``                      ``PostToolUseFailure``
``stop``                                    ``Stop`` (every call of the turn is over)
``preCompact``                              ``PreCompact``
==========================================  =============================================
"""

from __future__ import annotations

import json
import os
from typing import Any

from snapstore.integrations import background, event_model
from snapstore.integrations.executable import Executable, resolve
from snapstore.integrations.hook_files import flat_settings, server_file, where

AGENT = "cursor"
SHELL_TOOLS = ("Shell",)
EDIT_TOOLS = ("Write", "StrReplace", "Edit", "MultiEdit", "Delete")
#: MCP servers' tools reach the generic tool events as ``MCP:<server>:<tool>``: any may write.
MCP_PREFIX = "MCP:"
MATCHER = "|".join(SHELL_TOOLS + EDIT_TOOLS) + "|MCP:.*"
EVENTS = (
    "beforeSubmitPrompt", "preToolUse", "postToolUse", "postToolUseFailure",
    "beforeShellExecution", "afterShellExecution", "afterFileEdit", "stop", "preCompact",
)
TOOL_EVENTS = ("preToolUse", "postToolUse", "postToolUseFailure")


def normalize(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None when there is nothing to record."""
    name = str(doc.get("hook_event_name", ""))
    session = str(doc.get("conversation_id") or doc.get("session_id") or "")
    cwd = project_of(doc)
    if name == "beforeSubmitPrompt":
        return event_model.event("UserPromptSubmit", session, prompt=str(doc.get("prompt", "")), cwd=cwd)
    if name in ("beforeShellExecution", "afterShellExecution"):
        when = "PreToolUse" if name.startswith("before") else "PostToolUse"
        return event_model.tool_event(AGENT, when, session, "Bash", {"command": str(doc.get("command", ""))}, cwd=cwd)
    if name == "afterFileEdit":
        return event_model.tool_event(AGENT, "PostToolUse", session, "Edit", {"file_path": str(doc.get("file_path", ""))}, cwd=cwd)
    if name in TOOL_EVENTS:
        tool = str(doc.get("tool_name", ""))
        raw = doc.get("tool_input")
        args = raw if isinstance(raw, dict) else {}
        if tool in SHELL_TOOLS:  # (is_background: the command runs on after postToolUse)
            tool_input = {"command": str(args.get("command", "")), **background.flags(args)}
            model_tool = "Bash"
        elif tool in EDIT_TOOLS:
            tool_input = {"file_path": str(args.get("file_path") or args.get("path") or "")}
            model_tool = "Edit"
        elif tool.startswith(MCP_PREFIX):
            tool_input, model_tool = (args if isinstance(raw, dict) else {"input": str(raw)}), tool
        else:
            return None
        when = "PostToolUseFailure" if name == "postToolUseFailure" else ("PreToolUse" if name == "preToolUse" else "PostToolUse")
        return event_model.tool_event(AGENT, when, session, model_tool, tool_input, cwd=cwd)
    if name == "stop":
        return event_model.event("Stop", session, transcript_path=doc.get("transcript_path"), cwd=cwd)
    if name == "preCompact":
        return event_model.event("PreCompact", session, transcript_path=doc.get("transcript_path"), cwd=cwd)
    return None


def project_of(doc: dict[str, Any]) -> str | None:
    """The first workspace root, else the event's ``cwd``."""
    return event_model.first_directory(doc.get("workspace_roots"), doc.get("cwd"))


def reply(out: str) -> str:
    """Cursor parses stdout as JSON on every event: ``{}``, or the failure for the user."""
    if not out:
        return "{}"
    try:
        message = json.loads(out).get("systemMessage", "")
    except (ValueError, AttributeError):
        message = out
    return json.dumps({"user_message": message})


def entry(event: str, exe: Executable) -> dict[str, Any]:
    """snapstore's entry in ``hooks.json`` for ``event``."""
    found: dict[str, Any] = {"command": exe.command("hook", AGENT), "timeout": 20}
    if event in TOOL_EVENTS:
        found["matcher"] = MATCHER
    return found


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Add (or ``remove``) snapstore's hooks in ``.cursor/hooks.json`` (``~/.cursor`` for the user
    scope), and with ``mcp`` its server in the ``mcp.json`` beside it; the changes."""
    base, inside, project = where("Cursor", scope, project, home)
    from snapstore.integrations.settings import mcp_entry

    folder = os.path.join(base, ".cursor")
    exe = resolve()
    out = flat_settings(
        os.path.join(folder, "hooks.json"), inside, AGENT, EVENTS, lambda event: entry(event, exe),
        remove=remove, dry_run=dry_run, base={"version": 1},
    )
    if mcp:
        out += server_file(os.path.join(folder, "mcp.json"), inside, ["mcpServers"], mcp_entry(exe), remove=remove, dry_run=dry_run)
    return out
