"""Conversations beside the code: the prompt each checkpoint belongs to, and a checkpoint's
conversation with what is new in it first.

A checkpoint stores the conversation as it was then; the messages its parent did not have yet
are this step's (the prompt, the agent's answer and tool calls).  Tool calls and their results
are cards (the tool's name, each argument on its line; the call a result answers), not JSON.
The page shows those, newest
first, and folds the earlier ones; at most :data:`MAX_SHOWN` messages are rendered (the JSON
download has them all).  The timeline's prompts are read after its first paint
(``/timeline.prompts``), within :data:`PROMPT_SECONDS`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from snapstore.errors import RefError
from snapstore.ui.html import Html, fmt, join

if TYPE_CHECKING:
    from snapstore.records.checkpoint import Checkpoint
    from snapstore.store import Store

#: A message longer than this (characters or lines) is collapsed.
LONG_MESSAGE = 600
LONG_LINES = 12
#: Messages rendered on a checkpoint page (the newest ones).
MAX_SHOWN = 300
#: Characters of a prompt shown in a timeline row.
PROMPT_CHARS = 160
#: Time the timeline's prompts may take (the rows left get none).
PROMPT_SECONDS = 2.0


def message_text(m: Any) -> str:
    """The readable text of a message: plain text, text blocks, tool calls as JSON."""
    content = m.get("content") if isinstance(m, dict) else m
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, dict) and block.get("type") == "tool_use":
                parts.append(f"[tool call {block.get('name', '?')}] {json.dumps(block.get('input'), ensure_ascii=False)}")
            else:
                parts.append(json.dumps(block, ensure_ascii=False))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False, indent=1)


def is_prompt(m: Any) -> bool:
    """Whether ``m`` is something a person typed: a user message with text (not a tool result)."""
    if not isinstance(m, dict) or m.get("role") != "user":
        return False
    content = m.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"].strip() for b in content
    )


def last_prompt(messages: list[Any]) -> str:
    """The last prompt of a conversation, on one line (empty when there is none)."""
    for m in reversed(messages):
        if is_prompt(m):
            content = m["content"]
            text = content if isinstance(content, str) else " ".join(
                b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
            )
            return " ".join(text.split())
    return ""


def prompts(store: Store, checkpoints: list[Checkpoint]) -> dict[str, str]:
    """``{checkpoint id: its prompt}`` for those that store a conversation, read for at most
    :data:`PROMPT_SECONDS` (a conversation shared by several rows is read once)."""
    deadline = time.monotonic() + PROMPT_SECONDS
    by_stream: dict[bytes, str] = {}
    out: dict[str, str] = {}
    for c in checkpoints:
        if c.conversation is None:
            continue
        if c.conversation not in by_stream:
            if time.monotonic() > deadline:
                break
            by_stream[c.conversation] = last_prompt(store.conversation(c.id) or [])
        prompt = by_stream[c.conversation]
        if prompt:
            out[c.id] = prompt if len(prompt) <= PROMPT_CHARS else prompt[: PROMPT_CHARS - 1] + "…"
    return out


def said_in(store: Store, text: str) -> Callable[[Checkpoint], bool]:
    """Whether ``text`` (any case) is in a message new in a checkpoint: one its parent's
    conversation does not have.  The last few conversations read are kept, so walking the log
    reads each one once (a checkpoint's parent is usually the next row)."""
    needle = text.casefold()
    recent: dict[str, list[Any]] = {}

    def messages(cid: str) -> list[Any]:
        if cid not in recent:
            if len(recent) >= 4:
                recent.pop(next(iter(recent)))
            try:
                recent[cid] = store.conversation(cid) or []
            except RefError:
                recent[cid] = []  # a parent gone: every message counts as new
        return recent[cid]

    def hit(c: Checkpoint) -> bool:
        if c.conversation is None:
            return False
        mine = messages(c.id)
        earlier = len(messages(c.parent)) if c.parent else 0
        return any(needle in message_text(m).casefold() for m in mine[earlier:])

    return hit


def _text(text: str) -> Html:
    if len(text) > LONG_MESSAGE or text.count("\n") >= LONG_LINES:
        first = " ".join(text[:200].split())
        return fmt("<details><summary>{}… <small>({} characters)</small></summary><pre>{}</pre></details>", first, len(text), text)
    return fmt("<pre>{}</pre>", text)


def _value(v: Any) -> Html:
    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    if "\n" in text or len(text) > 120:
        return _text(text)
    return fmt("<code>{}</code>", text)


def _tool_use(b: dict[str, Any]) -> Html:
    """A tool call as a card: its name and each argument on its own line (not raw JSON)."""
    args = b.get("input")
    rows = join(fmt("<dt>{}</dt><dd>{}</dd>", k, _value(v)) for k, v in args.items()) if isinstance(args, dict) else _value(args)
    return fmt('<div class="tool-card tool-use"><span class="tool-name">{}</span> <small>call</small><dl>{}</dl></div>', str(b.get("name", "?")), rows)


def _tool_result(b: dict[str, Any], names: dict[str, str]) -> Html:
    """A tool's result as a card: which call it answers, and its text."""
    content = b.get("content")
    if isinstance(content, list):
        content = "\n".join(x["text"] for x in content if isinstance(x, dict) and isinstance(x.get("text"), str))
    name = names.get(str(b.get("tool_use_id", "")), "a tool")
    failed = Html(' <strong class="warn">failed</strong>') if b.get("is_error") else Html("")
    body = _text(content) if isinstance(content, str) and content else Html('<p class="empty">(no output)</p>')
    return fmt('<div class="tool-card tool-result"><span class="tool-name">{}</span> <small>result</small>{}{}</div>', name, failed, body)


def _blocks(m: Any, names: dict[str, str]) -> tuple[str, Html]:
    """A message's label (a tool result's is "tool", not "user") and its content."""
    role = str(m.get("role", "?")) if isinstance(m, dict) else "?"
    content = m.get("content") if isinstance(m, dict) else m
    if not isinstance(content, list):
        return role, _text(message_text(m))
    parts = []
    for b in content:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            parts.append(_text(b["text"]))
        elif kind == "tool_use":
            parts.append(_tool_use(b))
        elif kind == "tool_result":
            parts.append(_tool_result(b, names))
        else:
            parts.append(_text(json.dumps(b, ensure_ascii=False)))
    only_results = bool(content) and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    return ("tool" if only_results else role), join(parts)


def tool_names(messages: list[Any]) -> dict[str, str]:
    """``{tool_use_id: tool name}`` of every tool call in ``messages``."""
    out: dict[str, str] = {}
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        for b in content if isinstance(content, list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_use":
                out[str(b.get("id", ""))] = str(b.get("name", "?"))
    return out


def _item(i: int, m: Any, names: dict[str, str]) -> Html:
    role, content = _blocks(m, names)
    prompt = Html(' <span class="prompt-mark">prompt</span>') if is_prompt(m) else Html("")
    return fmt('<li class="msg role-{}"><span class="role">{}</span> <small>#{}</small>{}{}</li>', role, role, i + 1, prompt, content)


def section(messages: list[Any], before: int) -> Html:
    """A checkpoint's conversation: the ``len(messages) - before`` messages new in it (newest
    first), then the earlier ones folded; at most :data:`MAX_SHOWN` rendered."""
    before = max(0, min(before, len(messages)))
    new = list(range(len(messages) - 1, before - 1, -1))
    old = list(range(before - 1, -1, -1))
    shown_new = new[:MAX_SHOWN]
    shown_old = old[: max(0, MAX_SHOWN - len(shown_new))]
    hidden = len(messages) - len(shown_new) - len(shown_old)
    names = tool_names(messages)
    parts = []
    if new:
        parts.append(fmt(
            '<h3>New in this checkpoint <small>{} message{}, newest first</small></h3><ol class="conversation" reversed>{}</ol>',
            len(new), "" if len(new) == 1 else "s", join(_item(i, messages[i], names) for i in shown_new),
        ))
    else:
        parts.append(Html('<p class="empty">No message is new in this checkpoint.</p>'))
    if old:
        parts.append(fmt(
            '<details class="earlier"><summary>{} earlier message{} (the conversation before this step)</summary><ol class="conversation">{}</ol></details>',
            len(old), "" if len(old) == 1 else "s", join(_item(i, messages[i], names) for i in shown_old),
        ))
    if hidden > 0:
        parts.append(fmt('<p class="note">{} older messages are not shown here: the download has them all.</p>', hidden))
    return join(parts)


__all__ = ["is_prompt", "last_prompt", "message_text", "prompts", "said_in", "section", "tool_names"]
