"""Which shell calls of an agent run on after the agent's "after tool" event: backgrounded ones.

A backgrounded command writes after its PostToolUse, so what changes later cannot be vouched
for by any event: snapstore labels it ``unknown`` (:mod:`snapstore.integrations.hook_state`).
A call backgrounds when

- the agent says so in the call's arguments: Claude Code's ``run_in_background``, Gemini's and
  Cursor's ``is_background``, Copilot's ``mode: "async"`` or ``detach``; an adapter that
  rebuilds the arguments keeps these keys (:data:`FLAGS`), or sets the event's ``background``;
- or its command line does: an ``&`` that ends a command (not ``&&``, ``2>&1``, ``&>``, ``|&``,
  nor one inside quotes), ``nohup``, ``setsid``, ``disown``, PowerShell's ``Start-Process`` and
  ``Start-Job``.  A word is matched wherever it stands (``grep nohup`` counts too): a false
  "background" makes some of the user's changes ``unknown`` (kept by a revert of the agent,
  and listed), a missed one would make the agent's changes the user's.
"""

from __future__ import annotations

import shlex
from typing import Any

#: Keys of a tool call's arguments that background it when true (``mode`` when ``"async"``).
FLAGS = ("run_in_background", "is_background", "background", "detach", "async", "mode")
#: Words that start a command detached from the call (compared lower-case).
DETACHING = frozenset({"nohup", "setsid", "disown", "start-process", "start-job", "saps", "sajb"})
SHELLS = ("Bash", "PowerShell")


def flags(args: Any) -> dict[str, Any]:
    """The background keys of a call's arguments, for an adapter that rebuilds them."""
    if not isinstance(args, dict):
        return {}
    return {k: args[k] for k in FLAGS if k in args}


def reason(tool: str, tool_input: Any) -> str | None:
    """Why a call of ``tool`` with ``tool_input`` runs on in the background, or None."""
    if not isinstance(tool_input, dict):
        return None
    for key in FLAGS:
        value = tool_input.get(key)
        if key == "mode":
            if isinstance(value, str) and value.lower() == "async":
                return "mode=async"
        elif value is True:
            return key
    if tool not in SHELLS:
        return None
    command = tool_input.get("command")
    return command_reason(command, powershell=tool == "PowerShell") if isinstance(command, str) else None


def command_reason(command: str, *, powershell: bool = False) -> str | None:
    """Why a command line backgrounds (``"&"``, ``"nohup"``, ...), or None."""
    tokens = _tokens(command)
    for i, token in enumerate(tokens):
        word = token.lower()
        if word in DETACHING:
            return word
        if token.strip("();") == "&" and not (powershell and i < len(tokens) - 1 and token == "&"):
            # (PowerShell's "& cmd" is its call operator; only a trailing "&" backgrounds.)
            return "&"
    return None


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: split on blanks and keep every "&"-like word
        return command.replace("&&", " ").split()
