"""Repair: damaged chunks stored again from the working tree (``snapstore verify --repair``).

verify finds the chunks the store holds but cannot read back (a damaged frame or pack, a
damaged index entry) and the chunks a stream names that the store does not hold.  A checkpoint
that names one cannot be restored whole, and every later checkpoint of an unchanged file names
it too (a dedup hit is never read back).  Most of them
are content the working tree still holds: a file unchanged since, or an unchanged part of one
(chunks are content-defined).  Repair reads the tree's files as a snapshot does (the same walk,
the same chunker, each file opened without following a symlink), and stores again every chunk,
stream index node included, whose id is among the damaged ones: new packs, whose entries
replace the damaged ones in one transaction, under the writer lock.  A chunk is its id's
content (the hash is checked as it is cut), so every checkpoint that names it reads it again.

What the tree no longer holds (an older version of a file, a manifest chunk) stays damaged and
is reported by the verify that follows.  Like ``git fsck`` followed by re-adding the objects a
work tree still has; restic's ``repair packs`` salvages from the damaged packs instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

from snapstore.errors import CorruptError
from snapstore.ops import verify
from snapstore.ops.context import StageContext
from snapstore.ops.snapshot import read as snapshot_read
from snapstore.records.manifest import EXEC, FILE
from snapstore.storage import chunker, entries, objects, packs
from snapstore.storage.backend import Backend, ReadView
from snapstore.tree import scan
from snapstore.tree.paths import open_beneath


class RepairReport(NamedTuple):
    """What repair found, stored again, and what verify says after it."""

    before: verify.VerifyReport
    #: verify's report after the repair (None when nothing was damaged: nothing was written).
    after: verify.VerifyReport | None
    damaged: int
    repaired: int
    files_read: int

    @property
    def ok(self) -> bool:
        return (self.after or self.before).ok

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "damaged_chunks": self.damaged,
            "repaired_chunks": self.repaired,
            "files_read": self.files_read,
            "before": self.before.to_json(),
            "after": self.after.to_json() if self.after is not None else None,
        }


def damaged_chunks(report: verify.VerifyReport) -> set[bytes]:
    """The ids of the chunks verify found held but unreadable, or named but not held."""
    return {bytes.fromhex(p.id) for p in report.problems if p.kind == "chunk"} | report.missing


def damaged_packs(report: verify.VerifyReport) -> set[bytes]:
    """The ids of the packs whose bytes verify found do not match their id."""
    return {bytes.fromhex(p.id) for p in report.problems if p.kind == "pack"}


def run(ctx: StageContext, progress: verify.Progress | None = None, *, before: verify.VerifyReport | None = None) -> RepairReport:
    """Verify, store again from the tree what it can of the damage, verify again (the caller
    holds the writer lock).  ``before``: a verify made without the lock (``Store.repair``):
    then only what it found that is still damaged now is repaired, and no whole verify runs first.

    A damaged pack is emptied when it can be: the chunks of its frames that still read back
    are stored again beside the ones the tree gave, and the pack goes once no entry names it.
    """
    if before is None:
        before = verify.run(ctx.backend, progress, ctx.excluded)
    damaged, bad_packs = still_damaged(ctx.backend, before)
    if not damaged and not bad_packs:
        return RepairReport(before, None, 0, 0, 0)
    found, files = recover(ctx.root_bytes, ctx.excluded, damaged) if damaged else ({}, 0)
    with ctx.backend.read() as view:
        salvaged, members = _salvage(view, bad_packs, damaged)
    store = {**salvaged, **found}
    if store:
        with ctx.backend.write() as batch:
            ops = packs.chunk_ops(sorted(store.items()), ctx.level, packed=packs.writes_packs(batch.get))
            for table, key, value in ops:
                batch.put(table, key, value)  # (replacing each damaged entry)
            for pid, named_by in members.items():
                if named_by <= store.keys():
                    # No entry names it any more.  A rebuilt pack can be its bytes again, with
                    # its id: the batch then keeps what it wrote (WriteBatch.delete).
                    batch.delete("packs", pid)
    return RepairReport(before, verify.run(ctx.backend, None, ctx.excluded), len(damaged), len(found), files)


def still_damaged(backend: Backend, report: verify.VerifyReport) -> tuple[set[bytes], set[bytes]]:
    """The chunks and packs ``report`` found damaged that still are (it may be older than the
    caller's writer lock: another repair may have stored them again meanwhile)."""
    entries.clear_cache()  # (a frame cached before the damage would read back)
    chunks, bad = set(), set()
    with backend.read() as view:
        for cid in damaged_chunks(report):
            try:
                objects.load_chunk(view.get, cid, whole_frame=True)  # (as verify: the whole frame)
            except CorruptError:
                chunks.add(cid)
        for pid in damaged_packs(report):
            pack = view.get("packs", pid)
            if pack is not None and objects.pack_id(pack) != pid:
                bad.add(pid)
    entries.clear_cache()
    return chunks, bad


def _salvage(view: ReadView, bad_packs: set[bytes], damaged: set[bytes]) -> tuple[dict[bytes, bytes], dict[bytes, set[bytes]]]:
    """The chunks of ``bad_packs`` that still read back (by id), and each pack's chunks."""
    out: dict[bytes, bytes] = {}
    members: dict[bytes, set[bytes]] = {pid: set() for pid in bad_packs}
    if not bad_packs:
        return out, members
    for cid, value in view.items("chunks"):
        if not entries.is_entry(value):
            continue
        try:
            pid = entries.parse(cid, value).pack
        except CorruptError:
            continue  # (a damaged entry: in ``damaged``)
        if pid in members:
            members[pid].add(cid)
            if cid not in damaged:
                try:
                    out[cid] = objects.load_chunk(view.get, cid)  # (hash-checked)
                except CorruptError:
                    continue
    return out, members


def recover(root: bytes, excluded: frozenset[bytes], wanted: set[bytes]) -> tuple[dict[bytes, bytes], int]:
    """The chunks of ``wanted`` the tree's files hold (plain bytes by id), and how many files
    were read; stops as soon as every one is found.  A file that cannot be read is passed over."""
    found: dict[bytes, bytes] = {}
    read = 0

    def keep(cid: bytes, data: bytes | memoryview) -> None:
        if cid in wanted and cid not in found:
            found[cid] = bytes(data)

    for f in scan.walk(root, excluded, scan.ScanReport()):
        if f.kind not in (FILE, EXEC):
            continue
        try:
            _cut_file(root, f.path, keep)
        except OSError:
            continue  # gone, or unreadable: another file may hold the same chunks
        read += 1
        if len(found) == len(wanted):
            break
    return found, read


def _cut_file(root: bytes, rel: bytes, keep: Callable[[bytes, bytes | memoryview], None]) -> None:
    """Cut one file as a snapshot does; ``keep(id, plain)`` sees each chunk and index node."""
    fd = open_beneath(root, rel, snapshot_read.READ_FLAGS)  # (the snapshot's reads: no symlink)
    with os.fdopen(fd, "rb", buffering=0) as f:
        pieces: Iterator[bytes | memoryview]
        if os.fstat(fd).st_size <= snapshot_read.WHOLE_READ_MAX:
            pieces = chunker.cut_buffer(f.read())
        else:
            pieces = chunker.cut_stream(f)
        builder = objects.StreamBuilder()
        for piece in pieces:
            keep(builder.add(piece), piece)
        builder.finish(keep, encode=False)
