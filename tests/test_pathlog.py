"""The ``paths`` index: ``log PATH`` through it gives exactly what comparing every pair of
consecutive checkpoints gives, across edits, deletes, re-adds, tasks, safety checkpoints,
prunes and deletes, and reads only the records around each version."""

from __future__ import annotations

import random

import pytest

from snapstore.errors import SnapstoreError, UsageError
from snapstore.ops import history as history_mod
from snapstore.ops import pathlog
from snapstore.records import checkpoint as checkpoint_mod
from snapstore.records.checkpoint import PATHS_INDEX_META
from snapstore.store import Store
from snapstore.testing import build_tree

PATHS = [b"a.txt", b"dir/b.txt", b"dir/c.txt", b"z.txt"]


def _by_pairs(store: Store, rel: bytes, task: str | None = None) -> list[tuple]:
    """The reference: every pair of consecutive listed checkpoints compared."""
    rows = list(reversed(store.checkpoints(task=task)))
    return [(v.checkpoint.id, v.status, v.added, v.removed) for v in history_mod.file_history(store, rel, rows)]


def _indexed(store: Store, rel: bytes, task: str | None = None, limit: int | None = None) -> list[tuple]:
    with store.backend.read() as view:
        assert pathlog.complete(view)
    return [(v.checkpoint.id, v.status, v.added, v.removed) for v in store.history(rel, task=task, limit=limit)]


def _step(rng: random.Random, root, store: Store, i: int) -> None:
    op = rng.random()
    path = rng.choice(PATHS).decode()
    target = root / path
    if op < 0.5:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"line {i}\n" * rng.randint(1, 4))
    elif op < 0.65 and target.exists():
        target.unlink()
    elif op < 0.72:
        (root / "noise.txt").write_text(f"noise {i}\n")  # a checkpoint that changes none of PATHS
    elif op < 0.8 and len(store.checkpoints()) > 2:
        store.restore(rng.choice(store.checkpoints()[1:]).id)  # makes a safety checkpoint too
        return
    elif op < 0.86 and len(store.checkpoints()) > 3:
        try:
            store.delete(rng.choice(store.checkpoints()[1:-1]).id)
        except UsageError:
            pass  # undo can reach it: kept
        return
    elif op < 0.9 and len(store.checkpoints()) > 6:
        store.prune(keep_last=rng.randint(3, 6))
        return
    elif op < 0.95 and len(store.checkpoints()) > 2:
        try:  # records a revert checkpoint (revert_record writes its own rows)
            store.revert(store.checkpoints()[0].id, conflicts="markers")
        except SnapstoreError:
            pass
        return
    store.snapshot(f"step {i}", task=rng.choice([None, "t1", "t2"]))


@pytest.mark.parametrize("seed", range(12))
def test_the_index_gives_what_comparing_every_pair_gives(tmp_path, seed):
    rng = random.Random(seed)
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n", "dir/b.txt": b"b\n"})
    store = Store.init(root)
    store.snapshot("first")
    for i in range(40):
        _step(rng, root, store, i)
        if i % 8 == 7:
            for rel in PATHS:
                assert _indexed(store, rel) == _by_pairs(store, rel), (i, rel)
                assert _indexed(store, rel, task="t1") == _by_pairs(store, rel, task="t1"), (i, rel)
                full = _by_pairs(store, rel)
                assert _indexed(store, rel, limit=2) == full[-2:], (i, rel)
    assert store.verify().ok
    store.close()


def test_log_reads_the_records_around_its_versions_not_the_whole_history(tmp_path, monkeypatch):
    root = tmp_path / "t"
    build_tree(root, {"often.txt": b"0\n", "rare.txt": b"r\n"})
    store = Store.init(root)
    for i in range(150):
        (root / "often.txt").write_text(f"{i}\n")
        if i in (40, 120):
            (root / "rare.txt").write_text(f"rare {i}\n")
        store.snapshot(f"s{i}")
    reads = {"n": 0}
    real = checkpoint_mod.parse_record

    def counting(*args, **kwargs):
        reads["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(pathlog, "parse_record", counting)

    def not_this_way(*args, **kwargs):
        raise AssertionError("history was read pair by pair")

    monkeypatch.setattr(history_mod, "file_history", not_this_way)
    versions = store.history("rare.txt")
    assert [v.status for v in versions] == ["A", "M", "M"]
    assert reads["n"] <= 8  # the oldest checkpoint and each version's pair, not 150 records
    store.close()


def test_an_index_cut_short_is_not_trusted_and_the_next_snapshot_rebuilds_it(tmp_path):
    """A store made before the index, or a prune killed between its transactions, lacks the
    meta key: log reads history the old way, and the next snapshot writes every row."""
    root = tmp_path / "t"
    build_tree(root, {"f.txt": b"1\n"})
    store = Store.init(root)
    for i in range(5):
        (root / "f.txt").write_text(f"{i}\n")
        store.snapshot(f"s{i}")
    expected = _by_pairs(store, b"f.txt")
    with store.backend.read() as view:
        keys = [k for k, _ in view.items("paths")]
    with store.backend.write() as batch:  # as an older version left it: no rows, no key
        for k in keys:
            batch.delete("paths", k)
        batch.delete("meta", PATHS_INDEX_META)
    assert [(v.checkpoint.id, v.status, v.added, v.removed) for v in store.history("f.txt")] == expected
    (root / "g.txt").write_text("new\n")
    store.snapshot("rebuilds")
    assert _indexed(store, b"f.txt") == expected
    with store.backend.read() as view:
        assert len(list(view.items("paths", prefix=pathlog.path_prefix(b"f.txt")))) == 4  # every change but the first
    store.close()


def test_verify_reports_a_path_row_that_names_no_logged_checkpoint(tmp_path):
    root = tmp_path / "t"
    build_tree(root, {"f.txt": b"1\n"})
    store = Store.init(root)
    store.snapshot("one")
    (root / "f.txt").write_text("2\n")
    store.snapshot("two")
    assert store.verify().ok
    with store.backend.write() as batch:  # a row for a sequence number the log does not hold
        batch.put("paths", checkpoint_mod.path_prefix(b"f.txt") + checkpoint_mod.seq_key(99), b"\x01" * 32)
    report = store.verify()
    assert not report.ok and any(p.kind == "paths" for p in report.problems)
    store.close()
