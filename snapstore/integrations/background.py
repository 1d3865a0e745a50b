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

import re
import shlex
from typing import Any

#: Keys of a tool call's arguments that background it when true (``mode`` when ``"async"``).
FLAGS = ("run_in_background", "is_background", "background", "detach", "async", "mode")
#: Words that start a command detached from the call (compared lower-case).
DETACHING = frozenset({"nohup", "setsid", "disown", "start-process", "start-job", "saps", "sajb"})
SHELLS = ("Bash", "PowerShell")
#: A command line longer than this (here-document bodies left out) is scanned, not tokenized.
MAX_PARSED = 64 << 10
#: A here-document's start: ``<<WORD``, ``<<-WORD``, ``<< 'WORD'``, ``<<"WORD"`` (not ``<<<``).
_HEREDOC = re.compile(r"(?<!<)<<(-?)[ \t]*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?")


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
    """Why a command line backgrounds (``"&"``, ``"nohup"``, ...), or None.  The bodies of
    here-documents are data, not commands (``cat > f.rs <<EOF`` with ``&x`` in it runs nothing
    in the background)."""
    command = strip_heredocs(command)
    if len(command) > MAX_PARSED:  # not worth a tokenizer's time: any "&" or word counts
        low = command.lower()
        if any(w in low for w in DETACHING):
            return next(w for w in sorted(DETACHING) if w in low)
        return "&" if "&" in command.replace("&&", "") else None
    tokens = _tokens(command)
    for i, token in enumerate(tokens):
        word = token.lower()
        if word in DETACHING:
            return word
        if token.strip("();") == "&" and not (powershell and i < len(tokens) - 1 and token == "&"):
            # (PowerShell's "& cmd" is its call operator; only a trailing "&" backgrounds.)
            return "&"
    return None


def strip_heredocs(command: str) -> str:
    """``command`` without the bodies of its here-documents (``<<WORD`` ... a line ``WORD``;
    ``<<-`` allows leading tabs; the word may be quoted)."""
    if "<<" not in command:
        return command
    out: list[str] = []
    pending: list[tuple[str, bool]] = []  # delimiters still open, and whether tabs are stripped
    for line in command.split("\n"):
        if pending:
            word, tabs = pending[0]
            if (line.lstrip("\t") if tabs else line) == word:
                pending.pop(0)
            continue
        out.append(line)
        pending.extend((m.group(2), m.group(1) == "-") for m in _HEREDOC.finditer(line))
    return "\n".join(out)


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: split on blanks and keep every "&"-like word
        return command.replace("&&", " ").split()
