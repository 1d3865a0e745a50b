"""Checkpoint references: how a user names a checkpoint.

==============  ==============================================================
``latest``      the newest checkpoint (safety checkpoints of restores excluded)
``latest~N``    the N-th before it, counting the same way
``#N``          checkpoint number N: its place in the log, counted from the first (``#1``);
                it never changes, so a number read in ``list`` or in the browser keeps naming
                the same checkpoint after new ones arrive (numbers are this store's own)
a tag           set with ``snapshot --tag NAME``
a hex prefix    at least 4 hex digits of an id, unique in the store; or a full id
``:/TEXT``      the newest checkpoint whose message contains TEXT (git's syntax;
                case-sensitive, plain text, not a pattern; safety checkpoints excluded)
==============  ==============================================================

With ``task`` (or the suffix ``@TASK``, e.g. ``latest~2@fix-login``), ``latest``,
``latest~N`` and ``:/TEXT`` count only that task's checkpoints, and ``#N`` must be one of them.  The last ``@`` of a
reference always starts the task, so to search for text that holds an ``@`` name the task too
(``:/mail user@host@TASK``).

A tag or id that names a checkpoint whose record is damaged raises CorruptError (exit 6, "the
store is damaged"), not RefError: the checkpoint exists, it cannot be read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from itertools import islice

from snapstore.errors import CorruptError, RefError
from snapstore.records.checkpoint import Checkpoint

_LATEST = re.compile(r"^latest(?:~(\d+))?$")
_NUMBER = re.compile(r"^#(\d+)$")
_HEX = re.compile(r"^[0-9a-fA-F]{4,64}$")

MIN_PREFIX = 4


def _visible(newest: Iterable[Checkpoint], task: str | None) -> Iterator[Checkpoint]:
    for c in newest:
        if not c.is_safety and (task is None or c.task == task):
            yield c


class Resolver:
    """The reference grammar over a source of checkpoints; reads only what a reference reaches.

    ``newest()`` yields readable checkpoints newest first (safety ones included); ``tag(name)``
    gives the id a tag names (None: no such tag); ``by_id(id, what)`` gives a checkpoint or
    raises (CorruptError when damaged, RefError when gone); ``by_prefix(prefix)`` gives the
    checkpoints whose hex id starts with ``prefix`` (at most a few) and the damage found.
    ``of_task(task)``, when given, yields one task's checkpoints newest first (an index), or
    None when it cannot (the caller then filters ``newest()``).  ``by_number(n)``, when given,
    reads checkpoint number ``n`` directly (None: no such number); else ``newest()`` is read
    down to it.
    """

    def __init__(
        self,
        newest: Callable[[], Iterable[Checkpoint]],
        tag: Callable[[str], bytes | None],
        by_id: Callable[[bytes, str], Checkpoint],
        by_prefix: Callable[[str], tuple[list[Checkpoint], list[str]]],
        of_task: Callable[[str], Iterable[Checkpoint] | None] | None = None,
        by_number: Callable[[int], Checkpoint | None] | None = None,
    ):
        self.newest, self.tag, self.by_id, self.by_prefix = newest, tag, by_id, by_prefix
        self.of_task, self.by_number = of_task, by_number

    def visible(self, task: str | None = None) -> Iterator[Checkpoint]:
        if task is not None and self.of_task is not None:
            indexed = self.of_task(task)
            if indexed is not None:
                return _visible(indexed, task)  # still filtered: an index row is a hint
        return _visible(self.newest(), task)

    def resolve(self, ref: str, task: str | None = None) -> Checkpoint:
        """The checkpoint ``ref`` names (the table in this module's docstring)."""
        ref = ref.strip()
        if "@" in ref:
            ref, _, scoped = ref.rpartition("@")
            if not scoped:
                raise RefError(f"{ref}@: a task name must follow '@'")
            task = scoped
        if not ref:
            raise RefError("empty checkpoint reference")
        if ref.startswith(":/"):
            return self._search(ref, task)
        m = _LATEST.match(ref)
        if m:
            return self._row(ref, int(m.group(1) or 0), task)
        m = _NUMBER.match(ref)
        if m:
            return self._numbered(int(m.group(1)), task)
        tagged = self.tag(ref)
        if tagged is not None:
            return self.by_id(tagged, f"tag {ref!r}")
        if _HEX.match(ref):
            prefix = ref.lower()
            matches, damaged = self.by_prefix(prefix)
            if len(matches) == 1 and not damaged:
                return matches[0]
            if len(matches) + len(damaged) > 1:
                ids = ", ".join(c.short_id for c in matches[:5])
                raise RefError(
                    f"{ref} is ambiguous: it matches {len(matches) + len(damaged)} checkpoints ({ids})"
                )
            if damaged:
                raise CorruptError(damaged[0])
        elif re.match(r"^[0-9a-fA-F]{1,3}$", ref):
            raise RefError(f"{ref}: an id prefix needs at least {MIN_PREFIX} hex digits")
        raise RefError(f"unknown checkpoint {ref!r}")

    def _row(self, ref: str, n: int, task: str | None) -> Checkpoint:
        found = next(islice(self.visible(task), n, None), None)
        if found is not None:
            return found
        count = sum(1 for _ in self.visible(task))
        if count == 0:
            raise RefError("there are no checkpoints yet" + (f" in task {task!r}" if task else ""))
        raise RefError(f"{ref}: only {count} checkpoint(s) exist")

    def _numbered(self, n: int, task: str | None) -> Checkpoint:
        """``#N``: the checkpoint whose log number is N (a safety checkpoint too: it was named)."""
        if self.by_number is not None:
            found = self.by_number(n) if n > 0 else None
        else:
            found = next((c for c in self.newest() if c.seq <= n), None)
            found = found if found is not None and found.seq == n else None
        if found is None:
            raise RefError(f"#{n}: no checkpoint has that number (`snapstore list` shows them; latest~N counts back)")
        if task is not None and found.task != task:
            raise RefError(f"#{n} is not a checkpoint of task {task!r}")
        return found

    def _search(self, ref: str, task: str | None) -> Checkpoint:
        """``:/TEXT``: the newest visible checkpoint whose message contains TEXT."""
        text = ref[2:]
        if not text:
            raise RefError(f"{ref}: give the text to search for after ':/'")
        for c in self.visible(task):
            if text in c.message:
                return c
        where = f" in task {task!r}" if task else ""
        raise RefError(f"no checkpoint{where} has a message containing {text!r}")


def resolve(
    ref: str,
    checkpoints: list[Checkpoint],
    tags: dict[str, str],
    task: str | None = None,
    damage: Callable[[str], str | None] | None = None,
) -> Checkpoint:
    """Resolve ``ref`` among ``checkpoints`` (oldest first) and ``tags`` (name -> hex id).

    ``damage(id)`` says why a checkpoint that is not among ``checkpoints`` cannot be read (None:
    it does not exist).  The Store resolves from the store itself
    (:class:`snapstore.records.history.History`); this form serves lists already loaded.
    """
    by_hex = {c.id: c for c in checkpoints}

    def by_id(cid: bytes, what: str) -> Checkpoint:
        found = by_hex.get(cid.hex())
        if found is not None:
            return found
        why = damage(cid.hex()) if damage is not None else None
        if why is not None:
            raise CorruptError(f"{what} names a damaged checkpoint: {why}")
        raise RefError(f"{what} names a checkpoint that no longer exists")

    def by_prefix(prefix: str) -> tuple[list[Checkpoint], list[str]]:
        matches = [c for c in checkpoints if c.id.startswith(prefix)]
        why = damage(prefix) if not matches and len(prefix) == 64 and damage is not None else None
        return matches, [why] if why else []

    def tag(name: str) -> bytes | None:
        return bytes.fromhex(tags[name]) if name in tags else None

    return Resolver(lambda: reversed(checkpoints), tag, by_id, by_prefix).resolve(ref, task)


def numbered(
    newest: Iterable[Checkpoint],
    task: str | None = None,
    include_safety: bool = False,
    limit: int | None = None,
) -> list[tuple[int | None, Checkpoint]]:
    """What ``list`` shows, from checkpoints newest first: each with the ``#N`` that names it, its
    log number (safety checkpoints are listed only with ``include_safety``).

    The number is the one :class:`Resolver` reads for ``#N``, so what ``list`` prints is always a
    valid reference, and stays one.  With ``limit``, ``newest`` is read no further than the rows
    returned.
    """
    out: list[tuple[int | None, Checkpoint]] = []
    for c in newest:
        if task is not None and c.task != task:
            continue
        if c.is_safety and not include_safety:
            continue
        out.append((c.seq or None, c))
        if limit is not None and len(out) >= limit:
            break
    return out
