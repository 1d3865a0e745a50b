"""Which of a session's tool calls may still be writing: the hooks' attribution state.

A checkpoint labelled ``actor=user`` claims that what changed since the previous one was the
user's.  That holds only while no tool call of the agent may be writing.  Two kinds may:

- **running calls** (a PreToolUse came, its PostToolUse or PostToolUseFailure not yet: calls
  run in parallel).  What changes meanwhile is the agent's: labelled ``actor=agent``.
- **background calls** (a shell call that backgrounds, :mod:`snapstore.integrations.background`):
  they write after their PostToolUse, while the user may be editing too.  What changes while
  one may still run is nobody's for certain: labelled ``actor=unknown``, never the user's and
  never the agent's (a revert of the agent lists it and leaves it unless asked).

Metadata ``attributed`` says why a label was changed.  **The unknown window** of a background
call opens at its PostToolUse and ends at the first of:

1. the agent's word that it finished: a ``Stop`` whose ``background_tasks`` is empty (Claude
   Code: every background task is over), or as many ``BackgroundTaskDone`` events as calls are
   open (Copilot's ``shell_completed``/``shell_detached_completed`` notifications, which do not
   say which call finished: every window stays open until each call could have sent its own);
2. ``hooks.background-window`` seconds (:data:`WINDOW`) after it opened, for agents that never
   say (Gemini, Codex, Cursor, Cline, Windsurf, Kiro, OpenCode, a ``cmd &`` anywhere).

The checkpoint of the event that closes a window is still ``unknown`` (it holds what the call
wrote before it ended); the next is the user's again.  Every call of a turn is over at its
``Stop`` except background ones.  When the state cannot be read the label is ``unknown``.

The state is one small JSON file per session in the store directory, read and written under an
``flock`` held for the whole event (parallel hooks of one session take turns), and rewritten
only when the event changed it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from collections.abc import Iterator
from typing import Any

import blake3

from snapstore.integrations import background as background_calls

DIRNAME = "hook-sessions"
#: Shell tools whose calls may run in the background.
SHELLS = background_calls.SHELLS
#: Default length of a background call's unknown window, seconds (config ``hooks.background-window``).
WINDOW = 600.0
#: The model's event for "a background call finished" (Copilot's shell_completed notification).
DONE_EVENT = "BackgroundTaskDone"


class Calls:
    """The open tool calls of one session (tool_use_ids), and whether the state was readable."""

    def __init__(self, doc: dict[str, Any] | None, now: float | None = None):
        self.readable = doc is not None
        doc = doc or {}
        now = time.time() if now is None else now
        self.running = set(_ids(doc.get("running")))
        since = doc.get("since")
        since = since if isinstance(since, dict) else {}
        #: background call id -> when its unknown window opened (an older state file has no
        #: times: its calls' windows open now).
        self.background: dict[str, float] = {
            c: float(t) if isinstance((t := since.get(c)), int | float) and math.isfinite(t) else now
            for c in _ids(doc.get("background"))
        }
        #: How many "a background call finished" events came for the open background calls.
        done = doc.get("done")
        self.done = done if isinstance(done, int) and not isinstance(done, bool) and done > 0 else 0

    def open_ids(self) -> list[str]:
        return sorted(self.running | set(self.background))

    def doc(self) -> dict[str, Any]:
        return {
            "running": sorted(self.running),
            "background": sorted(self.background),
            "since": {c: t for c, t in sorted(self.background.items())},
            **({"done": self.done} if self.done else {}),
        }


def _path(store_dir: str, session_id: str) -> str:
    name = blake3.blake3(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return os.path.join(store_dir, DIRNAME, name + ".json")


def known(store_dir: str, session_id: str) -> bool:
    """Whether an earlier event of the session was seen."""
    return os.path.exists(_path(store_dir, session_id))


@contextlib.contextmanager
def session(store_dir: str, session_id: str) -> Iterator[Calls]:
    """The session's open calls, locked for the event; written back when the block ends (only
    when they changed)."""
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
        if data != raw.rstrip(b" "):
            _overwrite(fd, data, len(raw))
    finally:
        os.close(fd)  # (closing drops the flock)


def _overwrite(fd: int, data: bytes, old_size: int) -> None:
    """Write ``data`` over the file's ``old_size`` bytes, padded with spaces (JSON allows them)
    rather than truncated first: one write, no ``ftruncate`` on every event (it cost more than
    the rest of the state's handling), and never an empty file between two steps."""
    if len(data) < old_size <= 4 * len(data) + 4096:
        data += b" " * (old_size - len(data))
    elif len(data) < old_size:
        os.ftruncate(fd, len(data))  # (a long list that shrank: not kept padded for ever)
    os.pwrite(fd, data, 0)


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
    elif calls.running:
        meta["actor"] = "agent"
        meta["attributed"] = "changes while the agent's tool calls ran: " + ", ".join(sorted(calls.running))
    elif calls.background:
        meta["actor"] = "unknown"
        meta["attributed"] = "changes while the agent's background calls may still run: " + ", ".join(sorted(calls.background))


def advance(event: dict[str, Any], calls: Calls, *, now: float | None = None, window: float = WINDOW) -> None:
    """What the event says about the session's calls, once its checkpoint is taken; then the
    background calls whose window is over are dropped."""
    now = time.time() if now is None else now
    name = str(event.get("hook_event_name", ""))
    call = str(event.get("tool_use_id") or "")
    if name == "PreToolUse" and call:
        calls.running.add(call)
    elif name in ("PostToolUse", "PostToolUseFailure"):
        calls.running.discard(call)
        if call and backgrounds(event):
            calls.background[call] = now
    elif name == "Stop":
        calls.running.clear()
        tasks = event.get("background_tasks")
        if isinstance(tasks, list) and not tasks:
            calls.background.clear()
    elif name == DONE_EVENT and calls.background:
        calls.done += 1
        if calls.done >= len(calls.background):
            calls.background.clear()
    for c, since in list(calls.background.items()):
        if now - since > window:
            del calls.background[c]
    if not calls.background:
        calls.done = 0


def backgrounds(event: dict[str, Any]) -> bool:
    """Whether the event's tool call runs on in the background (the adapter's ``background``,
    an agent's flag in ``tool_input``, or the command line)."""
    if event.get("background") is True:
        return True
    return background_calls.reason(str(event.get("tool_name", "")), event.get("tool_input")) is not None


def _ids(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []
