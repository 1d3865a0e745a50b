"""OpenCode: a plugin of snapstore's own (``.opencode/plugins/snapstore.js``) and ``opencode.json``.

OpenCode has no command hooks: plugins are JavaScript modules it loads at start-up.  snapstore's
plugin (``opencode_plugin.js`` beside this module, copied as is) runs ``snapstore hook opencode``
synchronously on each event with one JSON object on stdin, which this adapter maps onto the one
event model:

==========================  ============================================================
the plugin's event          the event model
==========================  ============================================================
``chat.message``            ``UserPromptSubmit`` (the text parts of the user's message)
``tool.execute.before``     ``PreToolUse`` of bash (Bash), edit/patch/multiedit (Edit),
                            write (Write); ``callID`` is the call id
``tool.execute.after``      ``PostToolUse``, or ``PostToolUseFailure`` when bash exited non-zero
``session.idle``            ``Stop``
``session.compacted``       ``PreCompact`` (OpenCode reports compaction after the fact)
==========================  ============================================================

``sessionID`` is the session; the project is the plugin's ``directory``.  The MCP server goes
into ``opencode.json`` under ``mcp`` as a ``local`` server.
"""

from __future__ import annotations

import os
from typing import Any

from snapstore.integrations import event_model
from snapstore.integrations.hook_files import own_file, server_file, where

AGENT = "opencode"
MARKER = f"snapstore hook {AGENT}"
TOOLS = {"bash": "Bash", "edit": "Edit", "patch": "Edit", "multiedit": "Edit", "write": "Write"}
MCP_ENTRY: dict[str, Any] = {"type": "local", "command": ["snapstore", "mcp"], "enabled": True}


def normalize(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None when there is nothing to record."""
    name = str(doc.get("hook_event_name", ""))
    session = str(doc.get("sessionID") or "")
    if name == "chat.message":
        return event_model.event("UserPromptSubmit", session, prompt=str(doc.get("prompt") or ""))
    if name in ("tool.execute.before", "tool.execute.after"):
        tool = TOOLS.get(str(doc.get("tool", "")))
        if tool is None:
            return None
        raw = doc.get("args")
        args = raw if isinstance(raw, dict) else {}
        if tool == "Bash":
            tool_input: dict[str, Any] = {"command": str(args.get("command", ""))}
        else:
            tool_input = {"file_path": str(args.get("filePath") or args.get("file_path") or "")}
        after = name.endswith("after")
        failed = after and tool == "Bash" and isinstance(doc.get("exit"), int) and doc.get("exit") != 0
        call = str(doc.get("callID") or "") or event_model.call_id(AGENT, tool, tool_input)
        return event_model.event(
            ("PostToolUseFailure" if failed else "PostToolUse") if after else "PreToolUse",
            session, tool_name=tool, tool_input=tool_input, tool_use_id=call,
        )
    if name == "session.idle":
        return event_model.event("Stop", session)
    if name == "session.compacted":
        return event_model.event("PreCompact", session)
    return None


def project_of(doc: dict[str, Any]) -> str | None:
    return event_model.directory(doc.get("directory"))


def reply(out: str) -> str:
    """Nothing: the plugin ignores the hook's output (failures are in hook.log)."""
    return ""


def plugin_text() -> str:
    with open(os.path.join(os.path.dirname(__file__), "opencode_plugin.js"), encoding="utf-8") as f:
        return f.read()


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Write (or ``remove``) ``.opencode/plugins/snapstore.js`` (user scope:
    ``~/.config/opencode/plugins/``), and with ``mcp`` the server in ``opencode.json``; the changes."""
    base, inside, project = where("OpenCode", scope, project, home)
    if inside is None:
        base = os.path.join(base, ".config", "opencode")
    plugins, config = os.path.join(base, ".opencode" if inside else "", "plugins"), os.path.join(base, "opencode.json")
    out = own_file(os.path.join(plugins, "snapstore.js"), inside, plugin_text(), MARKER, remove=remove, dry_run=dry_run)
    if mcp:
        out += server_file(config, inside, ["mcp"], MCP_ENTRY, remove=remove, dry_run=dry_run)
    return out
