"""Which of a Claude Code session's tool calls are still running: the hook's attribution state.

A checkpoint labelled ``actor=user`` claims that what changed since the previous one was the
user's.  That is only true while no tool call of the agent is running: a call started in
parallel (its PreToolUse came, its PostToolUse not yet) or a Bash/PowerShell call started with
``run_in_background`` (its changes land after its PostToolUse) may be writing.  The rule: **a
tool call's changes are the agent's until its completion is known**, so while any call is open
those changes are labelled ``actor=agent`` (metadata ``attributed`` says why).  A call is open
from its PreToolUse to its PostToolUse or PostToolUseFailure; a background call until a Stop
reports no background task (``background_tasks`` empty); every call of a turn is over at its
Stop.  When the state cannot be read the label is ``unknown``, never silently the user's.

The state is one small JSON file per session in the store directory, read and written under an
``flock`` held for the whole event (parallel hooks of one session take turns).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from typing import Any

import blake3

DIRNAME = "hook-sessions"
#: Shell tools whose calls may run in the background (``tool_input.run_in_background``).
SHELLS = ("Bash", "PowerShell")


class Calls:
    """The open tool calls of one session (tool_use_ids), and whether the state was readable."""

    def __init__(self, doc: dict[str, Any] | None):
        self.readable = doc is not None
        doc = doc or {}
        self.running = set(_ids(doc.get("running")))
        self.background = set(_ids(doc.get("background")))

    def open_ids(self) -> list[str]:
        return sorted(self.running | self.background)

    def doc(self) -> dict[str, Any]:
        return {"running": sorted(self.running), "background": sorted(self.background)}


def _path(store_dir: str, session_id: str) -> str:
    name = blake3.blake3(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return os.path.join(store_dir, DIRNAME, name + ".json")


def known(store_dir: str, session_id: str) -> bool:
    """Whether an earlier event of the session was seen."""
    return os.path.exists(_path(store_dir, session_id))


@contextlib.contextmanager
def session(store_dir: str, session_id: str) -> Iterator[Calls]:
    """The session's open calls, locked for the event; written back when the block ends."""
    path = _path(store_dir, session_id)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, 1 << 20, 0)
        try:
            doc = json.loads(raw) if raw.strip() else {}
        except ValueError:
            doc = None
        calls = Calls(doc if isinstance(doc, dict) else None)
        yield calls
        data = json.dumps(calls.doc()).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)  # (closing drops the flock)


def attribute(meta: dict[str, Any], calls: Calls, events_may_be_lost: bool = False) -> None:
    """Relabel a checkpoint the event calls the user's when that cannot be known true
    (``events_may_be_lost``: tool events go over HTTP to a service that was not running)."""
    if meta.get("actor") != "user":
        return
    if events_may_be_lost:
        meta["actor"] = "unknown"
        meta["attributed"] = "the service was not running: tool events sent to it over http may be lost"
    elif not calls.readable:
        meta["actor"] = "unknown"
        meta["attributed"] = "the session's hook state could not be read"
    elif calls.open_ids():
        meta["actor"] = "agent"
        meta["attributed"] = "changes while the agent's tool calls ran: " + ", ".join(calls.open_ids())


def advance(event: dict[str, Any], calls: Calls) -> None:
    """What the event says about the session's calls, once its checkpoint is taken."""
    name = str(event.get("hook_event_name", ""))
    call = str(event.get("tool_use_id") or "")
    tool_input = event.get("tool_input")
    background = (
        str(event.get("tool_name", "")) in SHELLS
        and isinstance(tool_input, dict)
        and tool_input.get("run_in_background") is True
    )
    if name == "PreToolUse" and call:
        calls.running.add(call)
    elif name in ("PostToolUse", "PostToolUseFailure"):
        calls.running.discard(call)
        if background and call:
            calls.background.add(call)
    elif name == "Stop":
        calls.running.clear()
        tasks = event.get("background_tasks")
        if isinstance(tasks, list) and not tasks:
            calls.background.clear()


def _ids(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []
