"""OpenAI Codex CLI: its hooks and its MCP configuration.

Codex sends hooks the payload Claude Code sends (``session_id``, ``transcript_path``, ``cwd``,
``hook_event_name``, and for tool events ``tool_name``, ``tool_input``, ``tool_use_id``), from
``.codex/hooks.json`` (project) or ``~/.codex/hooks.json`` (user), in Claude Code's
event -> matcher group -> handlers layout; the same handler serves it
(:func:`snapstore.integrations.claude_code.run`, metadata ``agent: codex``), with the project
taken from the event's ``cwd``.  File edits arrive as ``apply_patch`` (the patch in
``tool_input.command``; ``Edit``/``Write`` are matcher aliases of it); MCP tools as
``mcp__<server>__<tool>``.  MCP servers are TOML tables in ``config.toml``:
``[mcp_servers.snapstore]``.  No TOML writer is a dependency, so the table is added and taken out
as text, but only after parsing the file (``tomllib``) and checking that the result parses to
exactly the old document plus (or minus) that one table: a commented-out table, a header inside
a multi-line string or an inline ``mcp_servers`` table can never make it delete the user's keys
or write invalid TOML.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
from typing import Any

from snapstore.errors import ConflictError, UsageError
from snapstore.integrations.executable import Executable, resolve
from snapstore.integrations.settings import (
    HookSpec,
    add_hooks,
    check_in_project,
    is_own_server,
    remove_hooks,
    update_file,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

HOOKS = HookSpec(
    "codex",
    events=("UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"),
    tool_events=("PreToolUse", "PostToolUse"),
    matcher="Bash|apply_patch|mcp__.*",
)
TABLE = "[mcp_servers.snapstore]"
_OUR_HEADER = re.compile(r'^[ \t]*\[[ \t]*mcp_servers[ \t]*\.[ \t]*(?:snapstore|"snapstore")[ \t]*\][ \t\r]*(?:#.*)?$')
_ANY_HEADER = re.compile(r"^[ \t]*\[")
#: How many ends of the table are tried before giving up (each is one parse of the file).
_MAX_TRIES = 64
SCOPES = ("project", "user")


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
    exe = resolve()
    if mcp:  # a config.toml that refuses is refused before anything is written
        _mcp_table(config, remove, True, exe)
    out = update_file(path, (lambda doc: remove_hooks(doc, HOOKS)) if remove else (lambda doc: add_hooks(doc, HOOKS, exe)), dry_run)
    if mcp:
        out += _mcp_table(config, remove, dry_run, exe)
    return out


def table_text(exe: Executable | None = None) -> str:
    """snapstore's ``[mcp_servers.snapstore]`` table (JSON strings are TOML basic strings)."""
    words = (exe or resolve()).words("mcp")
    return f"{TABLE}\ncommand = {json.dumps(words[0])}\nargs = {json.dumps(words[1:])}\n"


def _mcp_table(path: str, remove: bool, dry_run: bool, exe: Executable) -> list[str]:
    from snapstore.tree.atomic import write_file_atomic

    text = _read_text(path)
    old = _parse(text, path)
    servers = old.get("mcp_servers")
    current = servers.get("snapstore") if isinstance(servers, dict) else None
    words = exe.words("mcp")
    wanted = {"command": words[0], "args": words[1:]}
    if current is not None and not is_own_server(current):
        if remove:
            return []  # a server of that name that is not ours
        raise ConflictError(f"{path}: [mcp_servers.snapstore] does not run snapstore: not touching it")
    if remove:
        if current is None:
            return []
        new, line = _without_table(text, old, path), f"{path}: removed {TABLE}"
    else:
        if current == wanted:
            return []
        base = text if current is None else _without_table(text, old, path)
        body = base.rstrip("\n")
        new = (body + "\n\n" if body.strip() else "") + table_text(exe)
        expected = copy.deepcopy(old)
        expected.setdefault("mcp_servers", {})["snapstore"] = wanted
        try:
            same = _loads(new) == expected
        except UsageError:
            same = False
        if not same:
            raise UsageError(
                f"{path}: [mcp_servers.snapstore] cannot be added to this file safely (an inline or dotted "
                "mcp_servers?): nothing changed; add the output of 'snapstore integrate --print codex' yourself"
            )
        line = f"{path}: {'added' if current is None else 'updated'} {TABLE}: {exe.command('mcp')}"
    if not dry_run:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        except OSError as exc:
            from snapstore.errors import TreeIOError

            raise TreeIOError(f"cannot create {os.path.dirname(path)}: {exc.strerror}") from exc
        write_file_atomic(path, new.encode("utf-8", "surrogateescape"), _mode(path))
    return [line]


def _without_table(text: str, old: dict[str, Any], path: str) -> str:
    """``text`` without snapstore's table (and its sub-tables): the first cut, from a line that
    looks like its header to a line that looks like the next header, that parses to exactly the
    old document minus that table."""
    expected = copy.deepcopy(old)
    del expected["mcp_servers"]["snapstore"]
    _drop_empty_servers(expected)
    lines = text.splitlines(keepends=True)
    ends = [k for k, line in enumerate(lines) if _ANY_HEADER.match(line)] + [len(lines)]
    tries = 0
    for start, line in enumerate(lines):
        if not _OUR_HEADER.match(line):
            continue
        for end in (k for k in ends if k > start):
            tries += 1
            if tries > _MAX_TRIES:
                break
            before, after = "".join(lines[:start]).rstrip("\n"), "".join(lines[end:])
            candidate = (before + ("\n\n" if after else "\n") if before.strip() else "") + after
            try:
                parsed = _loads(candidate)
            except UsageError:
                continue
            _drop_empty_servers(parsed)
            if parsed == expected:
                return candidate
    raise UsageError(f"{path}: [mcp_servers.snapstore] cannot be taken out of this file safely: nothing changed (edit it yourself)")


def _drop_empty_servers(doc: dict[str, Any]) -> None:
    if doc.get("mcp_servers") == {}:
        del doc["mcp_servers"]


def _loads(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise UsageError(f"not valid TOML ({exc})") from exc


def _parse(text: str, path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise UsageError(f"{path} is not valid TOML ({exc}): nothing changed") from exc


def _mode(path: str) -> int:
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        return 0o644


def _read_text(path: str) -> str:
    from snapstore.integrations.hook_files import read_small

    return read_small(path) or ""
