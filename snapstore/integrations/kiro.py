"""Kiro: its hooks (a ``.kiro/hooks/snapstore.json`` of its own) mapped onto the one event model.

Kiro sends ``hook_event_name`` (``agentSpawn``, ``userPromptSubmit``, ``preToolUse``,
``postToolUse``, ``stop``; PascalCase is accepted too), ``cwd``, and for tool events
``tool_name``, ``tool_input`` and, after the call, ``tool_response``.  It sends no session id and
no call id: the session is ``session_id`` when present, else one derived from Kiro's session
boundaries: each ``agentSpawn`` starts a new one (``kiro-<time>-<random>``), which the events of
that project use until the next (remembered per project in the user's runtime directory); a
call's id is made from its command or file.  Tools are matched with the regex ``.*`` (any tool,
MCP tools included, may change files; one that changed nothing records nothing); the read-only
built-ins are skipped.  On exit 0 Kiro adds a prompt hook's stdout to the model's context: the
hook prints nothing, ever (failures are in hook.log).
"""

from __future__ import annotations

import json
import os
from typing import Any

from snapstore.integrations import event_model
from snapstore.integrations.executable import Executable, resolve
from snapstore.integrations.hook_files import (
    json_commands,
    own_file,
    server_file,
    where,
    written_by_snapstore,
)

AGENT = "kiro"
TRIGGERS = ("AgentSpawn", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
#: Kiro's tool matchers are regular expressions: every tool.
MATCHER = ".*"
#: :func:`~snapstore.integrations.hook_files.bare_digest` of the hook files earlier versions wrote.
LEGACY_FILES = frozenset({"cfcc653cc80d24b4669645871bcef83d5d329aa4368333109e9c95d358d56c63"})
SHELL_TOOLS = ("execute_bash", "executeBash", "shell", "execute_cmd")
WRITE_TOOLS = ("fs_write", "fsWrite", "write", "str_replace", "strReplace", "fs_append", "delete", "deleteFile")
READ_TOOLS = ("fs_read", "fsRead", "read", "readFile", "readMultipleFiles", "grep", "glob", "listDirectory", "web_fetch", "web_search", "introspect", "knowledge", "todo_list", "thinking")
FILENAME = "snapstore.json"


def normalize(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The event in the model's terms, or None when there is nothing to record."""
    raw_name = str(doc.get("hook_event_name", ""))
    name = raw_name[:1].upper() + raw_name[1:]
    session = str(doc.get("session_id") or "") or derived_session(project_of(doc) or os.getcwd(), new=name == "AgentSpawn")
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


def derived_session(project: str, *, new: bool) -> str:
    """The session of a payload without an id: a fresh one at ``agentSpawn`` (``new``) or when
    none is remembered for ``project``, else the remembered one."""
    import hashlib
    import secrets
    import time

    from snapstore.integrations.claude_code import _user_state_dir

    folder = os.path.join(_user_state_dir(), "kiro-sessions")
    path = os.path.join(folder, hashlib.sha256(os.fsencode(os.path.abspath(project))).hexdigest()[:32])
    if not new:
        known = _read_session(path)
        if known:
            return known
    session = f"kiro-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
    try:
        from snapstore.tree.atomic import write_file_atomic

        os.makedirs(folder, mode=0o700, exist_ok=True)
        write_file_atomic(path, session.encode(), 0o600)
    except OSError:
        pass  # not remembered: the next event starts another session, never fails the hook
    return session


def _read_session(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        text = os.read(fd, 128).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    return text if text.startswith("kiro-") and text.isprintable() else None


def hooks_document(exe: Executable | None = None) -> dict[str, Any]:
    """The whole ``.kiro/hooks/snapstore.json`` (Kiro's v1 hook file)."""
    command = (exe or resolve()).command("hook", AGENT)
    hooks = []
    for trigger in TRIGGERS:
        hook: dict[str, Any] = {"name": f"snapstore {trigger}", "trigger": trigger}
        if trigger in ("PreToolUse", "PostToolUse"):
            hook["matcher"] = MATCHER
        hook.update(action={"type": "command", "command": command}, timeout=20, enabled=True)
        hooks.append(hook)
    return {"version": "v1", "hooks": hooks}


def hooks_text(exe: Executable) -> str:
    return json.dumps(hooks_document(exe), indent=2) + "\n"


def owns(text: str) -> bool:
    """Whether a hook file is byte for byte one snapstore writes (or wrote)."""
    return written_by_snapstore(text, hooks_text, lambda t: json_commands(t, AGENT), LEGACY_FILES)


def integrate(
    project: str, *, scope: str = "project", mcp: bool = False, remove: bool = False, dry_run: bool = False,
    home: str | None = None,
) -> list[str]:
    """Write (or ``remove``) ``.kiro/hooks/snapstore.json``, and with ``mcp`` the server in
    ``.kiro/settings/mcp.json`` (``~/.kiro`` for the user scope); the changes."""
    base, inside, project = where("Kiro", scope, project, home)
    from snapstore.integrations.settings import mcp_entry

    folder = os.path.join(base, ".kiro")
    exe = resolve()
    out = own_file(os.path.join(folder, "hooks", FILENAME), inside, hooks_text(exe), owns, remove=remove, dry_run=dry_run)
    if mcp:
        path = os.path.join(folder, "settings", "mcp.json")
        out += server_file(path, inside, ["mcpServers"], mcp_entry(exe), remove=remove, dry_run=dry_run)
    return out
