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
import re
from typing import Any

from snapstore.errors import UsageError
from snapstore.integrations import event_model, hook_log
from snapstore.integrations.executable import Executable, resolve, split_command
from snapstore.integrations.hook_files import own_file, server_file, where, written_by_snapstore

AGENT = "cline"
EVENTS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "TaskComplete", "TaskCancel", "PreCompact")
TOOLS = {"write_to_file": "Write", "replace_in_file": "Edit", "apply_patch": "Edit", "execute_command": "Bash"}
#: :func:`~snapstore.integrations.hook_files.bare_digest` of the scripts earlier versions wrote.
LEGACY_SCRIPTS = frozenset({"b2068bac8420f15fd150e7184f6a61fb77239a7610e6abcb07c9333e56f71650"})
_RUN_LINE = re.compile(r"^out=\$\((.*) hook cline\); rc=\$\?$", re.MULTILINE)


def script(exe: Executable) -> str:
    """The hook script of every event.  Cline blocks the tool call when a hook exits non-zero or
    prints no JSON: whatever happens to snapstore (gone, failing), the script answers
    ``{"cancel": false}``, exits 0 and logs the failure where ``snapstore doctor`` shows it."""
    command = exe.command("hook", AGENT)
    return (
        "#!/bin/sh\n"
        f"# snapstore hook {AGENT}: a checkpoint per event (written by 'snapstore integrate cline', which\n"
        "# replaces or --removes it only while it is unchanged). It never blocks a tool call.\n"
        f"out=$({command}); rc=$?\n"
        'if [ "$rc" -eq 0 ] && [ -n "$out" ]; then printf \'%s\\n\' "$out"; exit 0; fi\n'
        f"umask 077; log={hook_log.SHELL_PATH}\n"
        'mkdir -p "${log%/*}" 2>/dev/null && printf \'%s cline: %s: snapstore exited %s; the tool call went on\\n\' '
        '"$(date +%Y-%m-%dT%H:%M:%S)" "$0" "$rc" >>"$log" 2>/dev/null\n'
        "printf '%s\\n' '{\"cancel\": false}'\n"
        "exit 0\n"
    )


def commands_in(text: str) -> list[list[str]]:
    """The snapstore programs (argv prefixes) a hook script runs."""
    return [split_command(m.group(1)) for m in _RUN_LINE.finditer(text)]


def owns(text: str) -> bool:
    """Whether a hook script is byte for byte one snapstore writes (or wrote)."""
    return written_by_snapstore(text, script, commands_in, LEGACY_SCRIPTS)


#: What Cline's execute_command result says when the user let the task proceed while it runs.
STILL_RUNNING = "command is still running in the user's terminal"

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


def server_entry(project: str, exe: Executable | None = None) -> dict[str, Any]:
    """Cline's MCP server entry for ``project`` (Cline starts servers in ``/``)."""
    from snapstore.integrations.settings import mcp_entry

    return {**mcp_entry(exe, "--root", os.path.abspath(project)), "disabled": False, "autoApprove": []}


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
    exe = resolve()
    text = script(exe)
    out: list[str] = []
    for event in EVENTS:  # first check every script (someone else's refuses them all), then write
        own_file(os.path.join(folder, event), inside, text, owns, remove=remove, dry_run=True, mode=0o755)
    for event in EVENTS:
        out += own_file(os.path.join(folder, event), inside, text, owns, remove=remove, dry_run=dry_run, mode=0o755)
    if mcp:
        out += _mcp(project, home, remove, dry_run, exe)
    return out


def _mcp(project: str, home: str, remove: bool, dry_run: bool, exe: Executable) -> list[str]:
    found = [os.path.join(home, p) for p in MCP_SETTINGS if os.path.isdir(os.path.dirname(os.path.join(home, p)))]
    if not found:
        raise UsageError(
            "Cline's MCP settings were not found (is Cline installed?): add the output of "
            "'snapstore integrate --print cline' in Cline's MCP Servers > Configure"
        )
    out: list[str] = []
    for path in found:
        out += server_file(path, None, ["mcpServers"], server_entry(project, exe), remove=remove, dry_run=dry_run)
    return out
