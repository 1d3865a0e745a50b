"""Writers for the hook settings that are not Claude Code's shape.

Two shapes: an agent's own settings file holding ``{"hooks": {event: [entry, ...]}}`` with flat
entries (Cursor, Windsurf), merged like Claude Code's (every other entry kept, only
snapstore's removed, an entry of ours naming another executable updated); and a file that is
snapstore's alone (Copilot CLI's and Kiro's hook files, Cline's hook scripts, OpenCode's plugin),
written whole.  Such a file is snapstore's only when its text is, byte for byte, what snapstore
writes (for some path to snapstore) or wrote in an earlier version: a file of that name that
merely calls snapstore, or that its owner edited, is someone else's, and ``integrate`` (or
``--remove``) refuses with one line (:class:`~snapstore.errors.ConflictError`, exit 9), nothing
changed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any

from snapstore.errors import ConflictError, TreeIOError, UsageError
from snapstore.integrations.executable import Executable, program_words
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
    """Add ``entry(event)`` to ``doc["hooks"][event]`` for each event, replacing an entry of ours
    that differs (another path to snapstore, another matcher)."""
    hooks = doc.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise UsageError("the settings' \"hooks\" is not a JSON object: not touching it")
    changes = []
    for event in events:
        entries = hooks.setdefault(event, [])
        if not isinstance(entries, list):
            raise UsageError(f"the settings' hooks.{event} is not a JSON list: not touching it")
        new = entry(event)
        ours = [h for h in entries if is_own_hook(h, agent)]
        if new in ours:
            continue
        entries[:] = [h for h in entries if not is_own_hook(h, agent)]
        entries.append(new)
        changes.append(f"{'updated' if ours else 'added'} hook {event}: {new['command']}")
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
    path: str, project: str | None, content: str, owns: Callable[[str], bool], *, remove: bool, dry_run: bool,
    mode: int = 0o644,
) -> list[str]:
    """Write ``content`` to ``path`` (or ``remove`` it), a file that is snapstore's alone:
    ``owns(text)`` says whether an existing file is snapstore's; someone else's is never touched."""
    from snapstore.tree.atomic import write_file_atomic

    if project is not None:
        check_in_project(path, project)
    old = read_small(path)
    name = os.path.basename(path)
    if old is not None and old != content and not owns(old):
        raise ConflictError(
            f"{path} is not the file snapstore writes (yours, or edited): not touching it (move it away, "
            "or call snapstore from it yourself)"
        )
    if remove:
        if old is None:
            return []
        if not dry_run:
            try:
                os.unlink(path)
            except OSError as exc:
                raise TreeIOError(f"cannot remove {path}: {exc.strerror}") from exc
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


def written_by_snapstore(
    text: str, render: Callable[[Executable], str], found: Callable[[str], list[list[str]]], legacy: frozenset[str] = frozenset(),
) -> bool:
    """Whether ``text`` is byte for byte what ``render`` writes for the snapstore it names (any
    path to it: ``found(text)`` gives the argv prefixes it names), or what an earlier snapstore
    wrote: ``legacy`` holds the SHA-256 of earlier versions' texts as written for a bare
    ``snapstore`` (:func:`bare_digest`; a text naming another path is compared as if it named
    that)."""
    candidates = [w for w in found(text) if w and program_words(w) == len(w)]
    if any(text == render(Executable(tuple(words))) for words in candidates):
        return True
    return any(bare_digest(text, words) in legacy for words in [*candidates, ["snapstore"]])


def bare_digest(text: str, words: list[str]) -> str:
    """SHA-256 of ``text`` with the program ``words`` (as a shell line, inside a JSON string, or as
    a JSON list) written as a bare ``snapstore``: how :func:`written_by_snapstore` knows an
    earlier version's file, whatever path to snapstore it names.  A change to what an owned file
    holds adds the old text's digest to its module's legacy set (tests pin the current ones)."""
    import hashlib
    import json
    import shlex

    line = shlex.join(words)
    for mine, bare in ((json.dumps(list(words)), '["snapstore"]'), (json.dumps(line)[1:-1], "snapstore"), (line, "snapstore")):
        text = text.replace(mine, bare)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def json_commands(text: str, agent: str) -> list[list[str]]:
    """The snapstore programs (argv prefixes) that the ``hook AGENT`` commands of a JSON text
    name; [] when it is not JSON."""
    import json

    from snapstore.integrations.executable import is_snapstore_command, split_command

    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return []
    found: list[list[str]] = []
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and is_snapstore_command(node, "hook", agent, exact=True):
            words = split_command(node)
            found.append(words[: program_words(words)])
    return found


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
