"""gc's pack phase (format 2): rewrite packs that are mostly garbage, free the ones that are all.

A pack is immutable, so removing a dead chunk's entry frees nothing by itself.  After the mark,
each pack's live fraction is its live chunks' plain bytes over all its chunks' plain bytes; a
pack below the threshold (config ``gc.repack-below``, default 0.5) has its live chunks written
into new packs and is deleted.  A live delta whose base is dead is stored whole first, so no
later step can remove a base that a live chunk still needs.

**Crash safety.**  Every step is one LMDB transaction that writes the new packs, points the
moved chunks' entries at them, deletes the dead entries of the old packs and then the old packs
themselves.  A crash between transactions leaves every entry pointing at a pack that exists
(the old one or the new one) and at worst some garbage for the next gc.  The caller holds the
writer lock, so no snapshot adds entries to a pack being rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from snapstore.errors import CorruptError
from snapstore.storage import entries, objects, packs
from snapstore.storage.backend import Backend
from snapstore.storage.entries import CODEC_DELTA, PackEntry

#: Plain bytes of live chunks moved per transaction (bounds the memory of one step).
STEP_BYTES = 16 << 20


@dataclass
class RepackReport:
    """What the pack phase rewrote (or would, with a dry run)."""

    packs: int = 0  # packs before
    packs_rewritten: int = 0
    packs_removed: int = 0  # wholly dead: deleted without rewriting anything
    chunks_moved: int = 0
    deltas_made_whole: int = 0
    stored_before: int = 0  # bytes of all packs before
    stored_after: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run(
    backend: Backend,
    live: set[bytes],
    *,
    threshold: float,
    level: int,
    dry_run: bool = False,
    every: bool = False,
) -> RepackReport:
    """Rewrite or free the packs that ``live`` (the marked chunk ids) leaves mostly dead.

    ``every``: rewrite every pack (``gc --repack``: recompress at ``level``).
    """
    report = RepackReport()
    sizes = {pid: n for pid, n, _ in backend.value_sizes("packs")}
    report.packs = len(sizes)
    report.stored_before = report.stored_after = sum(sizes.values())
    members: dict[bytes, list[tuple[bytes, PackEntry]]] = {pid: [] for pid in sizes}
    with backend.read() as view:
        for pid, ms in entries.pack_members(view.items("chunks")).items():
            members.setdefault(pid, []).extend(ms)
    orphans = [
        (cid, e)
        for ms in members.values()
        for cid, e in ms
        if cid in live and e.codec == CODEC_DELTA and e.base not in live
    ]
    doomed = []
    for pid, ms in members.items():
        total = sum(e.size for _, e in ms)
        kept = sum(e.size for cid, e in ms if cid in live)
        if every or kept == 0 or kept < threshold * total:
            doomed.append(pid)
    report.deltas_made_whole = len(orphans)
    for pid in doomed:
        moving = sum(1 for cid, _ in members[pid] if cid in live)
        report.chunks_moved += moving
        if moving:
            report.packs_rewritten += 1
        else:
            report.packs_removed += 1
    if dry_run:
        report.stored_after -= sum(sizes.get(pid, 0) for pid in doomed)
        return report
    # Orphaned deltas first: after this no live chunk depends on a dead one.
    for start in range(0, len(orphans), 256):
        _move(backend, orphans[start : start + 256], [], live, level, whole=True)
    step: list[bytes] = []
    step_bytes = 0
    for pid in doomed:
        step.append(pid)
        step_bytes += sum(e.size for cid, e in members[pid] if cid in live)
        if step_bytes >= STEP_BYTES:
            _rewrite(backend, step, members, live, level)
            step, step_bytes = [], 0
    if step:
        _rewrite(backend, step, members, live, level)
    report.stored_after = sum(n for _, n, _ in backend.value_sizes("packs"))
    return report


def _rewrite(
    backend: Backend,
    pids: list[bytes],
    members: dict[bytes, list[tuple[bytes, PackEntry]]],
    live: set[bytes],
    level: int,
) -> None:
    moving = [(cid, e) for pid in pids for cid, e in members[pid] if cid in live]
    dead = [cid for pid in pids for cid, _ in members[pid] if cid not in live]
    _move(backend, moving, dead, live, level, whole=False, drop_packs=pids)


def _move(
    backend: Backend,
    chunks: list[tuple[bytes, PackEntry]],
    dead: list[bytes],
    live: set[bytes],
    level: int,
    *,
    whole: bool,
    drop_packs: Sequence[bytes] = (),
) -> None:
    """One transaction: store ``chunks`` anew, delete ``dead`` entries and ``drop_packs``.

    A delta keeps its frame as it is unless ``whole`` or its base is not live.  A pack holding
    a live chunk that cannot be read (damage: verify names it) is neither emptied nor deleted:
    gc never turns a damaged chunk into a missing one.
    """
    plain: list[tuple[bytes, bytes]] = []
    deltas: list[packs.Frame] = []
    damaged: set[bytes] = set()
    with backend.read() as view:
        pack_cache: dict[bytes, bytes | None] = {}
        for cid, e in chunks:
            try:
                if e.codec == CODEC_DELTA and not whole and e.base in live:
                    if e.pack not in pack_cache:
                        pack_cache[e.pack] = view.get("packs", e.pack)
                    frame = entries.frame_bytes(cid, e, pack_cache[e.pack])
                    deltas.append(packs.Frame(CODEC_DELTA, frame, [(cid, 0, e.size)], e.base, e.depth))
                else:
                    plain.append((cid, objects.load_chunk(view.get, cid, max_size=e.size)))
            except CorruptError:
                damaged.add(e.pack)
    if damaged:
        keep = {cid for cid, e in chunks if e.pack in damaged}
        plain = [(cid, data) for cid, data in plain if cid not in keep]
        deltas = [f for f in deltas if f.members[0][0] not in keep]
        drop_packs = [pid for pid in drop_packs if pid not in damaged]
    ops = packs.chunk_ops(plain, level, deltas=deltas)
    with backend.write() as batch:
        for table, key, value in ops:
            batch.put(table, key, value)  # replaces the moved chunks' entries
        for cid in dead:
            batch.delete("chunks", cid)
        for pid in drop_packs:  # (one the ops wrote again, byte-identical, is kept: WriteBatch.delete)
            batch.delete("packs", pid)
