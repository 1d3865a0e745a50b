"""The one event model every agent's hook payload is mapped onto: Claude Code's.

An adapter (``snapstore.integrations.<agent>``) turns its agent's payload into a dict with
``hook_event_name`` (``UserPromptSubmit``, ``PreToolUse``, ``PostToolUse``,
``PostToolUseFailure``, ``Stop``, ``PreCompact``, and ``BackgroundTaskDone`` for an agent's word
that a background command finished), ``session_id``, ``tool_name`` (the model's
names: ``Bash``, ``Write``, ``Edit``, or the agent's own for any other tool), ``tool_input``,
``tool_use_id``, ``prompt``, ``transcript_path``, ``cwd`` and ``background`` (true when the
adapter knows the call runs on after its post event; the agents' own flags in ``tool_input``
and the command line count too: :mod:`snapstore.integrations.background`), which
:func:`snapstore.integrations.claude_code.run` records.  What every adapter shares lives here.
"""

from __future__ import annotations

import json
import os
from typing import Any

import blake3


def call_id(agent: str, tool: str, subject: Any) -> str:
    """A tool call's id for agents that send none: the same for a call's before and after
    events (both carry the same tool and arguments), different for different calls."""
    text = json.dumps(subject, sort_keys=True, default=str)
    return f"{agent}-" + blake3.blake3(f"{tool}\0{text}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def directory(candidate: Any) -> str | None:
    """``candidate`` when it names an existing directory by an absolute path, else None."""
    if isinstance(candidate, str) and os.path.isabs(candidate) and os.path.isdir(candidate):
        return candidate
    return None


def first_directory(*candidates: Any) -> str | None:
    """The first candidate that is an absolute existing directory (a list counts by its first
    element: agents send workspace roots as lists)."""
    for candidate in candidates:
        if isinstance(candidate, list):
            candidate = candidate[0] if candidate else None
        found = directory(candidate)
        if found is not None:
            return found
    return None


def event(name: str, session: str, **fields: Any) -> dict[str, Any]:
    """An event of the model (fields that are None are left out)."""
    out: dict[str, Any] = {"hook_event_name": name, "session_id": session}
    out.update({k: v for k, v in fields.items() if v is not None})
    return out


def tool_event(
    agent: str, name: str, session: str, tool: str, tool_input: dict[str, Any], *, failed: bool = False,
    cwd: str | None = None, background: bool = False,
) -> dict[str, Any]:
    """A PreToolUse/PostToolUse(Failure) event whose call id is made from the tool and what it
    works on, so that an agent's duplicate events for one call (a generic and a specific one)
    open and close the same call."""
    if failed and name == "PostToolUse":
        name = "PostToolUseFailure"
    subject = tool_input.get("command") if tool == "Bash" else tool_input.get("file_path")
    return event(
        name, session, tool_name=tool, tool_input=tool_input,
        tool_use_id=call_id(agent, tool, subject if subject is not None else tool_input), cwd=cwd,
        background=True if background else None,
    )
