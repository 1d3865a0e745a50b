"""Format 2 conversations: appended messages inline, chains ended by full records that list them."""

from __future__ import annotations

import msgpack
import pytest

from snapstore.errors import CorruptError
from snapstore.records import conversation, conversation_delta
from snapstore.store import Store
from snapstore.testing import build_tree


def _grow(store: Store, steps: int, size: int = 300) -> list[tuple[str, list]]:
    messages: list = []
    out = []
    for i in range(steps):
        messages.append({"role": "user" if i % 2 else "assistant", "content": f"{i} " + "word " * (size // 5)})
        out.append((store.snapshot(f"s{i}", conversation=list(messages)).id, list(messages)))
    return out


def _records(store: Store) -> dict[bytes, dict]:
    with store.backend.read() as view:
        return {k: conversation.parse_record(k, v) for k, v in view.items("conversations")}


def test_each_message_is_stored_once_and_every_version_reads_back(tree, store):
    build_tree(tree, {"f": b"x"})
    history = _grow(store, 3 * conversation.MAX_DEPTH + 5)
    records = _records(store)
    assert all("delta" in r and not r["chunks"] for r in records.values())
    full = [r for r in records.values() if "parts" in r]
    assert len(full) == 3  # one per MAX_DEPTH steps, each listing the chain before it
    assert all(len(r["parts"]) == conversation.MAX_DEPTH + 1 for r in full)
    # every message's bytes are in exactly one record
    assert sum(r["total"] - r["count"] for r in records.values()) == len(history)
    for ref, messages in history[:: 7] + history[-3:]:
        assert store.conversation(ref) == messages
    with store.backend.read() as view:
        assert view.count("chunks") == 2  # the tree's one file and its manifest: no message chunks


def test_gc_keeps_every_record_a_kept_conversation_lists(tree, store):
    build_tree(tree, {"f": b"x"})
    history = _grow(store, 2 * conversation.MAX_DEPTH + 3)
    store.prune(keep_last=1)
    store.gc()
    ref, messages = history[-1]
    assert store.conversation(ref) == messages
    assert store.verify().ok
    assert len(_records(store)) == len(history)  # all still needed by the newest one


def test_a_big_step_is_stored_in_chunks_and_still_reads_back(tree, store):
    build_tree(tree, {"f": b"x"})
    small = _grow(store, 3)
    big = small[-1][1] + [{"role": "tool", "content": "y" * (conversation.INLINE_MAX + 10)}]
    cp = store.snapshot("big", conversation=big)
    assert store.conversation(cp.id) == big
    assert store.conversation(small[0][0]) == small[0][1]


@pytest.mark.parametrize(
    ("damage", "said"),
    [("parts not a chain", "not a chain"), ("parts loop", "twice"), ("window too big", "too large")],
)
def test_a_hostile_full_record_is_damage_not_a_crash(tree, store, damage, said):
    build_tree(tree, {"f": b"x"})
    history = _grow(store, conversation.MAX_DEPTH + 3)
    records = _records(store)
    fid, full = next((k, r) for k, r in records.items() if "parts" in r)
    if damage == "parts not a chain":
        full["parts"] = [full["parts"][0], *reversed(full["parts"][1:])]
    elif damage == "parts loop":
        # itself as the previous full record, then the delta that follows it: a consistent cycle
        after = next(k for k, r in records.items() if r["base"] == fid)
        full["parts"] = [fid, after]
    else:
        full["window"] = conversation_delta.WINDOW + 1
    row = [conversation_delta.FORM, *(full[k] for k in ("base", "count", "depth", "total", "window", "delta"))]
    with store.backend.write() as batch:
        batch.put("conversations", fid, msgpack.packb([*row, full["parts"]], use_bin_type=True))
    with pytest.raises(CorruptError, match=said):
        store.conversation(history[-1][0])
    assert any(p.kind == "conversation" for p in store.verify().problems)
