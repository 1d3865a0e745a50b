"""Checkpoint references: how a user names a checkpoint.

==============  ==============================================================
``latest``      the newest checkpoint (safety checkpoints of restores excluded)
``latest~N``    the N-th before it, counting the same way
``#N``          the N-th row that ``snapstore list`` prints (``#1`` is ``latest``)
a tag           set with ``snapshot --tag NAME``
a hex prefix    at least 4 hex digits of an id, unique in the store; or a full id
``:/TEXT``      the newest checkpoint whose message contains TEXT (git's syntax;
                case-sensitive, plain text, not a pattern; safety checkpoints excluded)
==============  ==============================================================

With ``task`` (or the suffix ``@TASK``, e.g. ``latest~2@fix-login``), ``latest``,
``latest~N``, ``#N`` and ``:/TEXT`` count only that task's checkpoints.  The last ``@`` of a
reference always starts the task, so to search for text that holds an ``@`` name the task too
(``:/mail user@host@TASK``).

A tag or id that names a checkpoint whose record is damaged raises CorruptError (exit 6, "the
store is damaged"), not RefError: the checkpoint exists, it cannot be read.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from snapstore.errors import CorruptError, RefError
from snapstore.records.checkpoint import Checkpoint

_LATEST = re.compile(r"^latest(?:~(\d+))?$")
_ROW = re.compile(r"^#(\d+)$")
_HEX = re.compile(r"^[0-9a-fA-F]{4,64}$")

MIN_PREFIX = 4


def visible(checkpoints: list[Checkpoint], task: str | None = None) -> list[Checkpoint]:
    """What ``list`` shows: newest first, no safety checkpoints, optionally one task."""
    rows = [c for c in reversed(checkpoints) if not c.is_safety]
    if task is not None:
        rows = [c for c in rows if c.task == task]
    return rows


def resolve(
    ref: str,
    checkpoints: list[Checkpoint],
    tags: dict[str, str],
    task: str | None = None,
    damage: Callable[[str], str | None] | None = None,
) -> Checkpoint:
    """Resolve ``ref`` among ``checkpoints`` (oldest first) and ``tags`` (name -> id).

    ``damage(id)`` says why a checkpoint that is not among ``checkpoints`` cannot be read
    (None: it does not exist); it is asked only when a tag or a full id names such a one.
    """
    ref = ref.strip()
    if "@" in ref:
        ref, _, scoped = ref.rpartition("@")
        if not scoped:
            raise RefError(f"{ref}@: a task name must follow '@'")
        task = scoped
    if not ref:
        raise RefError("empty checkpoint reference")
    by_id = {c.id: c for c in checkpoints}
    if ref.startswith(":/"):
        return _search(ref, visible(checkpoints, task), task)
    m = _LATEST.match(ref)
    if m:
        n = int(m.group(1) or 0)
        rows = visible(checkpoints, task)
        if not rows:
            raise RefError("there are no checkpoints yet" + (f" in task {task!r}" if task else ""))
        if n >= len(rows):
            raise RefError(f"{ref}: only {len(rows)} checkpoint(s) exist")
        return rows[n]
    m = _ROW.match(ref)
    if m:
        n = int(m.group(1))
        rows = visible(checkpoints, task)
        if n < 1 or n > len(rows):
            raise RefError(f"{ref}: there is no row {n} (list shows {len(rows)})")
        return rows[n - 1]
    if ref in tags:
        cid = tags[ref]
        if cid not in by_id:
            why = damage(cid) if damage is not None else None
            if why is not None:
                raise CorruptError(f"tag {ref!r} names a damaged checkpoint: {why}")
            raise RefError(f"tag {ref!r} names a checkpoint that no longer exists")
        return by_id[cid]
    if _HEX.match(ref):
        prefix = ref.lower()
        matches = [c for c in checkpoints if c.id.startswith(prefix)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            ids = ", ".join(c.short_id for c in matches[:5])
            raise RefError(f"{ref} is ambiguous: it matches {len(matches)} checkpoints ({ids})")
        if len(prefix) == 64 and damage is not None:
            why = damage(prefix)
            if why is not None:
                raise CorruptError(why)
    elif re.match(r"^[0-9a-fA-F]{1,3}$", ref):
        raise RefError(f"{ref}: an id prefix needs at least {MIN_PREFIX} hex digits")
    raise RefError(f"unknown checkpoint {ref!r}")


def numbered(
    checkpoints: list[Checkpoint], task: str | None = None, include_safety: bool = False
) -> list[tuple[int | None, Checkpoint]]:
    """Newest first, each with the ``#N`` that names it (None for safety checkpoints).

    ``#N`` counts exactly the rows :func:`visible` returns, so what ``list`` prints is always a
    valid reference.
    """
    out: list[tuple[int | None, Checkpoint]] = []
    n = 0
    for c in reversed(checkpoints):
        if task is not None and c.task != task:
            continue
        if c.is_safety:
            if include_safety:
                out.append((None, c))
            continue
        n += 1
        out.append((n, c))
    return out


def _search(ref: str, rows: list[Checkpoint], task: str | None) -> Checkpoint:
    """``:/TEXT``: the first of ``rows`` (newest first) whose message contains TEXT."""
    text = ref[2:]
    if not text:
        raise RefError(f"{ref}: give the text to search for after ':/'")
    for c in rows:
        if text in c.message:
            return c
    where = f" in task {task!r}" if task else ""
    raise RefError(f"no checkpoint{where} has a message containing {text!r}")
