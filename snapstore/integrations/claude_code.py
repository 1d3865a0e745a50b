"""``snapstore hook claude-code``: one Claude Code hook event in, checkpoints out.

Every event arrives as one JSON object on stdin (``session_id``, ``hook_event_name``,
``transcript_path``, ``cwd`` and the event's own fields).  What each event records:

============================  =====================================================================
``UserPromptSubmit``          a checkpoint labelled with the prompt's first line, with the transcript
``PreToolUse``                "before <tool>: <command or file>", only when the tree changed since the
                              last checkpoint: those are the user's changes (``actor=user``)
``PostToolUse``               "after <tool>: ...": the tool's changes, shell commands included
                              (``actor=agent``); nothing when the tool changed nothing
``PostToolUseFailure``        "after failed <tool>: ...": the same for a call that failed (a Bash
                              command that exited non-zero still changed what it changed)
``Stop`` / ``SubagentStop``   "end of turn" / "end of subagent turn", with the transcript; any
                              change since the last tool call is the user's (``actor=user``)
``PreCompact``                "before compaction", with the transcript (compaction loses context)
``BackgroundTaskDone``        "background command finished", when the tree changed (an adapter's
                              event: Copilot's ``shell_completed`` notification)
``SessionStart``/``SessionEnd`` nothing (no tree change to attribute; SessionEnd has ~1.5 s)
============================  =====================================================================

A "user" label holds only while no tool call of the agent may be writing: while a call runs in
parallel the changes are the agent's, while a backgrounded shell call may still run they are
``unknown`` (:mod:`snapstore.integrations.hook_state`).

Every checkpoint has task = the session id and metadata ``actor`` ("user", "agent" or "unknown"),
``event``, ``session_id`` and, for tool events, ``tool_name`` and ``tool_use_id``: the contract
other tools (selective revert) rely on.  The hook never exits 2 (that would block the tool
call) and never prints on ``UserPromptSubmit``/``SessionStart`` (plain output there goes into
the model's context).  When snapstore fails, the error goes to ``hook.log`` in the store and,
once per session, to a ``{"systemMessage": ...}`` the user sees.
"""

from __future__ import annotations

import json
import os
import stat
import time
import traceback
from collections.abc import Callable
from typing import Any

from snapstore.errors import SnapstoreError, StoreExistsError, StoreNotFoundError, UsageError
from snapstore.integrations.bounded_json import loads_payload
from snapstore.integrations.claude_transcript import read_transcript as read_transcript
from snapstore.integrations.hook_log import append_line as _append
from snapstore.store import Store

#: The tools whose calls change files; the hook entries' matcher.  Every MCP server's tool is
#: bracketed too (``mcp__<server>__<tool>``: any of them may write; one that changed nothing
#: records nothing).
TOOLS = ("Bash", "PowerShell", "Write", "Edit", "MultiEdit", "NotebookEdit", "mcp__.*")
MATCHER = "|".join(TOOLS)
#: Events the settings entries subscribe to (SessionStart and SessionEnd record nothing).
EVENTS = ("UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop", "PreCompact")
TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure")
SILENT_EVENTS = ("UserPromptSubmit", "SessionStart")
LOG_NAME = "hook.log"
WARNED_NAME = "hook-warned-sessions"
#: Idle timeout of a service the hook starts (seconds) when the store's config has none.
SERVICE_IDLE_TIMEOUT = 1800.0
LABEL_WIDTH = 120


def _one_line(text: str, width: int = LABEL_WIDTH) -> str:
    for line in text.splitlines():
        if line.strip():
            line = " ".join(line.split())
            return line if len(line) <= width else line[: width - 1] + "\u2026"
    return ""


def patch_files(patch: str) -> list[str]:
    """The files a Codex ``apply_patch`` patch adds, updates or deletes."""
    import re

    return re.findall(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$", patch, flags=re.MULTILINE)


def tool_subject(tool: str, tool_input: Any, project: str) -> str:
    """What a tool call is about: the command of a Bash call, else the file (relative)."""
    if not isinstance(tool_input, dict):
        return ""
    if tool in ("Bash", "PowerShell"):
        return _one_line(str(tool_input.get("command", "")))
    if tool == "apply_patch":  # Codex's file edits: the patch names the files
        return _one_line(", ".join(patch_files(str(tool_input.get("command", "")))))
    for key in ("file_path", "notebook_path", "path"):
        value = tool_input.get(key)
        if isinstance(value, str) and value:
            rel = os.path.relpath(value, project) if os.path.isabs(value) else value
            return value if rel.startswith(os.pardir) else rel
    return ""


def plan(event: dict[str, Any], project: str) -> dict[str, Any] | None:
    """The snapshot arguments an event calls for, or None when it records nothing."""
    name = str(event.get("hook_event_name", ""))
    session = str(event.get("session_id") or "") or None
    meta: dict[str, Any] = {"event": name, "session_id": session or ""}
    args: dict[str, Any] = {"task": session, "metadata": meta}
    transcript = event.get("transcript_path")
    if name == "UserPromptSubmit":
        meta["actor"] = "user"
        args["message"] = _one_line(str(event.get("prompt", ""))) or "prompt"
        args["conversation_from"] = transcript
    elif name in TOOL_EVENTS:
        tool = str(event.get("tool_name", ""))
        subject = tool_subject(tool, event.get("tool_input"), project)
        when = {"PreToolUse": "before", "PostToolUse": "after"}.get(name, "after failed")
        meta.update(actor="user" if when == "before" else "agent", tool_name=tool, tool_use_id=str(event.get("tool_use_id", "")))
        args["message"] = f"{when} {tool}: {subject}" if subject else f"{when} {tool}"
        args["skip_unchanged"] = True
    elif name in ("Stop", "SubagentStop", "PreCompact"):
        # The agent changes files only through tools (recorded by PostToolUse): whatever else
        # changed since the last checkpoint was done by someone else, i.e. the user.
        meta["actor"] = "user"
        args["message"] = {"Stop": "end of turn", "SubagentStop": "end of subagent turn", "PreCompact": "before compaction"}[name]
        args["conversation_from"] = transcript
    elif name == "BackgroundTaskDone":
        # What changed since the last checkpoint includes what the command wrote before it ended.
        meta["actor"] = "unknown"
        meta["attributed"] = "a background command of the agent ran until this event"
        args["message"] = "background command finished"
        args["skip_unchanged"] = True
    else:
        return None
    return args


def run(
    raw: str,
    project: str,
    open_store: Callable[[], Store],
    *,
    start_service: bool = True,
    agent: str = "claude-code",
) -> str:
    """Handle one event (the JSON text ``raw``); returns what to print (often nothing).

    Never raises: a failure is logged in the store and reported once per session as a
    ``systemMessage`` (never on an event whose output would reach the model).
    """
    event: dict[str, Any] = {}
    store_dir: str | None = None
    try:
        doc = loads_payload(raw)  # bounded: a hostile payload is one clear error, not a crash
        if not isinstance(doc, dict):
            raise ValueError("the event is not a JSON object")
        event = doc
        args = plan(event, project)
        if args is None:
            return ""
        args["metadata"]["agent"] = agent  # which agent's hook recorded it
        # ``with``: a store lent by the resident service is not closed, an own one is.
        with _open_or_create(open_store, project) as store:
            store_dir = store.store_dir
            session = str(event.get("session_id") or "")
            if store_dir is not None and session:
                from snapstore.integrations import hook_state

                lost = start_service and hook_state.known(store_dir, session) and _http_hooks_on(store_dir)
                with hook_state.session(store_dir, session) as calls:
                    hook_state.attribute(args["metadata"], calls, lost)
                    _record(store, args)
                    # (The window matters only for calls already open: a new one starts now.)
                    window = _background_window(store) if calls.background else hook_state.WINDOW
                    hook_state.advance(event, calls, window=window)
            else:
                _record(store, args)
            idle = _idle_timeout(store)
        if start_service and store_dir is not None:
            from snapstore.service import daemon

            daemon.ensure_running(store_dir, idle)
        # A turn whose tool events could reach another local user is stopped (service.http_hooks).
        from snapstore.service.http_hooks import prompt_guard

        return prompt_guard(str(event.get("hook_event_name", "")), store_dir) if agent == "claude-code" else ""
    except Exception as exc:  # noqa: BLE001 - the hook must never fail the agent's tool call
        return _report(exc, event, project, store_dir, agent)


def _open_or_create(open_store: Callable[[], Store], project: str) -> Store:
    try:
        return open_store()
    except StoreNotFoundError:
        pass
    from snapstore.integrations.roots import why_not_create

    why = why_not_create(project)
    if why is not None:
        raise UsageError(
            f"no store at or above {project}, and none is created there: {why} (run 'snapstore init' in "
            "the project, or start the agent there)"
        )
    try:
        return Store.init(project)
    except StoreExistsError:  # another hook created it meanwhile
        return open_store()


def _http_hooks_on(store_dir: str) -> bool:
    """Whether the store's service answers http hooks (then a command hook that finds the service
    down cannot vouch that no tool event was lost)."""
    from snapstore.service.http_hooks import load

    return load(store_dir) is not None


def _background_window(store: Store) -> float:
    """How long a background call's changes stay ``unknown`` when the agent never says it ended."""
    from snapstore.integrations.hook_state import WINDOW

    try:
        return float(store.config_get("hooks.background-window"))
    except (SnapstoreError, ValueError):
        return WINDOW


def _idle_timeout(store: Store) -> float:
    try:
        return float(store.config_get("service.idle-timeout"))
    except (SnapstoreError, ValueError):
        return SERVICE_IDLE_TIMEOUT


def _record(store: Store, args: dict[str, Any]) -> None:
    source = args.pop("conversation_from", None)
    notes: list[str] = []
    if source is not None:
        args["conversation"] = read_transcript(str(source), notes)
    cp = store.snapshot(**args)
    # (Not every warning: a file unreadable at each tool call would fill the log.)
    notes.extend(w for w in cp.warnings if "not valid Unicode" in w)
    if notes and store.store_dir is not None:  # what was left out or replaced, for the record
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        _append(os.path.join(store.store_dir, LOG_NAME), "".join(f"{stamp} checkpoint {cp.short_id}: {n}\n" for n in notes))


def _report(exc: Exception, event: dict[str, Any], project: str, store_dir: str | None, agent: str = "claude-code") -> str:
    message = exc.message if isinstance(exc, SnapstoreError) else f"{type(exc).__name__}: {exc}"
    message = " ".join(message.split())
    if store_dir is None:
        candidate = os.path.join(project, ".snapstore")
        store_dir = candidate if os.path.isdir(candidate) else None
    log_path = os.path.join(store_dir, LOG_NAME) if store_dir else None
    if log_path is not None:
        detail = "" if isinstance(exc, SnapstoreError) else traceback.format_exc()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        name = event.get("hook_event_name", "?")
        _append(log_path, f"{stamp} {name} session={event.get('session_id', '?')}: {message}\n{detail}")
    else:  # no store to log in (none found, or none may be created here): the user's log
        from snapstore.integrations import hook_log

        hook_log.append(agent, f"{event.get('hook_event_name', '?')} in {project}: {message}")
    if event.get("hook_event_name") in SILENT_EVENTS:
        return ""
    session = str(event.get("session_id", ""))
    if not _first_warning(store_dir or _user_state_dir(), session):
        return ""
    where = f" (details in {log_path})" if log_path else ""
    return json.dumps({"systemMessage": f"snapstore could not record a checkpoint: {message}{where}"})


def _user_state_dir() -> str:
    """Where a hook without a store remembers whom it warned: the user's runtime directory, else
    a cache directory of the user's own (so a refused store is said once, not at every call)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = runtime if runtime and os.path.isdir(runtime) else os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "snapstore")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        pass
    return folder


def _first_warning(store_dir: str, session: str) -> bool:
    """True the first time a session's failure is reported (then remembered in the store); an
    event without a session id is always reported (there is nothing to remember it by)."""
    if not session:
        return True
    path = os.path.join(store_dir, WARNED_NAME)
    try:  # never through a planted symlink, never blocked by a FIFO, never more than 1 MiB
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                seen = os.read(fd, 1 << 20).decode("utf-8", "replace")
                if session in seen.split("\n"):
                    return False
        finally:
            os.close(fd)
    except OSError:
        pass
    _append(path, session + "\n")
    return True
