"""Reading history without reading all of it: references resolved from the few records needed.

A store with 10,000 checkpoints must resolve ``latest`` as fast as one with 10.  Instead of
loading every record, :class:`History` reads the ``log`` table newest first and stops as soon as
the answer is known (``latest~N``, ``#N``, ``:/TEXT``: as many records as the reference
reaches back), looks a tag up directly, and finds an id prefix by a range scan of the
``checkpoints`` table.  Damaged records are skipped like :func:`checkpoint.load_log` skips them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import islice

from snapstore.errors import CorruptError, RefError
from snapstore.records import refs, schema
from snapstore.records.checkpoint import Checkpoint, damage_of, key_seq, parse_record
from snapstore.storage.backend import ReadView as View

_LATEST = re.compile(r"^latest(?:~(\d+))?$")
_ROW = re.compile(r"^#(\d+)$")
_HEX = re.compile(r"^[0-9a-fA-F]{4,64}$")


class History:
    """Lazy access to the checkpoints of one read view (newest first)."""

    def __init__(self, view: View):
        self._view = view

    def newest(self) -> Iterator[Checkpoint]:
        """Readable checkpoints, newest first (safety ones included), read one at a time."""
        get = self._view.get
        for key, cid in self._view.items("log", reverse=True):
            if len(cid) != schema.ID_BYTES:
                continue
            packed = get("checkpoints", cid)
            if packed is None:
                continue
            try:
                yield parse_record(cid, packed, key_seq(key))
            except CorruptError:
                continue

    def visible(self, task: str | None = None) -> Iterator[Checkpoint]:
        """What ``list`` shows, newest first: no safety checkpoints, optionally one task."""
        for c in self.newest():
            if not c.is_safety and (task is None or c.task == task):
                yield c

    def tags_of(self, cids: set[str]) -> dict[str, tuple[str, ...]]:
        """The tag names of each of ``cids`` (a scan of the small ``tags`` table)."""
        out: dict[str, list[str]] = {}
        for name, value in self._view.items("tags"):
            cid = value.hex()
            if cid in cids:
                out.setdefault(cid, []).append(name.decode("utf-8", "replace"))
        return {cid: tuple(sorted(names)) for cid, names in out.items()}

    def resolve(self, ref: str, task: str | None = None) -> Checkpoint:
        """The checkpoint ``ref`` names (the grammar of :mod:`snapstore.records.refs`)."""
        ref = ref.strip()
        if "@" in ref:
            ref, _, scoped = ref.rpartition("@")
            if not scoped:
                raise RefError(f"{ref}@: a task name must follow '@'")
            task = scoped
        if not ref:
            raise RefError("empty checkpoint reference")
        if ref.startswith(":/"):
            text = ref[2:]
            if not text:
                raise RefError(f"{ref}: give the text to search for after ':/'")
            for c in self.visible(task):
                if text in c.message:
                    return c
            where = f" in task {task!r}" if task else ""
            raise RefError(f"no checkpoint{where} has a message containing {text!r}")
        m = _LATEST.match(ref) or _ROW.match(ref)
        if m:
            n = int(m.group(1) or 0)
            row = n if ref.startswith("latest") else n - 1
            if row >= 0:
                found = next(islice(self.visible(task), row, None), None)
                if found is not None:
                    return found
            count = sum(1 for _ in self.visible(task))
            if ref.startswith("latest"):
                if count == 0:
                    raise RefError("there are no checkpoints yet" + (f" in task {task!r}" if task else ""))
                raise RefError(f"{ref}: only {count} checkpoint(s) exist")
            raise RefError(f"{ref}: there is no row {n} (list shows {count})")
        tagged = self._view.get("tags", ref.encode())
        if tagged is not None:
            return self._by_id(tagged, f"tag {ref!r}")
        if _HEX.match(ref):
            return self._by_prefix(ref.lower())
        if re.match(r"^[0-9a-fA-F]{1,3}$", ref):
            raise RefError(f"{ref}: an id prefix needs at least {refs.MIN_PREFIX} hex digits")
        raise RefError(f"unknown checkpoint {ref!r}")

    def _by_id(self, cid: bytes, what: str) -> Checkpoint:
        why = damage_of(self._view, cid)
        if why is not None:
            raise CorruptError(f"{what} names a damaged checkpoint: {why}")
        packed = self._view.get("checkpoints", cid)
        if packed is None:
            raise RefError(f"{what} names a checkpoint that no longer exists")
        return parse_record(cid, packed)

    def _by_prefix(self, prefix: str) -> Checkpoint:
        # Keys are raw ids: scan the range that starts with the prefix's whole bytes.
        whole = bytes.fromhex(prefix[: len(prefix) // 2 * 2])
        matches: list[Checkpoint] = []
        damaged: list[str] = []
        for cid, packed in self._view.items("checkpoints", prefix=whole):
            if not cid.hex().startswith(prefix):
                continue
            try:
                c = parse_record(cid, packed)
            except CorruptError as exc:
                damaged.append(str(exc))
                continue
            matches.append(c)
            if len(matches) > 5:
                break
        if len(matches) == 1 and not damaged:
            return matches[0]
        if len(matches) + len(damaged) > 1:
            ids = ", ".join(c.short_id for c in matches[:5])
            raise RefError(f"{prefix} is ambiguous: it matches {len(matches) + len(damaged)} checkpoints ({ids})")
        if damaged:
            raise CorruptError(damaged[0])
        raise RefError(f"unknown checkpoint {prefix!r}")
