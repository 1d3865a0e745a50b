"""The path index: which checkpoints changed a path, so ``log PATH`` costs what it returns.

Table ``paths``: for every checkpoint and every path whose entry differs from the checkpoint
just before it in the log, a row ``BLAKE3(path)[:16] + seq -> checkpoint id``.  The oldest
checkpoint has no rows (there a path is "added" if its manifest holds it).  ``log PATH`` reads the
path's rows (a prefix scan), the log's keys, the records around each row and one manifest
difference per version, instead of comparing every pair of consecutive checkpoints.

The index is complete when the meta key ``paths-index`` is set.  It is written with each
checkpoint (snapshot, revert record) in the checkpoint's transaction; a store made before it, or
one whose index a crash left half-repaired, lacks the key: ``log`` then reads history the old
way and the next snapshot rebuilds the index (once, O(history)).  Removing checkpoints (prune,
delete) deletes their rows and re-computes the rows of each survivor whose predecessor changed;
the key is cleared first and set again in the transaction that finishes the repair.
"""

from __future__ import annotations

from collections.abc import Callable

from snapstore.errors import CorruptError
from snapstore.ops import diff, textdiff
from snapstore.ops.history import Getter, Version, entry_at
from snapstore.records import manifest
from snapstore.records.checkpoint import (
    PATHS_INDEX_META,
    Checkpoint,
    key_seq,
    parse_record,
    path_prefix,
    put_path_rows,
)
from snapstore.storage.backend import Backend, ReadView, WriteBatch


def complete(view: ReadView) -> bool:
    """Whether the index can be trusted (else ``log`` reads history the old way)."""
    return view.get("meta", PATHS_INDEX_META) is not None


def changed(get: Getter, before: bytes | None, after: bytes) -> list[bytes]:
    """The paths whose entries differ from manifest ``before`` to ``after`` (none for the
    oldest checkpoint, ``before`` None): exactly the paths ``diff`` would list."""
    if before is None or before == after:
        return []
    old, new = diff.manifest_difference(get, before, after)
    return [c.path for c in diff.compare(old, new)]


def _log(view: ReadView) -> list[tuple[int, bytes]]:
    return [(key_seq(k), cid) for k, cid in view.items("log")]


def manifest_of(view: ReadView, cid: bytes) -> bytes | None:
    """The manifest id of checkpoint ``cid`` (None when its record is missing or damaged)."""
    packed = view.get("checkpoints", cid)
    if packed is None:
        return None
    try:
        return parse_record(cid, packed).manifest
    except CorruptError:
        return None


def rebuild(view: ReadView, batch: WriteBatch) -> None:
    """Write every row of every logged checkpoint (the index of an older store; once)."""
    for key, _ in view.items("paths"):
        batch.delete("paths", key)
    before: bytes | None = None
    for seq, cid in _log(view):
        mid = manifest_of(view, cid)
        if mid is None:
            continue  # a damaged record: verify reports it; its successor compares past it
        try:
            put_path_rows(batch, seq, cid, changed(view.get, before, mid))
        except CorruptError:
            pass  # a damaged manifest: no rows (log PATH over it reads the old way's answer)
        before = mid
    batch.put("meta", PATHS_INDEX_META, b"1")


def after_removal(view: ReadView, removed: set[bytes]) -> set[bytes]:
    """The checkpoints whose log predecessor is among ``removed`` (their rows must be
    re-computed once those are gone); read before anything is deleted."""
    affected: set[bytes] = set()
    previous_removed = False
    for _, cid in _log(view):
        if cid in removed:
            previous_removed = True
        elif previous_removed:
            affected.add(cid)
            previous_removed = False
    return affected


def repair(view: ReadView, batch: WriteBatch, affected: set[bytes]) -> None:
    """Re-compute the rows of the ``affected`` checkpoints against their log predecessors now
    (after a removal), drop rows naming checkpoints no longer logged, and mark the index
    complete again."""
    logged: set[bytes] = set()
    before: bytes | None = None
    fresh: list[tuple[int, bytes, list[bytes]]] = []
    for seq, cid in _log(view):
        logged.add(cid)
        mid = manifest_of(view, cid)
        if mid is None:
            continue
        if cid in affected:
            try:
                fresh.append((seq, cid, changed(view.get, before, mid)))
            except CorruptError:
                pass
        before = mid
    for key, cid in view.items("paths"):
        if cid in affected or cid not in logged:
            batch.delete("paths", key)
    for seq, cid, paths in fresh:
        put_path_rows(batch, seq, cid, paths)
    batch.put("meta", PATHS_INDEX_META, b"1")


def versions(
    view: ReadView,
    rel: bytes,
    member: Callable[[Checkpoint], bool],
    limit: int | None,
    tags_of: Callable[[set[str]], dict[str, tuple[str, ...]]],
) -> list[Version] | None:
    """The versions of ``rel`` over the checkpoints ``member`` accepts, oldest first (the
    newest ``limit`` with a limit); None when the index is not complete."""
    if not complete(view):
        return None
    log = _log(view)
    position = {seq: i for i, (seq, _) in enumerate(log)}
    records: dict[int, Checkpoint | None] = {}

    def at(i: int) -> Checkpoint | None:
        """The member checkpoint at log position ``i`` (None: not a member, or unreadable)."""
        if i not in records:
            cid = log[i][1]
            packed = view.get("checkpoints", cid)
            cp = None
            if packed is not None:
                try:
                    cp = parse_record(cid, packed)
                except CorruptError:
                    cp = None
            records[i] = cp if cp is not None and member(cp) else None
        return records[i]

    def member_from(i: int, step: int) -> int | None:
        while 0 <= i < len(log):
            if at(i) is not None:
                return i
            i += step
        return None

    def load(e: manifest.Entry) -> bytes:
        from snapstore.storage import objects

        return objects.read_stream(view.get, e.ref)

    out: list[Version] = []
    done: set[int] = set()
    rows = [key_seq(k[16:]) for k, _ in view.items("paths", reverse=True, prefix=path_prefix(rel))]
    oldest = member_from(0, 1)
    for seq in rows:  # newest first
        if limit is not None and len(out) >= limit:
            break
        i = position.get(seq)
        if i is None:
            continue
        y = member_from(i, 1)
        if y is None or y in done:
            continue
        x = member_from(y - 1, -1)
        if x is None:
            continue  # y is the oldest: its version (if any) is the presence check below
        done.add(y)
        cx, cy = at(x), at(y)
        assert cx is not None and cy is not None
        out.extend(reversed(_pair(view.get, rel, cx, cy, load)))
    if oldest is not None and (limit is None or len(out) < limit):
        first = at(oldest)
        assert first is not None
        entry = entry_at(view.get, first.manifest, rel)
        if entry is not None:
            out.extend(_versions_of(first, {}, {rel: entry}, load))
    out.reverse()
    if limit is not None:
        out = out[-limit:] if limit > 0 else []
    tags = tags_of({v.checkpoint.id for v in out})
    for v in out:
        v.checkpoint = v.checkpoint._replace(tags=tags.get(v.checkpoint.id, ()))
    return out


def _pair(get: Getter, rel: bytes, x: Checkpoint, y: Checkpoint, load: Callable[[manifest.Entry], bytes]) -> list[Version]:
    if x.manifest == y.manifest:
        return []
    # A chunk both share holds the same entry on both sides, so the path is on neither side
    # when it did not change, on both when it changed, and on one when it came or went.
    old, new = diff.manifest_difference(get, x.manifest, y.manifest)
    if rel not in old and rel not in new:
        return []
    before = {rel: old[rel]} if rel in old else {}
    after = {rel: new[rel]} if rel in new else {}
    return _versions_of(y, before, after, load)


def _versions_of(
    cp: Checkpoint, before: dict[bytes, manifest.Entry], after: dict[bytes, manifest.Entry],
    load: Callable[[manifest.Entry], bytes],
) -> list[Version]:
    out = []
    for change in diff.with_loaders(diff.compare(before, after), load, load):
        entry = after.get(change.path)
        out.append(Version(cp, change.status, entry, *textdiff.count(change)))
    return out


def path_versions(
    backend: Backend, rel: bytes, task: str | None, limit: int | None, oldest_first: Callable[[], list[Checkpoint]],
) -> list[Version]:
    """The versions of ``rel`` (of ``task``'s checkpoints when given), oldest first: through the
    ``paths`` index when it is complete, else by reading the records (``oldest_first()``, every
    checkpoint; or, with ``limit``, newest first until ``limit`` versions are found)."""
    from snapstore.ops.history import file_history, newest_versions
    from snapstore.records.history import History

    with backend.read() as view:
        indexed = versions(
            view, rel, lambda c: not c.is_safety and (task is None or c.task == task),
            None if limit is None else max(limit, 0), History(view).tags_of,
        )
    if indexed is not None:
        return indexed
    if limit is None:
        return file_history(_Held(backend), rel, oldest_first())
    with backend.read() as view:
        history = History(view)
        source = history.of_task(task) if task is not None else None
        rows_newest = (
            c for c in (source if source is not None else history.newest())
            if not c.is_safety and (task is None or c.task == task)
        )
        return newest_versions(view.get, rel, rows_newest, max(limit, 0))


class _Held:
    """A backend as :func:`file_history` takes it."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
