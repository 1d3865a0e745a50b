"""gc's consolidation phase (format 2): gather packs into full ones, versions of a path together.

Every checkpoint writes its own small pack, so a file's versions are compressed alone (or
against one delta base) and never meet again.  Consolidation rewrites packs the way ``git gc``
repacks: the live chunks are put in an order where similar bytes are neighbours, then written
as solid zstd frames (:data:`snapstore.storage.packs.FRAME_TARGET` plain bytes) in full packs.
Inside a solid frame zstd finds every earlier version of a file within its window, so a
one-line edit costs a few bytes, as a git delta does, and with no chain to follow on reading.

**The order**: data chunks are sorted by the path of the file that holds them, then by their
offset in that file, then newest first (the newest version is whole at the front of its group;
older ones are cheap against it, as git keeps the newest object whole).  A chunk shared by
several files takes the newest file's place.  git's heuristic sorts by base name first (so
``a/__init__.py`` meets ``b/__init__.py``); on an edit history that was larger than path
order, and reading a whole checkpoint took several times longer: its files, read in
path order, visit the frames out of order and thrash the frame cache.  In path order a
checkpoint's files are read front to back through the frames, each decoded once.  Within a
directory, files sort by stem, then extension (``a.py`` beside ``a.pyi``), and a compiled file
in ``__pycache__`` sorts beside its source, whose names and strings it repeats (site-packages:
-0.7%; no change on the edit history).  Manifest
chunks come first, by their position in the manifest, newest first; index nodes and
conversation chunks follow, each group in its own order; live chunks no checkpoint path
reaches (a damaged record's) come last, in their old order.

**Which packs.**  A pack written here starts with a zstd *skippable frame* (:data:`MARK`,
12 bytes that readers never touch: every entry points at its own frame); a pack without it
is *loose* (written by a checkpoint, by repack or by an older version).  ``full`` rewrites every
pack (``gc``); otherwise only the loose packs are (the automatic maintenance pass: bounded by
the loose packs' size).

**Crash safety.**  Each step is one LMDB transaction writing new packs and pointing the moved
chunks' entries at them; the old packs (and the dead entries naming them) are deleted only in
later transactions, after every live chunk they held was moved and committed.  A crash leaves
every entry pointing at a pack that exists; an old pack left behind holds no live entry or a
few, and the next gc frees or rewrites it.  The caller holds the writer lock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from snapstore.errors import CorruptError
from snapstore.records import conversation, manifest
from snapstore.records.checkpoint import references
from snapstore.storage import entries, objects, packs
from snapstore.storage.backend import Backend, ReadView, WriteBatch
from snapstore.storage.entries import PackEntry

#: The first bytes of every consolidated pack: a zstd skippable frame (magic 0x184D2A5B, a
#: 4-byte length, then b"SNC1"), which no entry ever points at.
MARK = struct.pack("<II", 0x184D2A5B, 4) + b"SNC1"

#: Plain bytes of live chunks moved per transaction (bounds the memory of one step).
STEP_BYTES = 16 << 20

#: zstd level of consolidated frames when the store's level is lower: smaller stores for more
#: CPU, paid once, in maintenance (docs/benchmarks-design.md).
LEVEL = 9
#: The level when a gc gathers at most :data:`SMALL_BYTES` of plain chunks (the small trees
#: agents live in): smaller than 9 for a gc that stays short, and frames decode as fast.  Past
#: that size, 9: level 19 would take minutes.
SMALL_LEVEL = 19
SMALL_BYTES = 32 << 20

#: Plain bytes per consolidated frame: the largest size at which reads from the consolidated
#: store were still no slower than from loose packs (docs/benchmarks-design.md).
FRAME = 4 << 20
#: Plain bytes per frame when a gc gathers more than :data:`SMALL_BYTES` (at :data:`LEVEL`).
#: Larger frames store less and gc faster; the price is the read of one chunk (a prefix decode
#: of up to a frame), while a restore of a whole tree decodes each frame once either way.
BIG_FRAME = 4 << 20
#: Plain bytes per frame of manifest chunks: the versions of a manifest are nearly the same
#: bytes and compress to little, so a big frame costs a read (cat: a leaf late in the frame) far
#: more than it saves on disk.
MANIFEST_FRAME = 256 << 10
#: A manifest frame also closes once its leaves span this many bytes of their manifests (their
#: offsets, however many versions lie between).  ``cat`` finds a path by a binary search of
#: the leaves, each probe a prefix decode of its frame: in a manifest with one version (a big
#: tree's first checkpoint) every frame was all distinct entries.  Spans cut what a ``cat``
#: decodes there for almost nothing on disk; a history's frames, many versions of a few regions,
#: still close at :data:`MANIFEST_FRAME`.
MANIFEST_SPAN = 32 << 10

# Sort groups: manifests first (read by every command), then file data, then the rest.
_MANIFEST, _DATA, _INDEX, _CONVERSATION = 0, 1, 2, 3

Key = tuple[int, bytes, int, int]  # (group, path or conversation, offset, rank)


@dataclass
class ConsolidateReport:
    """What consolidation rewrote (or would, with a dry run)."""

    packs: int = 0  # packs before
    loose: int = 0  # loose packs before (not written by consolidation)
    packs_rewritten: int = 0
    packs_written: int = 0
    chunks_moved: int = 0
    stored_before: int = 0  # bytes of all packs before
    stored_after: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def is_consolidated(head: bytes) -> bool:
    """Whether a pack (its first bytes) was written by consolidation."""
    return head[: len(MARK)] == MARK


def loose_packs(backend: Backend) -> tuple[int, int]:
    """``(count, stored bytes)`` of the loose packs: what the maintenance pass would gather."""
    count = size = 0
    for _, n, head in backend.value_sizes("packs"):
        if not is_consolidated(head):
            count += 1
            size += n
    return count, size


# -- the order ---------------------------------------------------------------------------------


def order_keys(
    view: ReadView, *, newest: int | None = None, within: set[bytes] | None = None
) -> dict[bytes, Key]:
    """A sort key for every chunk the checkpoints reach (newest checkpoints first).

    ``newest``: only the newest that many checkpoints; ``within``: only the manifest chunks in
    this set are decoded (the maintenance pass: the chunks it moves were written by recent
    checkpoints, whose changed entries are in their new manifest chunks).
    """
    get = view.get
    keys: dict[bytes, Key] = {}
    ids = [cid for _, cid in view.items("log")]
    if newest is None:
        listed = set(ids)
        ids += [cid for cid, _ in view.items("checkpoints") if cid not in listed]
    else:
        ids = ids[-newest:]
    seen_leaves: set[bytes] = set()
    seen_streams: set[bytes] = set()
    walked: dict[bytes, int] = {}
    rank = 0
    for cpid in reversed(ids):
        packed = get("checkpoints", cpid)
        if packed is None:
            continue
        rank += 1
        try:
            mid, conv = references(cpid, packed)
            offset = 0  # of the leaf in the manifest's bytes: versions of a region meet
            for nid, size, height in objects.walk_stream(get, mid, walked=walked):
                if height:
                    if nid in walked:  # seen in a newer manifest: the walk skips its subtree
                        offset += size
                    keys.setdefault(nid, (_MANIFEST, b"", -1, rank))  # read before its leaves
                    continue
                keys.setdefault(nid, (_MANIFEST, b"", offset, rank))
                offset += max(size, 0)
                if nid in seen_leaves or (within is not None and nid not in within):
                    continue
                seen_leaves.add(nid)
                data = objects.load_chunk(get, nid)
                for e in manifest.iter_entries_of_chunks(mid, [data]):
                    if e.is_file and e.ref not in seen_streams:
                        seen_streams.add(e.ref)
                        _file_keys(get, e.path, e.ref, rank, keys, walked)
            if conv is not None:
                _conversation_keys(get, conv, rank, keys, walked)
        except CorruptError:
            continue  # gc's mark decides what such a record keeps; its chunks go last
    return keys


def neighbour_key(path: bytes) -> bytes:
    """Where a file's chunks sort among the data: its directory, its stem, then its extension;
    ``d/__pycache__/m.cpython-311.pyc`` as ``d/m``, after ``m``'s own files."""
    head, _, name = path.rpartition(b"/")
    if head == b"__pycache__" or head.endswith(b"/__pycache__"):
        head = head[: -len(b"__pycache__")].rstrip(b"/")
        return (head + b"/" if head else b"") + name.partition(b".")[0] + b"\x00\xff" + name
    stem, dot, ext = name.rpartition(b".")
    if not dot or not stem:
        stem, ext = name, b""
    return (head + b"/" if head else b"") + stem + b"\x00" + ext


def _file_keys(
    get: objects.Getter,
    path: bytes,
    sid: bytes,
    rank: int,
    keys: dict[bytes, Key],
    walked: dict[bytes, int],
) -> None:
    """Keys for a file's chunks.  ``walked`` (shared by every stream, as gc's mark does): an
    index node seen before is not descended again, so a stream whose tree repeats nodes (a
    zero-filled file, or a hostile DAG claiming terabytes) costs one visit per distinct node."""
    offset = 0
    path = neighbour_key(path)
    for nid, size, height in objects.walk_stream(get, sid, walked=walked):
        if height:
            if nid in walked:  # its subtree was keyed already (the walk skips it)
                offset += max(size, 0)
            keys.setdefault(nid, (_DATA, path, -1, rank))  # just before the file's data
            continue
        keys.setdefault(nid, (_DATA, path, offset, rank))
        offset += max(size, 0)


def _conversation_keys(
    get: objects.Getter, cid: bytes, rank: int, keys: dict[bytes, Key], walked: dict[bytes, int]
) -> None:
    if get("conversations", cid) is None:
        for nid, _, _ in objects.walk_stream(get, cid, walked=walked):
            keys.setdefault(nid, (_CONVERSATION, cid, 0, rank))
        return
    records = conversation.segments(get, cid)
    first = records[0][0]  # the conversation's oldest record: its records and chunks meet
    for n, (rid, record) in enumerate(records):
        # Oldest first within a conversation: a later record's messages quote earlier ones.
        keys.setdefault(rid, (_CONVERSATION, first, n, 0))
        for ref in record["chunks"]:
            keys.setdefault(ref[0], (_CONVERSATION, first, n, 0))


# -- the rewrite -------------------------------------------------------------------------------


def run(
    backend: Backend,
    live: set[bytes],
    *,
    level: int,
    full: bool,
    dry_run: bool = False,
    keys: dict[bytes, Key] | None = None,
    exact_level: bool = False,
) -> ConsolidateReport:
    """Rewrite the loose packs (every pack with ``full``) into consolidated ones.

    ``live``: the marked chunk ids (a chunk not in it is not moved; its entry is deleted with
    its old pack).  ``keys``: the order (computed here when None).
    ``level``: at least :data:`LEVEL` unless ``exact_level`` (``gc --repack --level N``).
    """
    report = ConsolidateReport()
    sizes: dict[bytes, int] = {}
    targets: set[bytes] = set()
    for pid, n, head in backend.value_sizes("packs"):
        sizes[pid] = n
        if not is_consolidated(head):
            report.loose += 1
        if full or not is_consolidated(head):
            targets.add(pid)
    report.packs = len(sizes)
    report.stored_before = report.stored_after = sum(sizes.values())
    with backend.read() as view:
        members = entries.pack_members(view.items("chunks"), targets)
        if keys is None:
            keys = order_keys(view)
    moving: list[tuple[bytes, PackEntry]] = [
        (cid, e) for ms in members.values() for cid, e in ms if cid in live
    ]
    report.packs_rewritten = len(targets)
    report.chunks_moved = len(moving)
    if dry_run or not targets:
        return report
    last: Key = (_CONVERSATION + 1, b"", 0, 0)
    moving.sort(key=lambda ce: keys.get(ce[0], last))
    breaks, small = breaks_of([cid for cid, _ in moving], keys)
    total = sum(item.size for _, item in moving)
    if not exact_level:
        level = max(level, SMALL_LEVEL if full and total <= SMALL_BYTES else LEVEL)
    frame = FRAME if total <= SMALL_BYTES else BIG_FRAME
    damaged: set[bytes] = set()
    step: list[tuple[bytes, PackEntry]] = []
    step_bytes = 0
    for cid, item in moving:
        step.append((cid, item))
        step_bytes += item.size
        if step_bytes >= STEP_BYTES:
            report.packs_written += _move(backend, step, level, frame, damaged, breaks, small)
            step, step_bytes = [], 0
    if step:
        report.packs_written += _move(backend, step, level, frame, damaged, breaks, small)
    _drop(backend, members, live, damaged)
    report.stored_after = sum(n for _, n, _ in backend.value_sizes("packs"))
    return report


def _move(
    backend: Backend,
    chunks: list[tuple[bytes, PackEntry]],
    level: int,
    frame: int,
    damaged: set[bytes],
    breaks: set[bytes],
    small: set[bytes],
) -> int:
    """One transaction: the chunks, read in order, written as solid frames in new packs."""
    plain: list[tuple[bytes, bytes]] = []
    with backend.read() as view:
        for cid, e in chunks:
            try:
                plain.append((cid, objects.load_chunk(view.get, cid, max_size=e.size)))
            except CorruptError:
                damaged.add(e.pack)  # gc never turns a damaged chunk into a missing one
    ops = packs.pack_ops(frames_of(plain, level, frame, breaks, small), head=MARK)
    with backend.write() as batch:
        for table, key, value in ops:
            batch.put(table, key, value)  # replaces the moved chunks' entries
    return sum(1 for table, _, _ in ops if table == "packs")


def breaks_of(ordered: list[bytes], keys: dict[bytes, Key]) -> tuple[set[bytes], set[bytes]]:
    """``(breaks, small)`` of chunks in their order: each kind (manifests, file data, index
    nodes, conversations) starts a new frame, so a command that reads only manifests (list,
    diff) decodes no file data to reach them, and manifest frames close every
    :data:`MANIFEST_SPAN` of offsets; ``small``: the breaks that start manifests."""
    last: Key = (_CONVERSATION + 1, b"", 0, 0)
    breaks = {cid for cid, prev in zip(ordered[1:], ordered) if keys.get(cid, last)[0] != keys.get(prev, last)[0]}
    if ordered:
        breaks.add(ordered[0])
    start = 0  # the manifest offset of the current manifest frame's first leaf
    for cid in ordered:
        group, _, offset, _ = keys.get(cid, last)
        if group != _MANIFEST:
            continue
        offset = max(offset, 0)  # (index nodes: -1, before the leaves)
        if cid in breaks:
            start = offset
        elif offset - start >= MANIFEST_SPAN:
            breaks.add(cid)
            start = offset
    return breaks, {cid for cid in breaks if keys.get(cid, last)[0] == _MANIFEST}


def frames_of(
    plain: list[tuple[bytes, bytes]], level: int, frame: int, breaks: set[bytes], small: set[bytes]
) -> list[packs.Frame]:
    """Solid frames of ``plain`` chunks in order: a new run at each break, manifest runs in
    frames of :data:`MANIFEST_FRAME`, the others of ``frame`` plain bytes."""
    frames: list[packs.Frame] = []
    run: list[tuple[bytes, bytes]] = []
    manifests = False
    for cid, data in [*plain, (b"", b"")]:  # a sentinel closes the last run
        if (cid in breaks or not cid) and run:
            frames += packs.solid_frames(run, level, MANIFEST_FRAME if manifests else frame)
            run = []
        if cid in breaks:
            manifests = cid in small
        run.append((cid, data))
    return frames


def _drop(
    backend: Backend,
    members: dict[bytes, list[tuple[bytes, PackEntry]]],
    live: set[bytes],
    damaged: set[bytes],
) -> None:
    """Delete the old packs and the dead entries naming them (a few packs per transaction)."""
    doomed = [pid for pid in members if pid not in damaged]
    for batch_pids in _batches(doomed, 64):
        with backend.write() as batch:
            for pid in batch_pids:
                for cid, _ in members[pid]:
                    if cid not in live:
                        batch.delete("chunks", cid)
                if batch.get("packs", pid) is not None and not _still_named(batch, members[pid], live):
                    batch.delete("packs", pid)


def _still_named(batch: WriteBatch, ms: list[tuple[bytes, PackEntry]], live: set[bytes]) -> bool:
    """Whether a live entry still points into this pack (a move that did not happen)."""
    for cid, e in ms:
        if cid in live:
            value = batch.get("chunks", cid)
            if value is not None and entries.is_entry(value):
                try:
                    if entries.parse(cid, value).pack == e.pack:
                        return True
                except CorruptError:
                    return True
    return False


def _batches(items: list[bytes], n: int) -> Iterator[list[bytes]]:
    for start in range(0, len(items), n):
        yield items[start : start + n]
