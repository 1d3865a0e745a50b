"""Writers for the hook settings that are not Claude Code's shape.

Two shapes: an agent's own settings file holding ``{"hooks": {event: [entry, ...]}}`` with flat
entries (Cursor, Windsurf), merged like Claude Code's (every other entry kept, only
snapstore's removed); and a file that is snapstore's alone (Copilot CLI's and Kiro's hook files,
Cline's hook scripts, OpenCode's plugin), recognised by a marker in its text, written whole,
never overwritten when it is someone else's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any

from snapstore.errors import TreeIOError, UsageError
from snapstore.integrations.settings import (
    MAX_SETTINGS_BYTES,
    check_in_project,
    describe,
    is_own_hook,
    update_file,
)


def where(agent: str, scope: str, project: str, home: str | None) -> tuple[str, str | None, str]:
    """``(base, inside, project)`` for an agent's ``project`` or ``user`` scope: the directory its
    settings paths start from (the project, or the home directory), the project a write must
    stay inside (None for the user scope), and the project as an absolute path."""
    if scope not in ("project", "user"):
        raise UsageError(f"{agent} has no {scope!r} scope (use project or user)")
    project = os.path.abspath(project)
    if scope == "project":
        return project, project, project
    return (home if home is not None else os.path.expanduser("~")), None, project


def add_flat(doc: dict[str, Any], agent: str, events: tuple[str, ...], entry: Callable[[str], dict[str, Any]]) -> list[str]:
    """Add ``entry(event)`` to ``doc["hooks"][event]`` for each event that has none of ours."""
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise UsageError("the settings' \"hooks\" is not a JSON object: not touching it")
    changes = []
    for event in events:
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise UsageError(f"the settings' hooks.{event} is not a JSON list: not touching it")
        if any(is_own_hook(h, agent) for h in entries):
            continue
        new = entry(event)
        entries.append(new)
        changes.append(f"added hook {event}: {new['command']}")
    return changes


def remove_flat(doc: dict[str, Any], agent: str) -> list[str]:
    """Take snapstore's flat entries (only those) out of ``doc["hooks"]``."""
    hooks = doc.get("hooks")
    if not isinstance(hooks, dict):
        return []
    changes = []
    for event in list(hooks):
        entries = hooks[event]
        if not isinstance(entries, list):
            continue
        kept = [h for h in entries if not is_own_hook(h, agent)]
        changes += [f"removed hook {event}: {describe(h)}" for h in entries if is_own_hook(h, agent)]
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    return changes


def flat_settings(
    path: str, project: str | None, agent: str, events: tuple[str, ...], entry: Callable[[str], dict[str, Any]],
    *, remove: bool, dry_run: bool, base: dict[str, Any] | None = None,
) -> list[str]:
    """Merge (or remove) flat hook entries in the JSON file ``path`` (checked to stay inside
    ``project`` when given); ``base`` fills a new file's other keys (Cursor's ``version``)."""
    if project is not None:
        check_in_project(path, project)

    def change(doc: dict[str, Any]) -> list[str]:
        if remove:
            return remove_flat(doc, agent)
        for key, value in (base or {}).items():
            doc.setdefault(key, value)
        return add_flat(doc, agent, events, entry)

    return update_file(path, change, dry_run)


def own_file(
    path: str, project: str | None, content: str, marker: str, *, remove: bool, dry_run: bool, mode: int = 0o644,
) -> list[str]:
    """Write ``content`` to ``path`` (or ``remove`` it), a file that is snapstore's alone:
    recognised by ``marker`` in its text; someone else's file of that name is never touched."""
    from snapstore.tree.atomic import write_file_atomic

    if project is not None:
        check_in_project(path, project)
    old = read_small(path)
    name = os.path.basename(path)
    if old is not None and marker not in old:
        raise UsageError(f"{path} exists and is not snapstore's (no '{marker}' in it): not touching it")
    if remove:
        if old is None:
            return []
        if not dry_run:
            os.unlink(path)
        return [f"{path}: removed"]
    if old == content and (stat.S_IMODE(os.stat(path).st_mode) == mode):
        return []
    if not dry_run:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        except OSError as exc:
            raise TreeIOError(f"cannot create {os.path.dirname(path)}: {exc.strerror}") from exc
        write_file_atomic(path, content.encode(), mode)
    return [f"{path}: {'updated' if old is not None else 'added'} {name}"]


def read_small(path: str) -> str | None:
    """The text of a settings-sized regular file, None when absent; anything else refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TreeIOError(f"cannot read {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SETTINGS_BYTES:
            raise UsageError(f"{path} is not a regular file of at most {MAX_SETTINGS_BYTES >> 20} MiB: nothing changed")
        return f.read(MAX_SETTINGS_BYTES).decode("utf-8", "surrogateescape")


def server_file(
    path: str, project: str | None, keys: list[str], entry: dict[str, Any], *, remove: bool, dry_run: bool
) -> list[str]:
    """Add (or ``remove``) snapstore's MCP server ``entry`` at ``keys`` in the JSON file ``path``
    (checked to stay inside ``project`` when given)."""
    from snapstore.integrations.settings import add_server, remove_server

    if project is not None:
        check_in_project(path, project)

    def change(doc: dict[str, Any]) -> list[str]:
        return remove_server(doc, keys) if remove else add_server(doc, keys, entry)

    return update_file(path, change, dry_run)
