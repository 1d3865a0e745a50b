"""Compact conversation records (issue 40: a conversation store as agents leave it): each step's
messages compressed against the messages before them, in an array record; the records of older
stores still read, and maintenance and gc rewrite them in the compact form."""

from __future__ import annotations

import json
from contextlib import nullcontext

import msgpack
import pytest
import zstandard

from snapstore.errors import CorruptError
from snapstore.ops import maintenance_conversations
from snapstore.records import conversation, conversation_delta
from snapstore.store import Store
from snapstore.testing import build_tree
from tests.conversation_legacy import forms, grow, make_legacy


def _table_bytes(store: Store) -> int:
    """Keys and values of the conversations table."""
    with store.backend.read() as view:
        return sum(len(k) + len(v) for k, v in view.items("conversations"))


def read_back(store: Store, history: list, verify: bool = True) -> None:
    """Every checkpoint's conversation reads back as it was given (and the store verifies)."""
    for ref, messages in history:
        assert store.conversation(ref) == messages
    assert not verify or store.verify().ok


def _final_zstd(messages: list) -> int:
    return len(zstandard.ZstdCompressor(level=3).compress(json.dumps(messages).encode()))


def test_a_growing_chat_costs_about_its_compressed_size_in_records(tree, store):
    """60 steps of test-runner output: the records (keys included) take at most 2x the final
    conversation compressed whole (1.76x here); each step's messages compressed alone, in map
    records, took 3.2x."""
    build_tree(tree, {"f.txt": b"x\n"})
    history = grow(store, 60)
    assert forms(store) == {"compact": 60, "inline": 0, "chunks": 0}
    assert _table_bytes(store) <= 2 * _final_zstd(history[-1][1]), (_table_bytes(store), _final_zstd(history[-1][1]))
    read_back(store, history)


def test_a_rewound_chat_and_a_big_step_read_back(tree, store):
    build_tree(tree, {"f.txt": b"x\n"})
    history = grow(store, 10)
    cut = history[3][1] + [{"role": "user", "content": "try again " * 50}]
    again = store.snapshot("rewound", conversation=cut)
    big = cut + [{"role": "tool", "content": "y" * (conversation.INLINE_MAX + 10)}, {"role": "user", "content": "ok"}]
    after_big = store.snapshot("big", conversation=big)
    more = big + [{"role": "assistant", "content": "done " * 40}]
    last = store.snapshot("more", conversation=more)
    assert store.conversation(again.id) == cut
    assert store.conversation(after_big.id) == big
    assert store.conversation(last.id) == more
    assert store.conversation(history[-1][0]) == history[-1][1]
    assert store.verify().ok


def test_old_stores_read_and_maintenance_rewrites_their_inline_records(tree, store):
    build_tree(tree, {"f.txt": b"x\n"})
    history = grow(store, 40)  # past MAX_DEPTH: a full record listing its parts
    assert make_legacy(store) == 40
    legacy_bytes = _table_bytes(store)
    assert forms(store)["inline"] == 40
    read_back(store, history, verify=False)
    report = store.maintain(full=True, min_packs=1)
    assert report is not None and report.conversations_gathered == 40
    assert forms(store) == {"compact": 40, "inline": 0, "chunks": 0}
    assert _table_bytes(store) < 0.75 * legacy_bytes
    read_back(store, history)


def test_gc_rewrites_records_that_name_chunks_and_sweeps_the_chunks(tree, store):
    build_tree(tree, {"f.txt": b"x\n"})
    history = grow(store, 12)
    make_legacy(store, chunked=5)
    assert forms(store) == {"compact": 0, "inline": 7, "chunks": 5}
    with store.backend.read() as view:
        chunks_before = view.count("chunks")
    report = store.gc()
    assert report.conversations_gathered == 12
    assert report.chunks_removed == 5
    with store.backend.read() as view:
        assert view.count("chunks") == chunks_before - 5
    assert forms(store) == {"compact": 12, "inline": 0, "chunks": 0}
    read_back(store, history)
    assert store.gc().conversations_gathered == 0


def test_maintenance_keeps_a_record_that_changed_meanwhile(tree, store):
    """A step writes only the records whose value is still the one it compressed."""
    build_tree(tree, {"f.txt": b"x\n"})
    grow(store, 5)
    make_legacy(store)
    rids = maintenance_conversations.legacy(store.backend)
    planned = list(maintenance_conversations.rewrites(store.backend, rids, 3, False))
    assert len(planned) == 5
    rid, old, _ = planned[0]
    changed = old + b"\x00"  # (any other value: a record rewritten meanwhile)
    with store.backend.write() as batch:
        batch.put("conversations", rid, changed)
    assert maintenance_conversations._write(store.backend, planned, nullcontext) == 4
    with store.backend.read() as view:
        assert view.get("conversations", rid) == changed


@pytest.mark.parametrize("damage", ["window past the start", "frame claims too much", "frame damaged"])
def test_a_damaged_compact_record_is_damage_not_a_crash(tree, store, damage):
    build_tree(tree, {"f.txt": b"x\n"})
    history = grow(store, 6)
    with store.backend.read() as view:
        rid = next(k for k, v in view.items("conversations") if msgpack.unpackb(v)[2] == 3)  # count 3
        row = msgpack.unpackb(view.get("conversations", rid))
    if damage == "window past the start":
        row[5] = conversation_delta.WINDOW
    elif damage == "frame claims too much":
        row[6] = bytes((1,)) + zstandard.ZstdCompressor().compress(b"a" * (conversation.INLINE_MAX + 1))
    else:
        frame = bytearray(row[6])
        frame[len(frame) // 2] ^= 0x55
        row[6] = bytes(frame)
    with store.backend.write() as batch:
        batch.put("conversations", rid, msgpack.packb(row, use_bin_type=True))
    with pytest.raises(CorruptError):
        store.conversation(history[-1][0])
    assert any(p.kind == "conversation" for p in store.verify().problems)
    assert store.conversation(history[2][0]) == history[2][1]  # the records before it still read


def test_a_map_record_never_carries_compact_fields(tree, store):
    build_tree(tree, {"f.txt": b"x\n"})
    grow(store, 2)
    with store.backend.read() as view:
        rid, value = next(iter(view.items("conversations")))
    fields = conversation.parse_record(rid, value)
    with pytest.raises(CorruptError):
        conversation.parse_record(rid, msgpack.packb(fields, use_bin_type=True))


def test_a_chunk_gc_stops_naming_survives_when_a_file_holds_the_same_bytes(tree, store):
    """A record rewritten by gc no longer names its chunk; a live file with the same bytes
    (the same chunk id) keeps it."""
    build_tree(tree, {"f.txt": b"x\n"})
    history = grow(store, 1)
    make_legacy(store, chunked=1)
    with store.backend.read() as view:
        (rid, value), = list(view.items("conversations"))
        plain = b"".join(conversation.own_pieces(view.get, rid, conversation.parse_record(rid, value)))
    build_tree(tree, {"f.txt": b"x\n", "same.bin": plain})
    cp = store.snapshot("file with the record's bytes")
    report = store.gc()
    assert report.conversations_gathered == 1 and report.chunks_removed == 0
    assert store.read_bytes(cp.id, "same.bin") == plain
    assert store.conversation(history[0][0]) == history[0][1]
    assert store.verify().ok


def test_a_format_1_store_keeps_its_map_records_through_gc_and_maintenance(tree):
    from tests.test_upgrade import make_v1_store

    store, _ = make_v1_store(tree, steps=3)
    try:
        before = forms(store)
        assert before["compact"] == 0 and sum(before.values()) == 3
        assert store.gc().conversations_gathered == 0
        store.maintain_all()
        assert forms(store) == before
        assert store.verify().ok
    finally:
        store.close()


def test_a_format_2_store_keeps_the_records_format_2_readers_read_until_upgrade(tree):
    """Format 2 readers take a compact record for damage: a format-2 store is written, kept
    and gathered in the map form; `snapstore upgrade` makes it format 3 and its records compact."""
    from tests.helpers import run_snapstore

    build_tree(tree, {"a.txt": b"a\n"})
    store = Store.init(tree)
    with store.backend.write() as batch:
        batch.put("meta", b"format", b"2")
    try:
        history = grow(store, 6)
        before = forms(store)
        assert before["compact"] == 0 and sum(before.values()) == 6, before
        store.maintain_all()
        assert store.gc().conversations_gathered == 0
        assert forms(store)["compact"] == 0
        read_back(store, history)
    finally:
        store.close()
    done = run_snapstore("upgrade", cwd=tree)
    assert done.returncode == 0, done.stderr
    assert b"from format 2 to 3" in done.stdout and b"6 conversation records compact" in done.stdout, done.stdout
    with Store.open(tree) as store:
        assert store.format_version == 3
        assert forms(store) == {**{k: 0 for k in before}, "compact": 6}
        read_back(store, history)
