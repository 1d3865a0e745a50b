"""The snapshot's last step: the checkpoint, its records and the stat cache in ONE transaction,
then fsync (or, for an unchanged tree with ``skip_unchanged``, no checkpoint at all).

Everything the checkpoint names is stored before or in this transaction (the writer thread
committed the pooled reads' chunks first), so a snapshot killed at any moment leaves at most
unreferenced chunks, never a checkpoint that points at something missing.
"""

from __future__ import annotations

import time
from typing import Any

from snapstore.ops.context import StageContext
from snapstore.ops.snapshot import counts
from snapstore.ops.snapshot.encode import LAST_MANIFEST, Records
from snapstore.ops.snapshot.read import Reads
from snapstore.ops.snapshot.result import SnapshotResult
from snapstore.ops.snapshot.walk import Inputs, Start
from snapstore.records import requests
from snapstore.records.checkpoint import (
    SAFETY,
    backfill_task_index,
    build_record,
    put_path_rows,
    write_rows,
)


def commit(
    ctx: StageContext,
    start: Start,
    tree: Inputs,
    reads: Reads,
    records: Records,
    result: SnapshotResult,
    fingerprint: bytes | None,
    *,
    message: str,
    task: str | None,
    tags: list[str] | None,
    kind: str,
    metadata: dict[str, Any] | None,
) -> tuple[bytes, bytes]:
    """Write the checkpoint; returns its id and packed record."""
    backend = ctx.backend
    stats = counts.stats(result)
    time_ns = time.time_ns()
    tags = list(dict.fromkeys(tags or []))
    result.new_bytes = reads.inserted + counts.new_bytes(backend, records.ops)
    stats["new_bytes"] = result.new_bytes
    mid = result.manifest_id
    with backend.write() as batch:
        for table, key, value in records.ops:
            if table == "chunks" and key in records.replace:
                batch.put(table, key, value)  # over a damaged entry (encode.compress_lacking)
            else:
                batch.put_new(table, key, value)
        for path in tree.stale:
            batch.delete("statcache", path)
        for key, value in reads.inline_cache.items():  # (the writer stores those of pooled reads)
            batch.put("statcache", key, value)
        if fingerprint is not None:
            batch.put("meta", LAST_MANIFEST, fingerprint + mid)
        cp_id, packed = build_record(
            parent=start.parent.id if start.parent else None,
            time_ns=time_ns,
            message=message,
            task=task,
            tags=tags,
            kind=kind,
            manifest=mid,
            conversation=result.conversation_id,
            metadata=metadata or {},
            stats=stats,
        )
        write_rows(batch, cp_id, packed, start.seq, task, tags)
        # (a restore's safety checkpoint is not what the request did: it says the tree was not
        # touched yet)
        requests.record(batch, ctx.request, **{"safety" if kind == SAFETY else "checkpoint": cp_id.hex()})
        if not start.indexed:
            with backend.read() as view:
                backfill_task_index(view, batch)
        if not start.paths_indexed:  # a store made before the index (or a repair cut short): once
            from snapstore.ops import pathlog

            with backend.read() as view:
                pathlog.rebuild(view, batch)
        put_path_rows(batch, start.seq, cp_id, result.changed)
    backend.sync()
    return cp_id, packed


def unchanged(start: Start, result: SnapshotResult, with_conversation: bool) -> bool:
    """Is the tree (and the conversation, if one was given) the parent's?"""
    parent = start.parent
    return (
        parent is not None
        and parent.manifest == result.manifest_id
        and (not with_conversation or parent.conversation == result.conversation_id)
    )


def reuse(ctx: StageContext, tree: Inputs, reads: Reads, records: Records) -> None:
    """Record no checkpoint (the parent is the tree), only what the stat cache learnt."""
    backend = ctx.backend
    if tree.stale:
        with backend.write() as batch:
            for path in tree.stale:
                batch.delete("statcache", path)
    if reads.inline_cache:  # files read inline (racy ones, re-read): their chunks, then entries
        with backend.write() as batch:
            for table, key, value in records.ops:
                batch.put_new(table, key, value)
            for key, value in reads.inline_cache.items():
                batch.put("statcache", key, value)
