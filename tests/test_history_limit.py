"""`log PATH --limit N`: the newest N versions, reading history backwards only that far."""

from __future__ import annotations

import random

from snapstore.ops.history import newest_versions
from snapstore.records.history import History
from snapstore.testing import build_tree


def _key(v):
    return (v.checkpoint.id, v.status, v.entry, v.added, v.removed, v.binary)


def test_limited_history_equals_the_tail_of_the_whole_history(tree, store):
    rng = random.Random(4)
    present = False
    for i in range(40):
        r = rng.random()
        if r < 0.35:
            build_tree(tree, {"f.txt": b"line %d\n" % i * rng.randint(1, 4)})
            present = True
        elif r < 0.45 and present:
            (tree / "f.txt").unlink()
            present = False
        elif r < 0.55 and present:
            (tree / "f.txt").chmod(0o600 if i % 2 else 0o644)
        else:
            build_tree(tree, {"other.txt": b"%d\n" % i})  # f.txt unchanged
        store.snapshot(f"s{i}", task="a" if i % 3 else "b")
    for task in (None, "a"):
        whole = [_key(v) for v in store.history("f.txt", task=task)]
        assert len(whole) > 5
        for k in (1, 2, 5, len(whole), len(whole) + 3):
            assert [_key(v) for v in store.history("f.txt", task=task, limit=k)] == whole[-k:], (task, k)


def test_it_reads_only_as_far_back_as_the_versions_it_returns(tree, store):
    build_tree(tree, {"f.txt": b"v0\n"})
    for i in range(150):
        build_tree(tree, {"other.txt": b"%d\n" % i})
        store.snapshot(f"other {i}")
    for i in range(3):
        build_tree(tree, {"f.txt": b"v%d\n" % (i + 1)})
        store.snapshot(f"edit {i}")
    consumed = []
    with store.backend.read() as view:

        def counted():
            for cp in History(view).newest():
                consumed.append(cp)
                yield cp

        versions = newest_versions(view.get, b"f.txt", counted(), 2)
    assert [v.checkpoint.message for v in versions] == ["edit 1", "edit 2"]
    assert len(consumed) <= 4
