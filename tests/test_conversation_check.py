"""verify checks a session's conversations in O(messages), not O(checkpoints x messages): each
conversation is checked from the newest record of one already checked (the same hash up to it),
and damage is still found in every conversation that passes through it."""

from __future__ import annotations

import msgpack
import pytest

from snapstore.errors import CorruptError
from snapstore.records import conversation
from snapstore.records.conversation_check import Checker, order
from snapstore.store import Store
from snapstore.testing import build_tree
from tests.conversation_legacy import grow, make_legacy


def _session(store: Store, tree, steps: int) -> list[tuple[str, list]]:
    """Two interleaved tasks and a rewind: lineages that share prefixes and branch."""
    build_tree(tree, {"f.txt": b"x\n"})
    history = grow(store, steps)
    other: list = []
    for n in range(steps // 3):
        other.append({"role": "user", "content": f"the other task's step {n}"})
        history.append((store.snapshot(f"o{n}", task="other", conversation=list(other)).id, list(other)))
    cut = history[steps // 2][1][:-1] + [{"role": "user", "content": "rewound, then asked again"}]
    history.append((store.snapshot("rewound", conversation=cut).id, cut))
    return history


@pytest.fixture
def counted(monkeypatch):
    """How many record pieces are decoded (each step's messages are one piece), and how many
    records are parsed."""
    calls = [0, 0]
    decode, parse = conversation.decode_pieces, conversation.parse_record

    def decoding(cid, chunks):
        calls[0] += 1
        return decode(cid, chunks)

    def parsing(cid, value):
        calls[1] += 1
        return parse(cid, value)

    monkeypatch.setattr(conversation, "decode_pieces", decoding)
    monkeypatch.setattr(conversation, "parse_record", parsing)
    return calls


def test_every_conversation_checks_to_its_own_length(tree, store):
    history = _session(store, tree, 40)
    with store.backend.read() as view:
        checker = Checker(view.get)
        heads = {store.resolve(ref).conversation: messages for ref, messages in history}
        for cid in order(view.get, heads):
            assert checker.check(cid) == len(heads[cid]) == len(conversation.read(view.get, cid))
    assert store.verify().ok


def test_verify_decodes_each_step_about_once(tree, store, counted):
    steps = 120
    _session(store, tree, steps)
    counted[:] = [0, 0]
    assert store.verify().ok
    # Every conversation read from its start: ~steps^2 / 2 pieces and records (7,000 here).
    assert counted[0] <= 3 * steps, counted
    assert counted[1] <= 6 * steps, counted


def test_verify_of_older_map_records_is_as_cheap(tree, store, counted):
    steps = 60
    _session(store, tree, steps)
    make_legacy(store, chunked=3)
    counted[:] = [0, 0]
    assert store.verify().ok
    assert counted[0] <= 3 * steps and counted[1] <= 6 * steps, counted


def test_a_damaged_record_is_reported_for_every_checkpoint_through_it(tree, store):
    history = _session(store, tree, 30)
    victim = store.resolve(history[10][0]).conversation
    with store.backend.read() as view:
        row = msgpack.unpackb(view.get("conversations", victim))
    frame = bytearray(row[6])
    frame[len(frame) // 2] ^= 0x55
    row[6] = bytes(frame)
    with store.backend.write() as batch:
        batch.put("conversations", victim, msgpack.packb(row, use_bin_type=True))
    damaged = set()
    for ref, _ in history:
        try:
            store.conversation(ref)
        except CorruptError:
            damaged.add(store.resolve(ref).id)
    problems = [p for p in store.verify().problems if p.kind == "conversation"]
    assert {p.checkpoint for p in problems} == damaged
    assert len(damaged) >= 20  # the damaged step and every later one of its task (and the rewind)


def test_a_conversation_that_does_not_match_its_id_is_found_even_after_its_prefix(tree, store):
    """A record whose messages decode and count right but differ (another message, the same
    length): its conversation's id does not match, and neither does any conversation after it."""
    history = _session(store, tree, 12)
    victim = store.resolve(history[6][0]).conversation
    with store.backend.read() as view:
        value = view.get("conversations", victim)
        row = msgpack.unpackb(value)
        base = row[1]
        before = conversation.read(view.get, base)
    assert before == history[5][1]
    changed = [*before, {"role": "tool", "content": "X" * len(str(history[6][1][-1]["content"]))}]
    fake_id, fake = conversation.write(changed, lambda *a: None, base=(base, len(before), 1))
    assert fake is not None
    with store.backend.write() as batch:
        batch.put("conversations", victim, fake)
    problems = {p.checkpoint for p in store.verify().problems if p.kind == "conversation"}
    assert store.resolve(history[6][0]).id in problems and store.resolve(history[11][0]).id in problems
    assert store.resolve(history[5][0]).id not in problems
