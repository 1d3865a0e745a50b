"""The tasks index: `latest@TASK` and friends read only that task's checkpoints."""

from __future__ import annotations

from snapstore.records.checkpoint import TASK_INDEX_META
from snapstore.records.history import History
from snapstore.testing import build_tree


class CountingView:
    """A read view that counts the checkpoint records read through it."""

    def __init__(self, view):
        self.view, self.records = view, 0

    def get(self, table, key):
        self.records += table == "checkpoints"
        return self.view.get(table, key)

    def items(self, table, **kw):
        return self.view.items(table, **kw)

    def count(self, table):
        return self.view.count(table)


def _history(tree, store, n_other: int):
    build_tree(tree, {"f": b"0"})
    fix = [store.snapshot("fix 1", task="fix").id]
    for i in range(n_other):
        build_tree(tree, {"f": b"other %d" % i})
        store.snapshot(f"other {i}", task="other")
    build_tree(tree, {"f": b"fix 2"})
    fix.append(store.snapshot("fix 2", task="fix").id)
    for i in range(n_other):
        build_tree(tree, {"g": b"more %d" % i})
        store.snapshot(f"more {i}")
    return fix


def _resolve(store, ref):
    with store.backend.read() as view:
        counting = CountingView(view)
        found = History(counting).resolve(ref)
        return found.id, counting.records


def test_task_references_read_only_that_tasks_records(tree, store):
    fix = _history(tree, store, 150)
    assert _resolve(store, "latest@fix") == (fix[1], 1)
    assert _resolve(store, "latest~1@fix") == (fix[0], 2)
    ref, reads = _resolve(store, ":/fix 1@fix")
    assert ref == fix[0] and reads == 2
    assert store.resolve("latest@fix").id == fix[1]  # and through the facade


def test_a_store_made_before_the_index_resolves_by_scanning_then_is_backfilled(tree, store):
    fix = _history(tree, store, 20)
    with store.backend.write() as batch:  # what a store written before the index looks like
        batch.delete("meta", TASK_INDEX_META)
        with store.backend.read() as view:
            for key, _ in view.items("tasks"):
                batch.delete("tasks", key)
    ref, reads = _resolve(store, "latest@fix")
    assert ref == fix[1] and reads > 20  # correct, by the scan of the log
    build_tree(tree, {"h": b"next"})
    store.snapshot("next")  # a writer backfills the index once
    assert _resolve(store, "latest~1@fix") == (fix[0], 2)


def test_deleting_a_checkpoint_removes_its_index_row(tree, store):
    fix = _history(tree, store, 5)
    store.delete(fix[1])
    with store.backend.read() as view:
        assert fix[1] not in {cid.hex() for _, cid in view.items("tasks")}
    assert _resolve(store, "latest@fix") == (fix[0], 1)


def test_a_very_long_task_name_is_indexed_by_its_hash(tree, store):
    name = "t" * 900
    build_tree(tree, {"f": b"1"})
    a = store.snapshot("a", task=name)
    build_tree(tree, {"f": b"2"})
    store.snapshot("b", task=name + "x")
    assert _resolve(store, f"latest@{name}") == (a.id, 1)


def test_verify_reports_an_index_row_that_names_another_tasks_checkpoint(tree, store):
    fix = _history(tree, store, 3)
    other = store.resolve("latest@other").id
    with store.backend.write() as batch:
        from snapstore.records.checkpoint import task_key

        batch.put("tasks", task_key("fix", 999), bytes.fromhex(other))
    problems = store.verify().problems
    assert [p.kind for p in problems] == ["tasks"]
    assert fix
