"""Stores as snapstore wrote them before the compact conversation record: every record turned
back into the map form (``inline``: its messages compressed alone), or into the form a full gc
of those days left (``chunks``: one chunk of its messages in a pack of its own)."""

from __future__ import annotations

import json
import random
from typing import Any

import msgpack

from snapstore.records import conversation, conversation_delta
from snapstore.storage import objects, packs
from snapstore.store import Store


def grow(store: Store, steps: int, seed: int = 5) -> list[tuple[str, list[Any]]]:
    """``steps`` checkpoints of a growing chat (test-runner output, one message a step);
    ``(checkpoint id, its messages)`` of each."""
    rng = random.Random(seed)
    tests = [f"tests/test_{w}.py::test_{v}" for w in ("store", "gc", "diff") for v in "abcde"]
    messages: list[Any] = []
    out = []
    for n in range(steps):
        lines = [f"{rng.choice(tests)} {'PASSED' if rng.random() < 0.9 else 'FAILED'}" for _ in range(rng.randint(15, 80))]
        messages.append({"role": "tool" if n % 2 else "assistant", "content": "\n".join(lines)})
        out.append((store.snapshot(f"s{n}", conversation=list(messages)).id, json.loads(json.dumps(messages))))
    return out


def make_legacy(store: Store, *, chunked: int = 0) -> int:
    """Rewrite every compact record in the map form; the first ``chunked`` of them (oldest
    first) as a record naming one chunk, the others ``inline``.  How many were rewritten."""
    rows: dict[bytes, bytes] = {}
    chunk_ops: list[tuple[str, bytes, bytes]] = []
    with store.backend.read() as view:
        heads = [cp.conversation for cp in store.checkpoints(include_safety=True) if cp.conversation]
        for head in heads:
            before = b""
            for rid, record in conversation.segments(view.get, head):
                own = b"".join(conversation.own_pieces(view.get, rid, record, before))
                before = (before + own)[-conversation_delta.WINDOW :]
                if rid in rows or "delta" not in record:
                    continue
                fields: dict[str, Any] = {k: record[k] for k in ("base", "count", "depth", "total")}
                if len(rows) < chunked:
                    cid = objects.chunk_id(own)
                    fields["chunks"] = [[cid, len(own), record["total"] - record["count"]]]
                    chunk_ops += packs.pack_ops(packs.solid_frames([(cid, own)], 3))
                else:
                    fields["chunks"] = []
                    fields["inline"] = objects.encode_chunk(own, 3)
                    fields["inline_size"] = len(own)
                if "parts" in record:
                    fields["parts"] = record["parts"]
                rows[rid] = msgpack.packb(fields, use_bin_type=True)
    with store.backend.write() as batch:
        for table, key, value in chunk_ops:
            batch.put(table, key, value)
        for rid, value in rows.items():
            batch.put("conversations", rid, value)
    return len(rows)


def forms(store: Store) -> dict[str, int]:
    """How many records of each form the store holds: compact, inline, chunks."""
    out = {"compact": 0, "inline": 0, "chunks": 0}
    with store.backend.read() as view:
        for _, value in view.items("conversations"):
            r = msgpack.unpackb(value)
            out["compact" if isinstance(r, list) else "inline" if "inline" in r else "chunks"] += 1
    return out
