"""OpenAI Codex CLI: its hooks and its MCP configuration.

Codex sends hooks the payload Claude Code sends (``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``, and for tool events ``tool_name``, ``tool_input``, ``tool_use_id``), from
``.codex/hooks.json`` (project) or ``~/.codex/hooks.json`` (user), in Claude Code's
event -> matcher group -> handlers layout; the same handler serves it
(:func:`snapstore.integrations.claude_code.run`, metadata ``agent: codex``), with the project
taken from the event's ``cwd``.  File edits arrive as ``apply_patch`` (the patch in
``tool_input.command``; ``Edit``/``Write`` are matcher aliases of it).  MCP servers are TOML
tables in ``config.toml``: ``[mcp_servers.snapstore]``, added and removed as text (no TOML
writer is a dependency; snapstore touches only its own table).
"""

from __future__ import annotations

import os
import re

from snapstore.errors import UsageError
from snapstore.integrations.settings import (
    CODEX_MCP_TABLE,
    CODEX_MCP_TOML,
    HookSpec,
    add_hooks,
    check_in_project,
    remove_hooks,
    update_file,
)

HOOKS = HookSpec(
    "codex",
    events=("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"),
    tool_events=("PreToolUse", "PostToolUse"),
    matcher="Bash|apply_patch",
)
SCOPES = ("project", "user")
TABLE, MCP_TOML = CODEX_MCP_TABLE, CODEX_MCP_TOML


def hooks_path(scope: str, project: str, home: str) -> str:
    if scope not in SCOPES:
        raise UsageError(f"Codex has no {scope!r} scope (use {' or '.join(SCOPES)})")
    return os.path.join(project if scope == "project" else home, ".codex", "hooks.json")


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Add (or ``remove``) snapstore's Codex hooks, and with ``mcp`` its MCP server; the changes."""
    home = home if home is not None else os.path.expanduser("~")
    project = os.path.abspath(project)
    path = hooks_path(scope, project, home)
    config = os.path.join(os.path.dirname(path), "config.toml")
    if scope == "project":
        check_in_project(path, project)
        check_in_project(config, project)
    out = update_file(path, (lambda doc: remove_hooks(doc, HOOKS)) if remove else (lambda doc: add_hooks(doc, HOOKS)), dry_run)
    if mcp:
        out += _mcp_table(config, remove, dry_run)
    return out


def _mcp_table(path: str, remove: bool, dry_run: bool) -> list[str]:
    from snapstore.tree.atomic import write_file_atomic

    text = _read_text(path)
    if remove:
        if TABLE not in text:
            return []
        start = text.index(TABLE)
        nxt = re.search(r"^\[", text[start + len(TABLE) :], flags=re.MULTILINE)
        end = start + len(TABLE) + nxt.start() if nxt else len(text)
        before = text[:start].rstrip("\n")
        new = (before + "\n" if before else "") + text[end:]
        line = f"{path}: removed {TABLE}"
    else:
        if TABLE in text:
            return []
        body = text.rstrip("\n")
        new = (body + "\n\n" if body else "") + MCP_TOML
        line = f"{path}: added {TABLE}"
    if not dry_run:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file_atomic(path, new.encode(), 0o644)
    return [line]


def _read_text(path: str) -> str:
    from snapstore.integrations.hook_files import read_small

    return read_small(path) or ""
