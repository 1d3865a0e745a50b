"""``snapstore upgrade``: convert a format-1 store (one value per chunk) to packs, and a
format-1 or -2 store to format 3 (conversation records in the compact form of
:mod:`snapstore.records.conversation_delta`, which format-2 readers do not read).

**Order.** Chunks are packed in the order a restore reads them: the newest checkpoint's files
first, in path order, each file's chunks in order, then older checkpoints', then whatever is
left (index nodes, manifests, conversations, garbage), so solid frames hold neighbours.

**Safety.** The store is valid after every transaction, because a reader takes a format-1 value
and a format-2 entry alike (:func:`snapstore.storage.objects.load_chunk`).  Each step packs a
bounded group of chunks, **reads every one of them back from the new packs and compares its
hash** while the old values are still in place, and only then, in one transaction, writes the
packs and replaces the group's values with entries.  The meta ``format`` becomes 3 in the last
transaction; then the conversation records are rewritten compact, as maintenance does (each
rewrite checked against the record it replaces: a crash leaves old and new forms side by side,
both read).  A crash (or SIGKILL) anywhere leaves a store that reads as before; running
``upgrade`` again carries on where it stopped.  The space of the old values comes back with the
compaction at the end (a new store generation: crash-safe, see lmdb_generations).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from snapstore.errors import CorruptError
from snapstore.records import manifest
from snapstore.records.checkpoint import parse_record
from snapstore.storage import entries, objects, packs
from snapstore.storage.backend import Backend, ReadView, WriteBatch
from snapstore.storage.opening import FORMAT_VERSION

#: Plain bytes packed (and verified) per transaction.
STEP_BYTES = 16 << 20

Progress = Callable[[int, int], None]


@dataclass
class UpgradeReport:
    """What ``upgrade`` converted."""

    format_before: int = 0
    format_after: int = 0
    chunks: int = 0  # converted to pack entries
    packs: int = 0  # written
    size_before: int = 0  # bytes of the store file
    size_after: int = 0

    conversations: int = 0  # records rewritten compact

    @property
    def already(self) -> bool:
        return self.format_before >= FORMAT_VERSION

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "already": self.already}


def run(backend: Backend, level: int, progress: Progress | None = None) -> UpgradeReport:
    """Convert the store of ``backend`` to format 3; the caller holds the writer lock."""
    report = UpgradeReport(size_before=backend.disk_size())
    with backend.read() as view:
        fmt = view.get("meta", b"format") or b"0"
        report.format_before = int(fmt) if fmt.isdigit() else 0
        todo = list(_in_restore_order(view)) if report.format_before < 2 else []
    report.format_after = max(report.format_before, FORMAT_VERSION)
    if report.already:
        report.size_after = report.size_before
        return report
    step: list[bytes] = []
    for i, cid in enumerate(todo):
        step.append(cid)
        if len(step) * 32 * 1024 >= STEP_BYTES:  # ~32 KiB per chunk: bounded without reading
            _add(report, _convert(backend, step, level))
            step = []
            if progress:
                progress(i + 1, len(todo))
    with backend.write() as batch:  # the last step and the format change together
        if step:
            _add(report, _convert_into(batch, backend, step, level))
        batch.put("meta", b"format", str(FORMAT_VERSION).encode())
    backend.sync()
    from snapstore.ops import maintenance_conversations

    report.conversations = maintenance_conversations.run(backend, level, contextlib.nullcontext)
    backend.sync()
    if not todo and not report.conversations:  # (2 -> 3 with nothing to rewrite: nothing to compact)
        report.size_after = report.size_before
        return report
    sizes = backend.compact()
    report.size_after = sizes[1] if sizes is not None else backend.disk_size()
    if progress:
        progress(len(todo), len(todo))
    return report


def _in_restore_order(view: ReadView) -> Iterator[bytes]:
    """Every format-1 chunk id, each once: newest checkpoint's files first, then the rest."""
    seen: set[bytes] = set()

    def fresh(cid: bytes) -> bool:
        if cid in seen:
            return False
        seen.add(cid)
        value = view.get("chunks", cid)
        return value is not None and not entries.is_entry(value)

    for _, key in view.items("log", reverse=True):
        packed = view.get("checkpoints", key)
        if packed is None:
            continue
        try:
            cp = parse_record(key, packed)
            for e in manifest.iter_entries(view.get, cp.manifest):
                if e.is_file:
                    for cid, _, height in objects.walk_stream(view.get, e.ref):
                        if height == 0 and fresh(cid):
                            yield cid
        except CorruptError:
            continue  # what a damaged checkpoint reaches is still packed below, in key order
    for cid, value in view.items("chunks"):
        if cid not in seen and not entries.is_entry(value):
            seen.add(cid)
            yield cid


def _add(report: UpgradeReport, done: tuple[int, int]) -> None:
    report.chunks += done[0]
    report.packs += done[1]


def _convert(backend: Backend, ids: list[bytes], level: int) -> tuple[int, int]:
    with backend.write() as batch:
        return _convert_into(batch, backend, ids, level)


def _convert_into(
    batch: WriteBatch, backend: Backend, ids: list[bytes], level: int
) -> tuple[int, int]:
    """Pack ``ids`` into ``batch``, after reading each back from the new packs.

    Returns ``(chunks converted, packs written)``.

    A damaged chunk is left as it is (readers and verify report it as before).
    """
    plain: list[tuple[bytes, bytes]] = []
    with backend.read() as view:
        for cid in ids:
            try:
                plain.append((cid, objects.load_chunk(view.get, cid)))
            except CorruptError:
                continue
    ops = packs.chunk_ops(plain, level)
    written = {(table, key): value for table, key, value in ops}

    def staged(table: str, key: bytes) -> bytes | None:
        return written.get((table, key))

    entries.clear_cache()  # read the new frames themselves, not a cached copy
    for cid, data in plain:
        if objects.load_chunk(staged, cid, max_size=len(data)) != data:
            raise CorruptError(f"chunk {cid.hex()} did not read back from its new pack")
    for table, key, value in ops:
        batch.put(table, key, value)
    return len(plain), sum(1 for table, _, _ in ops if table == "packs")
