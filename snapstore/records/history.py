"""Reading history without reading all of it: references resolved from the few records needed.

A store with 10,000 checkpoints must resolve ``latest`` as fast as one with 10.  Instead of
loading every record, :class:`History` reads the ``log`` table newest first and stops as soon as
the answer is known (``latest~N``, ``#N``, ``:/TEXT``: as many records as the reference
reaches back), reads a task's references (``latest@TASK``) from the ``tasks`` index, looks a tag
up directly, and finds an id prefix by a range scan of the ``checkpoints`` table.  Damaged records are skipped like :func:`checkpoint.load_log` skips them.
"""

from __future__ import annotations

from collections.abc import Iterator

from snapstore.errors import CorruptError, RefError
from snapstore.records import refs, schema
from snapstore.records.checkpoint import (
    TASK_INDEX_META,
    Checkpoint,
    damage_of,
    key_seq,
    parse_record,
    seq_key,
    task_prefix,
)
from snapstore.storage.backend import ReadView as View


class History:
    """Lazy access to the checkpoints of one read view (newest first)."""

    def __init__(self, view: View):
        self._view = view

    def newest(self, before: int | None = None) -> Iterator[Checkpoint]:
        """Readable checkpoints, newest first (safety ones included), read one at a time;
        with ``before``, only those whose log number (``seq``) is lower (newer ones are
        skipped by key, unread)."""
        get = self._view.get
        stop = None if before is None else seq_key(before)
        for key, cid in self._view.items("log", reverse=True):
            if len(cid) != schema.ID_BYTES or (stop is not None and key >= stop):
                continue
            packed = get("checkpoints", cid)
            if packed is None:
                continue
            try:
                yield parse_record(cid, packed, key_seq(key))
            except CorruptError:
                continue

    def of_task(self, task: str, before: int | None = None) -> Iterator[Checkpoint] | None:
        """``task``'s readable checkpoints newest first, from the ``tasks`` index; None when
        the store's index is not complete yet (a store made before it, until its next
        snapshot); ``before`` as in :meth:`newest`."""
        if self._view.get("meta", TASK_INDEX_META) is None:
            return None
        return self._indexed(task, before)

    def _indexed(self, task: str, before: int | None = None) -> Iterator[Checkpoint]:
        get = self._view.get
        prefix = task_prefix(task)
        stop = None if before is None else prefix + seq_key(before)
        for key, cid in self._view.items("tasks", reverse=True, prefix=prefix):
            if len(cid) != schema.ID_BYTES or len(key) != len(prefix) + 8 or (stop is not None and key >= stop):
                continue
            packed = get("checkpoints", cid)
            if packed is None:
                continue
            try:
                yield parse_record(cid, packed, key_seq(key[len(prefix) :]))
            except CorruptError:
                continue

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
        return refs.Resolver(
            self.newest, self._tag, self._by_id, self._by_prefix, self.of_task, self._by_number
        ).resolve(ref, task)

    def _by_number(self, n: int) -> Checkpoint | None:
        cid = self._view.get("log", seq_key(n))
        if cid is None or len(cid) != schema.ID_BYTES:
            return None
        packed = self._view.get("checkpoints", cid)
        if packed is None:
            return None
        try:
            return parse_record(cid, packed, n)
        except CorruptError as exc:
            raise CorruptError(f"#{n} names a damaged checkpoint: {exc}") from exc

    def _tag(self, name: str) -> bytes | None:
        return self._view.get("tags", name.encode())

    def _by_id(self, cid: bytes, what: str) -> Checkpoint:
        why = damage_of(self._view, cid)
        if why is not None:
            raise CorruptError(f"{what} names a damaged checkpoint: {why}")
        packed = self._view.get("checkpoints", cid)
        if packed is None:
            raise RefError(f"{what} names a checkpoint that no longer exists")
        return parse_record(cid, packed)

    def _by_prefix(self, prefix: str) -> tuple[list[Checkpoint], list[str]]:
        # Keys are raw ids: scan the range that starts with the prefix's whole bytes.
        whole = bytes.fromhex(prefix[: len(prefix) // 2 * 2])
        matches: list[Checkpoint] = []
        damaged: list[str] = []
        for cid, packed in self._view.items("checkpoints", prefix=whole):
            if not cid.hex().startswith(prefix):
                continue
            try:
                matches.append(parse_record(cid, packed))
            except CorruptError as exc:
                damaged.append(str(exc))
            if len(matches) + len(damaged) > 5:
                break
        return matches, damaged
