"""A conversation that grows costs only its new messages (issue 24 req 2): a long-lived Store
keeps the last one it wrote per task (records.conversation.Memo); what it stores is always the
conversation it was given, also when an earlier message is changed in place, when the
conversation shrinks, and when tasks interleave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from snapstore.records import conversation
from snapstore.store import Store


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many messages each call of encode_messages encoded."""
    calls: list[int] = []
    real = conversation.encode_messages

    def counting(messages: Any, warnings: Any = None, first: int = 0) -> list[bytes]:
        calls.append(len(messages))
        return real(messages, warnings, first)

    monkeypatch.setattr(conversation, "encode_messages", counting)
    return calls


def test_each_checkpoint_encodes_only_the_new_messages(tmp_path: Path, counted: list[int]):
    (tmp_path / "a.txt").write_text("a")
    messages: list[Any] = []
    with Store.init(tmp_path) as store:
        for step in range(300):
            messages.append({"role": "user" if step % 2 else "assistant", "content": f"message {step} " * 20, "n": step})
            counted.clear()
            cp = store.snapshot(f"step {step}", task="t", conversation=messages)
            assert sum(counted) == 1, (step, counted)  # one new message, encoded once
            if step % 50 == 0 or step == 299:
                assert store.conversation(cp.id) == messages
    with Store.open(tmp_path) as store:  # and what was stored reads back from another Store
        assert store.conversation("latest") == messages


def test_a_message_changed_in_place_is_seen(tmp_path: Path, counted: list[int]):
    (tmp_path / "a.txt").write_text("a")
    messages: list[Any] = [{"role": "user", "content": f"m{i}"} for i in range(20)]
    with Store.init(tmp_path) as store:
        store.snapshot("one", task="t", conversation=messages)
        messages[3]["content"] = "edited afterwards"  # the agent rewrites an earlier message
        messages.append({"role": "user", "content": "new"})
        counted.clear()
        cp = store.snapshot("two", task="t", conversation=messages)
        assert sum(counted) == len(messages)  # the memo could not vouch: encoded in full
        assert store.conversation(cp.id) == messages
        # A shorter conversation (a rewind), then growth again.
        del messages[10:]
        cp = store.snapshot("three", task="t", conversation=messages)
        assert store.conversation(cp.id) == messages
        messages.append({"role": "assistant", "content": "after the rewind"})
        counted.clear()
        cp = store.snapshot("four", task="t", conversation=messages)
        assert sum(counted) == 1 and store.conversation(cp.id) == messages


def test_interleaved_tasks_each_keep_their_own(tmp_path: Path, counted: list[int]):
    (tmp_path / "a.txt").write_text("a")
    convs: dict[str, list[Any]] = {"a": [], "b": [], "c": []}
    with Store.init(tmp_path) as store:
        for step in range(30):
            for task, messages in convs.items():
                messages.append({"task": task, "step": step, "text": "\u00e9\u2603" * step})
                counted.clear()
                cp = store.snapshot(f"{task}{step}", task=task, conversation=messages)
                assert sum(counted) == 1
                assert store.conversation(cp.id) == messages
