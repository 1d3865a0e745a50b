"""The checkpoint's own records, encoded: the manifest (or, far more often, the proof that it
is the parent's, at no encoding cost) and the conversation.

Their chunks are collected plain (:class:`Records`); only those the store lacks are compressed,
since an unchanged tree re-creates every manifest chunk the store already has.  Three ways to
the manifest's id, cheapest first:

1. the context's memo (:class:`~snapstore.ops.context.ManifestMemo`) holds the parent's manifest
   and its entries are these: one dict comparison;
2. a context's first snapshot (a CLI process takes only one) compares the entries' fingerprint
   with the one stored with the last manifest (:data:`LAST_MANIFEST`), unless it watches;
3. the manifest is encoded: whole on a context's first snapshot, through the memo's codec
   (only the chunks around the changes) on later ones; a watching context's first snapshot
   fills the codec (a whole encoding, kept).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import blake3
import msgpack

from snapstore.ops.context import StageContext
from snapstore.ops.snapshot.write import frame_pool, lacking
from snapstore.records import manifest, manifest_codec
from snapstore.records.checkpoint import Checkpoint
from snapstore.records.manifest import Entry
from snapstore.storage import objects, packs
from snapstore.storage.backend import Backend
from snapstore.storage.packs import Op

#: meta key: the fingerprint (:func:`_fingerprint`) of the entries the last CLI-style snapshot
#: (a context's first) recorded, then its manifest id.  When the next one finds the same entries
#: and that manifest is its parent's, it reuses the id instead of encoding the manifest
#: again.  Only an optimisation: deleting it changes nothing.
LAST_MANIFEST = b"snapshot:last-manifest"


class Records:
    """What the checkpoint's transaction stores besides the checkpoint itself."""

    # (A plain class, not a dataclass: importing dataclasses would slow every CLI process's start.)
    __slots__ = ("ops", "plain", "manifest", "replace")

    def __init__(self, ops: list[Op]) -> None:
        #: Records and compressed chunks, in the order they are written.
        self.ops = ops
        #: Manifest and conversation chunks, plain, by id (:func:`compress_lacking`).
        self.plain: dict[bytes, bytes] = {}
        #: The ids in ``plain`` that are the manifest's.
        self.manifest: set[bytes] = set()
        #: Chunk ids whose entries the ops replace (stored again over damage: ``heal``).
        self.replace: set[bytes] = set()

    def put(self, cid: bytes, data: bytes) -> None:
        """Collect a plain chunk (the ``put`` of the record writers)."""
        self.plain[cid] = data

    def put_manifest(self, cid: bytes, data: bytes) -> None:
        """Collect a plain chunk of the manifest."""
        self.plain[cid] = data
        self.manifest.add(cid)


def manifest_of(
    ctx: StageContext,
    parent: Checkpoint | None,
    entries: dict[bytes, Entry],
    ordered: Sequence[Entry],
    records: Records,
    same: bool | None = None,
    span: manifest_codec.Span | None = None,
) -> tuple[bytes, bytes | None, bytes | None]:
    """``(manifest id, its stream record or None, fingerprint or None)`` for ``ordered`` (the
    values of ``entries`` in path order).  The record and the new chunks go to ``records``; the
    fingerprint, when computed, is to be stored with the checkpoint (:data:`LAST_MANIFEST`).
    The memo is cleared: the caller sets it once the snapshot is committed.  ``same``: whether
    ``entries`` are known to equal the memo's (ops.snapshot.ordered), sparing a comparison of
    every entry; None when not known.  ``span``: where ``ordered`` may differ from the list it
    was patched from (records.manifest_codec.write_manifest)."""
    memo = ctx.manifest_memo
    # (Without ``same``, the dicts are compared, and only two distinct dicts: a patch edits
    # the memo's own dict in place, which then compares equal to itself whatever it holds.)
    if same is None:
        same = memo.entries is not entries and memo.entries == entries
    if parent is not None and memo.mid == parent.manifest and same:
        return parent.manifest, None, None
    record = fingerprint = None
    # A context's first snapshot (a CLI process takes only one) recognises the last record's
    # entries by their fingerprint, else encodes them whole without keeping a codec.  A
    # watching context is long-lived: its first snapshot (a walk, O(files) anyway) fills the
    # codec instead, for about the fingerprint's work, so its next one is O(changed) already
    # (the agent's first tool call after the Store opened; tests/test_watch_first_checkpoint.py).
    cli = memo.mid is None and ctx.watcher is None
    if cli:
        fingerprint = _fingerprint(ordered)
    if parent is not None and fingerprint is not None and _last_manifest(ctx.backend) == fingerprint + parent.manifest:
        mid = parent.manifest  # the entries of the parent's manifest: nothing to encode
    elif cli:
        mid, _, record = manifest.write_manifest(ordered, records.put_manifest, ctx.level, encode=False)
    else:
        codec = memo.codec = memo.codec or manifest_codec.Codec()
        stored = parent is not None and codec.mid == parent.manifest  # (the parent's: in the store)
        skip = frozenset() if stored or parent is None else _leaves(ctx.backend, parent.manifest)
        mid, _, record = manifest_codec.write_manifest(
            codec, ordered, records.put_manifest, ctx.level, encode=False, stored=stored, span=span, skip=skip
        )  # fmt: skip
    memo.entries, memo.mid, memo.ordered = None, None, None  # set again once this snapshot is committed
    if parent is not None and mid == parent.manifest:
        records.plain.clear()  # the parent's manifest: its chunks are stored (no lookups, no page faults)
    if record is not None:
        records.ops.append(("streams", mid, record))
    return mid, record, fingerprint


def _leaves(backend: Backend, manifest_id: bytes) -> frozenset[bytes]:
    """The chunk ids of the stored manifest ``manifest_id`` (the parent's), for a codec whose
    last encoding is not it (its first, whole encoding, or another writer's checkpoint since):
    those chunks are stored and not handed over again, as when the codec's ``stored`` says its
    last encoding is the parent's.  Otherwise every chunk of a big tree's manifest would be
    held until the commit (~70 bytes a file).  Empty when it cannot be read (then every chunk
    is handed over: the counts find the damage and the commit heals it)."""
    from snapstore.errors import CorruptError

    try:
        with backend.read() as view:
            gets = 0

            def get(table: str, key: bytes) -> bytes | None:
                # The frames of the index nodes stay mapped (counted in the process's memory):
                # as large as the manifest, at the service's peak.  Dropped as the walk goes.
                nonlocal gets
                gets += 1
                if not gets % 16:
                    backend.release_memory()
                value: bytes | None = view.get(table, key)
                return value

            return frozenset(objects.leaf_ids(get, manifest_id))
    except CorruptError:
        return frozenset()
    finally:
        backend.release_memory()


#: Tasks whose last conversation a Store keeps (records.conversation.Memo).
MEMO_TASKS = 8


def conversation_of(
    ctx: StageContext, messages: Any, task: str | None, records: Records, packed: bool, warnings: list[str]
) -> bytes:
    """Encode the agent's conversation (a delta on the task's last one when it can be); its
    chunks and record go to ``records``, what was replaced to ``warnings``.  Returns its id."""
    from snapstore.records import conversation  # (json) only when there is one

    backend = ctx.backend
    base = _conversation_base(backend, task)
    memos = ctx.conversation_memos
    memo = memos.pop(task, None) or conversation.Memo()
    memos[task] = memo  # the most recently used last
    while len(memos) > MEMO_TASKS:
        del memos[next(iter(memos))]
    with backend.read() as view:
        cid, record = conversation.write(
            messages, records.put, ctx.level, encode=False, base=base, inline=packed, get=view.get,
            warnings=warnings, memo=memo, compact=packs.writes_compact_conversations(view.get),
        )
    if record is not None:
        records.ops.append(("conversations", cid, record))
    return cid


def compress_lacking(
    records: Records,
    ctx: StageContext,
    packed: bool,
    manifest: tuple[bytes, bytes | None, bytes] | None = None,
    *,
    heal: bool = False,
) -> None:
    """Compress the plain chunks the store lacks into ``records.ops``.

    ``manifest``: ``(id, stream record or None, parent's id)`` of the manifest
    :func:`manifest_of` wrote, when the checkpoint has a parent: its new leaves are deltas on
    the parent manifest's when that pays
    (:mod:`~snapstore.ops.snapshot.manifest_deltas`), the rest of the manifest in frames
    of :data:`~snapstore.storage.packs.MANIFEST_FRAME` (a ``cat`` reads a few of its leaves,
    each a prefix decode of its frame), the other chunks in the usual ones.

    ``heal`` (the parent's manifest is damaged): a chunk the store holds but cannot read back
    is stored again, its entry replaced, so the new checkpoint does not share the damage (and
    every older one naming the same chunk reads it again); no leaf is a delta on the parent's.
    """
    new = lacking(ctx.backend, records.plain, unreadable=heal)
    if heal:
        manifest = None
        records.replace.update(cid for cid, _ in new)
    if not packed:
        records.ops.extend(packs.chunk_ops(new, ctx.level, packed=False))
        return
    ours = [(cid, data) for cid, data in new if cid in records.manifest]
    others = [(cid, data) for cid, data in new if cid not in records.manifest]
    deltas: list[packs.Frame] = []
    if manifest is not None and ours:
        from snapstore.ops.snapshot import manifest_deltas

        ours, deltas = manifest_deltas.split(ctx, ours, *manifest)
    frames = [
        *deltas,
        *packs.solid_frames(ours, ctx.level, packs.MANIFEST_FRAME, pool=frame_pool(len(ours))),
        *packs.solid_frames(others, ctx.level, pool=frame_pool(len(others))),
    ]
    records.ops.extend(packs.pack_ops(frames))


def _fingerprint(ordered: Sequence[Entry]) -> bytes:
    """BLAKE3 of the entries as msgpack arrays of up to 4096 entries (packed in slices, so no
    copy of the whole manifest's encoding is held at once)."""
    h = blake3.blake3()
    pack = msgpack.Packer().pack
    for i in range(0, len(ordered), 4096):
        h.update(pack(ordered[i : i + 4096]))
    return h.digest()


def _last_manifest(backend: Backend) -> bytes | None:
    with backend.read() as view:
        value: bytes | None = view.get("meta", LAST_MANIFEST)
        return value


def _conversation_base(
    backend: Backend, task: str | None, look_back: int = 64
) -> tuple[bytes, int, int] | None:
    """``(id, count, depth)`` of the newest conversation of this task, to store a delta on."""
    from snapstore.records import conversation

    with backend.read() as view:
        for i, (_, cid) in enumerate(view.items("log", reverse=True)):
            if i >= look_back:
                return None
            packed = view.get("checkpoints", cid)
            try:
                record = msgpack.unpackb(packed, raw=False)
                conv = record.get("conversation")
                if record.get("task") != task or conv is None:
                    continue
                count, depth = conversation.info(view.get, conv)
            except Exception:  # a damaged record is verify's business, not a reason to fail here
                continue
            return conv, count, depth
    return None
