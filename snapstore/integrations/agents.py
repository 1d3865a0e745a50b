"""The agents snapstore sits in, and ``snapstore hook AGENT``: one payload in, checkpoints out.

Claude Code and Codex send the event model itself (:mod:`snapstore.integrations.event_model`);
every other agent has an adapter module of its name with ``normalize`` (payload -> event or
None), ``project_of`` (the project the payload names, or None), ``reply`` (what the agent wants
on stdout) and ``integrate``.

The project of a hook: an agent's project variable (``$CLAUDE_PROJECT_DIR``,
``$GEMINI_PROJECT_DIR``) when set, since it names the project whatever directory the agent's
shell moved to; else the directory the payload names (Codex's and Copilot's ``cwd``, Cursor's
and Cline's workspace roots, OpenCode's plugin directory); else the working directory.  A hook
uses the store found there or above; it creates one only where
:func:`snapstore.integrations.roots.why_not_create` allows (never at ``/``, at ``$HOME`` or among
other users' files), and says otherwise once per session.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from importlib import import_module
from types import ModuleType
from typing import Any

from snapstore.store import Store

#: Every agent ``snapstore hook`` and ``snapstore integrate`` know, in the order the docs list them.
AGENTS = ("claude-code", "codex", "gemini", "copilot", "cursor", "cline", "windsurf", "kiro", "opencode")
#: Agents whose payload is mapped by an adapter module (the others send the model itself).
ADAPTED = ("gemini", "copilot", "cursor", "cline", "windsurf", "kiro", "opencode")
#: Agents whose hook must print a JSON object even when there is nothing to say.
JSON_REPLY = {"gemini": "{}", "cursor": "{}", "cline": '{"cancel": false}'}


def adapter(agent: str) -> ModuleType:
    """The adapter module of an agent of :data:`ADAPTED`."""
    return import_module(f"snapstore.integrations.{agent}")


def project_variable() -> str | None:
    """An agent's project variable, when it names an existing directory."""
    from snapstore.integrations.event_model import directory
    from snapstore.integrations.roots import PROJECT_VARIABLES

    for name in PROJECT_VARIABLES:
        found = directory(os.environ.get(name))
        if found is not None:
            return found
    return None


def hook(
    agent: str, raw: str, open_at: Callable[[str], Callable[[], Store]], *, start_service: bool
) -> str:
    """Record what one hook payload ``raw`` of ``agent`` calls for; what to print.

    ``open_at(project)`` gives the opener of the store for a project directory.  Never raises.
    """
    from snapstore.integrations import claude_code

    if agent not in AGENTS:
        if any(f'"{name}"' in raw for name in claude_code.SILENT_EVENTS):
            return ""
        message = f"snapstore: unknown agent {agent!r} in the hook command (use {', '.join(AGENTS)})"
        return json.dumps({"systemMessage": message})
    named: str | None = None
    module = adapter(agent) if agent in ADAPTED else None
    if module is not None:
        event, named = _normalized(module, raw)
        if event is None:  # nothing to record (or nothing that could be read)
            return str(module.reply(""))
        raw = json.dumps(event)
    elif agent == "codex":  # Codex names the session's directory in the event itself
        named = _event_cwd(raw)
    project = project_variable() or named or os.getcwd()
    out = claude_code.run(raw, project, open_at(project), start_service=start_service, agent=agent)
    return str(module.reply(out)) if module is not None else out


def failed(agent: str, exc: BaseException) -> str:
    """What a hook prints when snapstore failed outside :func:`hook`'s own handling (stdin that
    cannot be read, a payload no parser survives, a bug): the failure goes to the user's
    ``hook-failures.log`` (``snapstore doctor`` shows it) and the agent gets its "go on" answer."""
    from snapstore.integrations import hook_log

    hook_log.append(agent if agent in AGENTS else "hook", f"{type(exc).__name__}: {exc}"[:500])
    return str(adapter(agent).reply("")) if agent in ADAPTED else ""


def _normalized(module: ModuleType, raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """An adapted agent's payload as the event model, and the project it names; ``(None, None)``
    for a payload that is not a JSON object within the caps of :mod:`bounded_json`, or whose
    fields have shapes the adapter cannot map (the agent still gets its reply)."""
    from snapstore.integrations.bounded_json import loads_payload

    try:
        doc = loads_payload(raw)
        if not isinstance(doc, dict):
            return None, None
        event = module.normalize(doc)
        return (event, module.project_of(doc)) if isinstance(event, dict) else (None, None)
    except Exception:  # noqa: BLE001 - hostile input must still get the agent's answer
        return None, None


def _event_cwd(raw: str) -> str | None:
    from snapstore.integrations.bounded_json import loads_payload
    from snapstore.integrations.event_model import directory

    try:
        doc: Any = loads_payload(raw)
        return directory(doc.get("cwd")) if isinstance(doc, dict) else None
    except Exception:  # noqa: BLE001 - the event itself is judged (and reported) by claude_code.run
        return None


def integrate(
    agent: str, directory: str, *, scope: str, mcp: bool, remove: bool, dry_run: bool, http: bool = False,
    home: str | None = None,
) -> list[str]:
    """``snapstore integrate AGENT``: the changes made (or that would be) to the agent's settings,
    then a ``note: ...`` line when the snapstore the entries run looks fragile (a temporary
    directory, a moved virtualenv: :mod:`snapstore.integrations.executable`)."""
    from snapstore.integrations.executable import resolve

    if not dry_run:  # every refusal (a file or entry of someone else's) before anything is written
        _integrate(agent, directory, scope=scope, mcp=mcp, remove=remove, dry_run=True, http=http, home=home)
    lines = _integrate(agent, directory, scope=scope, mcp=mcp, remove=remove, dry_run=dry_run, http=http, home=home)
    note = resolve().note
    if note is not None and not remove:
        lines.append(note)
    return lines


def _integrate(
    agent: str, directory: str, *, scope: str, mcp: bool, remove: bool, dry_run: bool, http: bool, home: str | None
) -> list[str]:
    from snapstore.errors import UsageError
    from snapstore.integrations import settings

    if agent == "claude-code":
        project = os.environ.get("CLAUDE_PROJECT_DIR") or directory
        lines = settings.integrate_claude_code(
            project, scope=scope, mcp=mcp, remove=remove, dry_run=dry_run, http=http, home=home
        )
    elif http:
        raise UsageError("--http is for Claude Code (the only agent with http hooks): use the command hooks")
    elif agent not in AGENTS:
        raise UsageError(f"snapstore does not know the agent {agent!r} (use {', '.join(AGENTS)})")
    else:
        lines = list(adapter(agent).integrate(directory, scope=scope, mcp=mcp, remove=remove, dry_run=dry_run, home=home))
    return lines


def printable_config(agent: str, project: str = ".") -> str:
    """The MCP server configuration an agent reads, running snapstore by its absolute path: JSON
    ``mcpServers`` (Cursor, Windsurf, Kiro, Copilot CLI, any other client), Cline's (rooted at
    ``project``: Cline starts servers in ``/``; Windsurf's too: one file serves every
    workspace), OpenCode's ``mcp`` object, or Codex's TOML table."""
    from snapstore.errors import UsageError
    from snapstore.integrations.settings import PRINTABLE, SERVER_NAME, mcp_entry

    if agent == "codex":
        from snapstore.integrations.codex import table_text

        return table_text().rstrip("\n")
    if agent == "cline":
        from snapstore.integrations.cline import server_entry

        return json.dumps({"mcpServers": {SERVER_NAME: server_entry(project)}}, indent=2)
    if agent == "opencode":
        from snapstore.integrations import opencode

        return json.dumps({"mcp": {SERVER_NAME: opencode.mcp_entry()}}, indent=2)
    if agent == "copilot":
        from snapstore.integrations import copilot

        return json.dumps({"mcpServers": {SERVER_NAME: copilot.mcp_entry()}}, indent=2)
    if agent not in PRINTABLE:
        raise UsageError(f"unknown agent {agent!r} for --print (use {', '.join(PRINTABLE)})")
    entry = mcp_entry(None, "--root", os.path.abspath(project)) if agent == "windsurf" else mcp_entry()
    return json.dumps({"mcpServers": {SERVER_NAME: entry}}, indent=2)
