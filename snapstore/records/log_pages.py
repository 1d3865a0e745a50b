"""The log as a UI and ``list`` read it: a page at a time, a row's neighbours, ``#N`` numbers.

Each reads only the records it returns (plus those a filter rejects within its ``scan``), so a
store with 10,000 checkpoints pages as fast as one with 10; the tags of the rows returned are
looked up in one pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from snapstore.errors import CorruptError
from snapstore.records import refs, schema
from snapstore.records.checkpoint import Checkpoint, key_seq, parse_record
from snapstore.records.history import History
from snapstore.storage.backend import ReadView


def numbered(
    view: ReadView, task: str | None, include_safety: bool, limit: int | None
) -> list[tuple[int | None, Checkpoint]]:
    """Newest first, each with its ``#N`` (None for safety checkpoints, listed only with
    ``include_safety``); with ``limit`` only the records of the rows shown are read."""
    history = History(view)
    out = refs.numbered(history.newest(), task, include_safety, limit)
    tags = history.tags_of({c.id for _, c in out})
    return [(i, c._replace(tags=tags.get(c.id, ()))) for i, c in out]


def page(
    view: ReadView,
    *,
    before: int | None,
    limit: int,
    task: str | None,
    include_safety: bool,
    keep: Callable[[Checkpoint], bool] | None,
    scan: int | None,
) -> tuple[list[Checkpoint], int | None]:
    """Up to ``limit`` checkpoints, newest first, whose log number (``seq``) is below
    ``before``, of ``task`` when given, that ``keep`` accepts; and the ``before`` of the next
    page (None: nothing older).  At most ``scan`` records are read."""
    history = History(view)
    source = history.of_task(task, before) if task is not None else None
    if source is None:
        source = history.newest(before)
    rows: list[Checkpoint] = []
    after: int | None = None
    for read, c in enumerate(source, 1):
        after = c.seq
        if (task is None or c.task == task) and (include_safety or not c.is_safety) and (keep is None or keep(c)):
            rows.append(c)
        if len(rows) >= limit or (scan is not None and read >= scan):
            break
    else:
        after = None  # the oldest record was read
    tags = history.tags_of({c.id for c in rows})
    return [c._replace(tags=tags.get(c.id, ())) for c in rows], after


def neighbours(
    view: ReadView, cp: Checkpoint, include_safety: bool
) -> tuple[Checkpoint, Checkpoint | None, Checkpoint | None]:
    """``cp`` with its log number set, and the checkpoints just newer and just older than it
    (safety ones skipped unless ``include_safety``; damaged records skipped).  The log's keys
    are scanned down to it; only the records returned are read."""
    want = bytes.fromhex(cp.id)

    def readable(pairs: Iterator[tuple[bytes, bytes]]) -> Iterator[Checkpoint]:
        for key, cid in pairs:
            packed = view.get("checkpoints", cid) if len(cid) == schema.ID_BYTES else None
            if packed is not None:
                try:
                    c = parse_record(cid, packed, key_seq(key))
                except CorruptError:
                    continue
                if include_safety or not c.is_safety:
                    yield c

    log = iter(view.items("log", reverse=True))
    seen: list[tuple[bytes, bytes]] = []
    for key, cid in log:
        if cid == want:
            cp = cp._replace(seq=key_seq(key))
            break
        seen.append((key, cid))
    else:
        return cp, None, None  # not in the log (damaged): no neighbours
    newer = next(readable(reversed(seen)), None)
    older = next(readable(log), None)
    tags = History(view).tags_of({c.id for c in (newer, older) if c is not None})
    return (
        cp,
        newer._replace(tags=tags.get(newer.id, ())) if newer else None,
        older._replace(tags=tags.get(older.id, ())) if older else None,
    )
