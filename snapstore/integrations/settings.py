"""``snapstore integrate``: put snapstore's entries into an agent's settings, and take them out.

Claude Code reads hooks from ``.claude/settings.json`` (scope ``project``),
``.claude/settings.local.json`` (``local``) or ``~/.claude/settings.json`` (``user``), and MCP
servers from ``.mcp.json`` (project) or ``~/.claude.json`` (user: top level; local: under the
project's entry).  The merge keeps every other setting and hook, is idempotent (a second run
changes nothing), writes atomically after saving the old file as ``<file>.bak``, and returns
one line per change.  Every command names snapstore by the absolute path resolved when
``integrate`` runs (:mod:`snapstore.integrations.executable`: the agent's ``PATH`` may lack it);
an entry of ours naming another path, or under another matcher, is updated.  Only entries
snapstore made are removed by ``--remove``: a hook whose command is ``snapstore hook claude-code``
(any path to snapstore) and the ``snapstore`` server.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from typing import Any

from snapstore.errors import ConflictError, TreeIOError, UnsafePathError, UsageError
from snapstore.integrations.claude_code import EVENTS, MATCHER, TOOL_EVENTS
from snapstore.integrations.executable import (
    Executable,
    is_snapstore_command,
    resolve,
)
from snapstore.tree.atomic import write_file_atomic
from snapstore.tree.paths import is_inside

#: Seconds Claude Code gives the hook (the first event may create the store and start the
#: service; later ones take milliseconds).
HOOK_TIMEOUT = 20
SERVER_NAME = "snapstore"
SCOPES = ("project", "local", "user")
PRINTABLE = ("cursor", "cline", "windsurf", "kiro", "copilot", "opencode", "codex", "generic")


def mcp_entry(exe: Executable | None = None, *extra: str, **fields: Any) -> dict[str, Any]:
    """A JSON ``mcpServers`` entry running ``snapstore mcp`` (``extra``: more arguments;
    ``fields``: the agent's own keys, first)."""
    exe = exe or resolve()
    words = exe.words("mcp", *extra)
    return {**fields, "command": words[0], "args": words[1:]}


def settings_path(scope: str, project: str, home: str) -> str:
    """The Claude Code settings file of ``scope``."""
    if scope == "project":
        return os.path.join(project, ".claude", "settings.json")
    if scope == "local":
        return os.path.join(project, ".claude", "settings.local.json")
    if scope == "user":
        return os.path.join(home, ".claude", "settings.json")
    raise UsageError(f"unknown scope {scope!r} (use {', '.join(SCOPES)})")


def mcp_location(scope: str, project: str, home: str) -> tuple[str, list[str]]:
    """``(file, key path of the servers object)`` where Claude Code keeps MCP servers."""
    if scope == "project":
        return os.path.join(project, ".mcp.json"), ["mcpServers"]
    if scope == "user":
        return os.path.join(home, ".claude.json"), ["mcpServers"]
    if scope == "local":
        return os.path.join(home, ".claude.json"), ["projects", os.path.abspath(project), "mcpServers"]
    raise UsageError(f"unknown scope {scope!r} (use {', '.join(SCOPES)})")


class HookSpec:
    """What snapstore subscribes to in one agent's hook settings (Claude Code's shape)."""

    def __init__(
        self, agent: str, events: tuple[str, ...], tool_events: tuple[str, ...], matcher: str, timeout: int = HOOK_TIMEOUT
    ):
        self.agent = agent
        self.events = events
        self.tool_events = tool_events
        self.matcher = matcher
        #: In the unit the agent reads (seconds for Claude Code and Codex, milliseconds for Gemini).
        self.timeout = timeout
        #: ``(url, token)`` of the service's HTTP endpoint: the tool events become ``http``
        #: hooks there (Claude Code only; service.http_hooks), the others stay commands.
        self.http: tuple[str, str] | None = None

    def entry(self, event: str, exe: Executable) -> dict[str, Any]:
        """snapstore's hook entry for ``event``, its command running ``exe``."""
        if self.http is not None and event in self.tool_events:
            url, token = self.http
            return {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}, "timeout": self.timeout}
        return {"type": "command", "command": exe.command("hook", self.agent), "timeout": self.timeout}


CLAUDE_CODE = HookSpec("claude-code", EVENTS, TOOL_EVENTS, MATCHER)


def is_own_hook(hook: Any, agent: str = "claude-code") -> bool:
    """Whether a hook entry is snapstore's: ``[/path/to/]snapstore hook AGENT`` and nothing more
    (a command that also runs something of the user's is the user's), or an ``http`` hook to the
    service's loopback endpoint for AGENT."""
    if not isinstance(hook, dict):
        return False
    url = hook.get("url")
    if hook.get("type") == "http" and isinstance(url, str):
        return url.startswith("http://127.0.0.1:") and url.endswith("/snapstore/hook/" + agent)
    command = hook.get("command")
    return isinstance(command, str) and is_snapstore_command(command, "hook", agent, exact=True)


def describe(hook: dict[str, Any]) -> str:
    """A hook entry in a change line (never its credential)."""
    return str(hook.get("command") or hook.get("url") or "?")


def add_hooks(doc: dict[str, Any], spec: HookSpec = CLAUDE_CODE, exe: Executable | None = None) -> list[str]:
    """Merge snapstore's hook entries into a settings document; the changes made (an entry of
    ours in another form, naming another executable or under another matcher is replaced)."""
    exe = exe or resolve()
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise UsageError("the settings' \"hooks\" is not a JSON object: not touching it")
    changes = []
    for event in spec.events:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise UsageError(f"the settings' hooks.{event} is not a JSON list: not touching it")
        wanted = spec.entry(event, exe)
        matcher = spec.matcher if event in spec.tool_events else None
        ours = [
            (g.get("matcher"), h) for g in groups if isinstance(g, dict) and isinstance(g.get("hooks"), list)
            for h in g["hooks"] if is_own_hook(h, spec.agent)
        ]
        if any(m == matcher and _same_form(h, wanted) for m, h in ours):
            continue
        verb = "added"
        if ours:  # another form, path or matcher: take it out first
            _drop_own(groups, spec.agent)
            verb = "updated"
        group: dict[str, Any] = {"hooks": [wanted]}
        if matcher is not None:
            group = {"matcher": matcher, **group}
        groups.append(group)
        where = f" (matcher {spec.matcher})" if event in spec.tool_events else ""
        changes.append(f"{verb} hook {event}: {describe(wanted)}{where}")
    return changes


def _same_form(hook: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether an entry of ours already is what ``wanted`` asks for: a command hook running the
    same command, or an http hook to the same URL with the same token."""
    if wanted.get("type") == "http":
        return hook.get("type") == "http" and hook.get("url") == wanted["url"] and hook.get("headers") == wanted.get("headers")
    return hook.get("type") != "http" and hook.get("command") == wanted["command"]


def _drop_own(groups: list[Any], agent: str) -> None:
    for group in list(groups):
        inner = group.get("hooks") if isinstance(group, dict) else None
        if isinstance(inner, list) and any(is_own_hook(h, agent) for h in inner):
            rest = [h for h in inner if not is_own_hook(h, agent)]
            if rest:
                group["hooks"] = rest
            else:
                groups.remove(group)


def remove_hooks(doc: dict[str, Any], spec: HookSpec = CLAUDE_CODE) -> list[str]:
    """Take snapstore's hook entries (only those) out of a settings document."""
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        return []
    changes = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list) or not any(is_own_hook(h, spec.agent) for h in inner):
                kept_groups.append(group)
                continue
            for h in inner:
                if is_own_hook(h, spec.agent):
                    changes.append(f"removed hook {event}: {describe(h)}")
            rest = [h for h in inner if not is_own_hook(h, spec.agent)]
            if rest:
                kept_groups.append({**group, "hooks": rest})
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if not hooks:
        del doc["hooks"]
    return changes


def _servers(doc: dict[str, Any], keys: list[str], create: bool) -> dict[str, Any] | None:
    node: Any = doc
    for key in keys:
        if not isinstance(node, dict):
            raise UsageError(f"the MCP settings at {'.'.join(keys)} are not a JSON object: not touching them")
        if key not in node:
            if not create:
                return None
            node[key] = {}
        node = node[key]
    if not isinstance(node, dict):
        raise UsageError(f"the MCP settings at {'.'.join(keys)} are not a JSON object: not touching them")
    return node


def add_server(doc: dict[str, Any], keys: list[str], entry: dict[str, Any] | None = None) -> list[str]:
    """Put snapstore's server ``entry`` (default: :func:`mcp_entry`) at ``keys``."""
    entry = entry if entry is not None else mcp_entry()
    servers = _servers(doc, keys, create=True)
    assert servers is not None
    if servers.get(SERVER_NAME) == entry:
        return []
    if SERVER_NAME in servers and not is_own_server(servers[SERVER_NAME]):
        raise ConflictError(f"an MCP server named {SERVER_NAME!r} that does not run snapstore is there: not touching it")
    verb = "updated" if SERVER_NAME in servers else "added"
    servers[SERVER_NAME] = copy.deepcopy(entry)
    return [f"{verb} MCP server {SERVER_NAME}: {server_command(entry)}"]


def remove_server(doc: dict[str, Any], keys: list[str]) -> list[str]:
    servers = _servers(doc, keys, create=False)
    entry = servers.get(SERVER_NAME) if servers is not None else None
    if servers is None or not isinstance(entry, dict):
        return []
    if not is_own_server(entry):
        return []  # a server of that name that is not ours
    del servers[SERVER_NAME]
    return [f"removed MCP server {SERVER_NAME}"]


def server_words(entry: dict[str, Any]) -> list[str]:
    """The argv of an MCP server entry (OpenCode's ``command`` is the whole argv)."""
    command, args = entry.get("command"), entry.get("args")
    words = list(command) if isinstance(command, list) else [command]
    words += list(args) if isinstance(args, list) else []
    return [str(w) for w in words]


def server_command(entry: dict[str, Any]) -> str:
    import shlex

    return shlex.join(server_words(entry))


def is_own_server(entry: Any) -> bool:
    """Whether an MCP server entry runs ``snapstore mcp`` (any path to it)."""
    return isinstance(entry, dict) and is_snapstore_command(server_words(entry), "mcp")


#: The largest settings file read (a settings file is a few KiB; a huge one is not one).
MAX_SETTINGS_BYTES = 16 << 20


def load(path: str) -> tuple[dict[str, Any], bytes | None]:
    """A settings file's JSON object and its bytes (``{}`` and None when it does not exist).

    Only a regular file of at most :data:`MAX_SETTINGS_BYTES` is read (a FIFO would block, a
    device never end): anything else is refused, nothing changed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise TreeIOError(f"cannot read {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path} is not a regular file: nothing changed")
        if st.st_size > MAX_SETTINGS_BYTES:
            raise UsageError(f"{path} is larger than {MAX_SETTINGS_BYTES >> 20} MiB, not a settings file: nothing changed")
        try:
            raw = f.read(MAX_SETTINGS_BYTES + 1)
        except OSError as exc:
            raise TreeIOError(f"cannot read {path}: {exc.strerror}") from exc
    if len(raw) > MAX_SETTINGS_BYTES:
        raise UsageError(f"{path} is larger than {MAX_SETTINGS_BYTES >> 20} MiB, not a settings file: nothing changed")
    if not raw.strip():
        return {}, raw
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}): nothing changed") from exc
    if not isinstance(doc, dict):
        raise UsageError(f"{path} does not hold a JSON object: nothing changed")
    return doc, raw


def check_in_project(path: str, project: str) -> None:
    """Refuse (UnsafePathError) a project-scope file that a symlink (``.claude -> ~/.claude``,
    or the file itself) leads out of the project: a project's command must not rewrite the
    user's global settings, or anything else outside the project."""
    top = os.path.realpath(project)
    real = os.path.realpath(path)
    if not is_inside(real, top):
        raise UnsafePathError(
            f"{path} leads out of the project (to {real}) through a symlink: not written (use "
            "--scope user for your own settings)"
        )


def update_file(path: str, change: Any, dry_run: bool, private: bool = False) -> list[str]:
    """Apply ``change(doc) -> [lines]`` to the JSON file ``path``; write only if it changed
    (``private``: owner-only, 0600, as a file holding a credential must be)."""
    doc, raw = load(path)
    changes: list[str] = change(doc)
    if not changes or dry_run:
        return [f"{path}: {line}" for line in changes]
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as exc:
        raise TreeIOError(f"cannot create {os.path.dirname(path)}: {exc.strerror}") from exc
    mode = 0o600 if os.path.basename(path) == ".claude.json" else 0o644
    if raw is not None:
        mode = os.stat(path).st_mode & 0o777
        write_file_atomic(path + ".bak", raw, mode)
    if private:
        mode = 0o600
    write_file_atomic(path, (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode(), mode)
    lines = [f"{path}: {line}" for line in changes]
    if raw is not None:
        lines.append(f"{path}: the previous version is in {path}.bak")
    return lines


def integrate_claude_code(
    project: str,
    *,
    scope: str = "project",
    mcp: bool = False,
    remove: bool = False,
    dry_run: bool = False,
    home: str | None = None,
    http: bool = False,
) -> list[str]:
    """Add (or ``remove``) snapstore's hooks, and with ``mcp`` its MCP server; the changes.

    ``http``: the tool events become ``http`` hooks answered by the store's service
    (:mod:`snapstore.service.http_hooks`), in the unshared ``settings.local.json`` since they
    carry a credential; the other events stay command hooks (they start the service)."""
    home = home if home is not None else os.path.expanduser("~")
    project = os.path.abspath(project)
    spec = CLAUDE_CODE
    if http and not remove:
        if scope == "user":
            raise UsageError("--http hooks carry the credential of one project's store: not in your user settings (use --scope local)")
        scope = "local"
        spec = _http_spec(project, dry_run)
    settings = settings_path(scope, project, home)
    if scope != "user":
        check_in_project(settings, project)
    if mcp:
        path, keys = mcp_location(scope, project, home)
        if scope == "project":
            check_in_project(path, project)
    exe = resolve()
    out = update_file(settings, remove_hooks if remove else (lambda doc: add_hooks(doc, spec, exe)), dry_run, private=spec.http is not None)
    if spec.http is not None and out and not dry_run:
        out.append(_restart_service(project))
    if mcp:

        def server_change(doc: dict[str, Any]) -> list[str]:
            return remove_server(doc, keys) if remove else add_server(doc, keys, mcp_entry(exe, type="stdio"))

        out += update_file(path, server_change, dry_run)
    return out


def _http_spec(project: str, dry_run: bool) -> HookSpec:
    """Claude Code's hooks with the tool events over HTTP to the project's store's service."""
    from snapstore.service import http_hooks
    from snapstore.store import Store

    store_dir = Store.locate(project)
    found = http_hooks.load(store_dir) if dry_run else http_hooks.configure(store_dir)
    port, token = found if found is not None else (0, "(made when written)")
    spec = HookSpec("claude-code", EVENTS, TOOL_EVENTS, MATCHER)
    spec.http = (http_hooks.url(port, "claude-code"), token)
    return spec


def _restart_service(project: str) -> str:
    """Stop the store's running service: the next command hook starts it with the endpoint."""
    from snapstore.service import daemon
    from snapstore.store import Store

    stopped = daemon.stop(Store.locate(project))
    return "the service answers the http hooks from its next start" + (" (stopped it now)" if stopped else "")
