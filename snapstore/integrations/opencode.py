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

import json
import os
import re
from typing import Any

from snapstore.integrations import event_model
from snapstore.integrations.executable import Executable, resolve
from snapstore.integrations.hook_files import own_file, server_file, where, written_by_snapstore

AGENT = "opencode"
TOOLS = {"bash": "Bash", "edit": "Edit", "patch": "Edit", "multiedit": "Edit", "write": "Write"}
#: :func:`~snapstore.integrations.hook_files.bare_digest` of the plugins earlier versions wrote.
LEGACY_PLUGINS = frozenset({"737958fd091e6061878be4fc13b79a06b92cc397cd27df12a3a66c6fe0326d02"})
_ARGV_LINE = re.compile(r"^const SNAPSTORE = (\[.*\])$", re.MULTILINE)
_PLACEHOLDER = "__SNAPSTORE_ARGV__"


def mcp_entry(exe: Executable | None = None) -> dict[str, Any]:
    """OpenCode's MCP server entry in ``opencode.json`` (``command`` is the whole argv)."""
    return {"type": "local", "command": (exe or resolve()).words("mcp"), "enabled": True}


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


def plugin_text(exe: Executable | None = None) -> str:
    """The plugin, running ``exe`` (default: the resolved snapstore)."""
    with open(os.path.join(os.path.dirname(__file__), "opencode_plugin.js"), encoding="utf-8") as f:
        template = f.read()
    return template.replace(_PLACEHOLDER, json.dumps(list((exe or resolve()).argv), ensure_ascii=False))


def commands_in(text: str) -> list[list[str]]:
    """The snapstore programs (argv prefixes) a plugin runs."""
    out = []
    for match in _ARGV_LINE.finditer(text):
        try:
            words = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(words, list) and words and all(isinstance(w, str) for w in words):
            out.append(words)
    return out


def owns(text: str) -> bool:
    """Whether a plugin file is byte for byte one snapstore writes (or wrote)."""
    return written_by_snapstore(text, plugin_text, commands_in, LEGACY_PLUGINS)


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
    exe = resolve()
    out = own_file(os.path.join(plugins, "snapstore.js"), inside, plugin_text(exe), owns, remove=remove, dry_run=dry_run)
    if mcp:
        out += server_file(config, inside, ["mcp"], mcp_entry(exe), remove=remove, dry_run=dry_run)
    return out
