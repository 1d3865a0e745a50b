"""Kiro: its hooks (a ``.kiro/hooks/snapstore.json`` of its own) mapped onto the one event model.

Kiro sends ``hook_event_name`` (``userPromptSubmit``, ``preToolUse``, ``postToolUse``, ``stop``;
PascalCase is accepted too), ``cwd``, and for tool events ``tool_name``, ``tool_input`` and, after
the call, ``tool_response``.  It sends no session id and no call id: the session is
``session_id`` when present, else "kiro"; a call's id is made from its command or file.  Tools
are matched with ``*`` (any tool, MCP tools included, may change files; one that changed
nothing records nothing); the read-only built-ins are skipped.  On exit 0 Kiro adds a prompt
hook's stdout to the model's context: the hook prints nothing, ever (failures are in hook.log).
"""

from __future__ import annotations

import json
import os
from typing import Any

from snapstore.integrations import event_model
from snapstore.integrations.hook_files import own_file, server_file, where

AGENT = "kiro"
COMMAND = f"snapstore hook {AGENT}"
TRIGGERS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
SHELL_TOOLS = ("execute_bash", "executeBash", "shell", "execute_cmd")
WRITE_TOOLS = ("fs_write", "fsWrite", "write", "str_replace", "strReplace", "fs_append", "delete", "deleteFile")
READ_TOOLS = ("fs_read", "fsRead", "read", "readFile", "readMultipleFiles", "grep", "glob", "listDirectory", "web_fetch", "web_search", "introspect", "knowledge", "todo_list", "thinking")
FILENAME = "snapstore.json"
MCP_ENTRY: dict[str, Any] = {"command": "snapstore", "args": ["mcp"]}


def normalize(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None when there is nothing to record."""
    raw_name = str(doc.get("hook_event_name", ""))
    name = raw_name[:1].upper() + raw_name[1:]
    session = str(doc.get("session_id") or "kiro")
    if name == "UserPromptSubmit":
        return event_model.event(name, session, prompt=str(doc.get("prompt") or os.environ.get("USER_PROMPT", "")))
    if name in ("PreToolUse", "PostToolUse"):
        tool = str(doc.get("tool_name", ""))
        raw = doc.get("tool_input")
        args = raw if isinstance(raw, dict) else {}
        if tool in READ_TOOLS:
            return None
        response = doc.get("tool_response")
        failed = isinstance(response, dict) and (response.get("success") is False or bool(response.get("error")))
        if tool in SHELL_TOOLS:
            return event_model.tool_event(AGENT, name, session, "Bash", {"command": str(args.get("command", ""))}, failed=failed)
        if tool in WRITE_TOOLS:
            path = args.get("path") or args.get("file_path") or args.get("filePath") or ""
            return event_model.tool_event(AGENT, name, session, "Edit", {"file_path": str(path)}, failed=failed)
        # Any other tool (an MCP server's) may change files: recorded under its own name.
        subject = json.dumps(args, sort_keys=True, default=str)
        return event_model.event(
            "PostToolUseFailure" if failed and name == "PostToolUse" else name, session, tool_name=tool,
            tool_input=args, tool_use_id=event_model.call_id(AGENT, tool, subject),
        )
    if name == "Stop":
        return event_model.event("Stop", session)
    return None


def project_of(doc: dict[str, Any]) -> str | None:
    return event_model.directory(doc.get("cwd"))


def reply(out: str) -> str:
    """Nothing: a prompt hook's stdout would reach the model."""
    return ""


def hooks_document() -> dict[str, Any]:
    """The whole ``.kiro/hooks/snapstore.json`` (Kiro's v1 hook file)."""
    hooks = []
    for trigger in TRIGGERS:
        hook: dict[str, Any] = {"name": f"snapstore {trigger}", "trigger": trigger}
        if trigger in ("PreToolUse", "PostToolUse"):
            hook["matcher"] = "*"
        hook.update(action={"type": "command", "command": COMMAND}, timeout=20, enabled=True)
        hooks.append(hook)
    return {"version": "v1", "hooks": hooks}


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Write (or ``remove``) ``.kiro/hooks/snapstore.json``, and with ``mcp`` the server in
    ``.kiro/settings/mcp.json`` (``~/.kiro`` for the user scope); the changes."""
    base, inside, project = where("Kiro", scope, project, home)
    folder = os.path.join(base, ".kiro")
    text = json.dumps(hooks_document(), indent=2) + "\n"
    out = own_file(os.path.join(folder, "hooks", FILENAME), inside, text, COMMAND, remove=remove, dry_run=dry_run)
    if mcp:
        path = os.path.join(folder, "settings", "mcp.json")
        out += server_file(path, inside, ["mcpServers"], MCP_ENTRY, remove=remove, dry_run=dry_run)
    return out
