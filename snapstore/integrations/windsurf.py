"""Windsurf (Cascade): its hooks (``.windsurf/hooks.json``) mapped onto the one event model.

Windsurf sends ``agent_action_name``, ``trajectory_id`` (the conversation: the session),
``execution_id`` and a ``tool_info`` object per action; hooks run in the workspace, whose root
is the project.  Windsurf reads nothing from a post-hook's stdout and blocks on exit 2 from a
pre-hook, which snapstore never uses: the hook prints nothing.

========================================  ====================================================
Windsurf                                  the event model
========================================  ====================================================
``pre_user_prompt`` (``user_prompt``)     ``UserPromptSubmit``
``pre_write_code`` / ``post_write_code``  ``PreToolUse`` / ``PostToolUse`` of Edit (``file_path``)
``pre_run_command`` / ``post_run_command``  ``PreToolUse`` / ``PostToolUse`` of Bash (``command_line``)
``post_cascade_response``                 ``Stop``
========================================  ====================================================

A call's id is made from its file or command line (a pre and its post carry the same).
"""

from __future__ import annotations

import os
from typing import Any

from snapstore.integrations import event_model
from snapstore.integrations.executable import resolve
from snapstore.integrations.hook_files import flat_settings, server_file, where

AGENT = "windsurf"
#: Windsurf's MCP servers: one file for every workspace, under the home directory.
MCP_CONFIG = os.path.join(".codeium", "windsurf", "mcp_config.json")
EVENTS = ("pre_user_prompt", "pre_write_code", "post_write_code", "pre_run_command", "post_run_command", "post_cascade_response")


def normalize(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None when there is nothing to record."""
    name = str(doc.get("agent_action_name", ""))
    session = str(doc.get("trajectory_id") or "")
    raw = doc.get("tool_info")
    info = raw if isinstance(raw, dict) else {}
    when = "PreToolUse" if name.startswith("pre_") else "PostToolUse"
    if name == "pre_user_prompt":
        return event_model.event("UserPromptSubmit", session, prompt=str(info.get("user_prompt", "")))
    if name in ("pre_write_code", "post_write_code"):
        return event_model.tool_event(AGENT, when, session, "Edit", {"file_path": str(info.get("file_path", ""))})
    if name in ("pre_run_command", "post_run_command"):
        cwd = event_model.directory(info.get("cwd"))
        return event_model.tool_event(AGENT, when, session, "Bash", {"command": str(info.get("command_line", ""))}, cwd=cwd)
    if name == "post_cascade_response":
        return event_model.event("Stop", session)
    return None


def project_of(doc: dict[str, Any]) -> str | None:
    """None: hooks run in the workspace, so the working directory is the project."""
    return None


def reply(out: str) -> str:
    """Nothing: Windsurf does not read a hook's stdout (failures are in hook.log)."""
    return ""


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Add (or ``remove``) snapstore's hooks in ``.windsurf/hooks.json`` (user scope:
    ``~/.codeium/windsurf/hooks.json``), and with ``mcp`` the server in
    ``~/.codeium/windsurf/mcp_config.json``; the changes.  That one MCP file serves every
    workspace: its server is rooted at this project (``--root``), as Cline's is."""
    from snapstore.integrations.settings import mcp_entry

    base, inside, project = where("Windsurf", scope, project, home)
    exe = resolve()
    path = os.path.join(base, *((".windsurf",) if inside else (".codeium", "windsurf")), "hooks.json")
    out = flat_settings(
        path, inside, AGENT, EVENTS, lambda _event: {"command": exe.command("hook", AGENT), "show_output": False},
        remove=remove, dry_run=dry_run,
    )
    if mcp:
        config = os.path.join(home if home is not None else os.path.expanduser("~"), MCP_CONFIG)
        entry = mcp_entry(exe, "--root", project)
        out += server_file(config, None, ["mcpServers"], entry, remove=remove, dry_run=dry_run)
    return out
