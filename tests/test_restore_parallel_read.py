"""Restore reads its sources in a small thread pool: same bytes, same refusal of damage."""

from __future__ import annotations

import importlib

import pytest

from snapstore.errors import CorruptError
from snapstore.storage import entries, objects
from snapstore.testing import build_tree, read_tree

# (the package re-exports the function ``plan``: take the module itself)
plan = importlib.import_module("snapstore.ops.restore.plan")


def _two_versions(tree, store, n=20):
    build_tree(tree, {f"d/f{i:02d}.txt": b"version one of %d\n" % i * 50 for i in range(n)})
    a = store.snapshot("a")
    spec_a = read_tree(tree)
    build_tree(tree, {f"d/f{i:02d}.txt": b"version two of %d\n" % i * 60 for i in range(n)})
    store.snapshot("b")
    return a, spec_a


def test_sources_are_read_by_the_pool_and_restored_exactly(tree, store, monkeypatch):
    a, spec_a = _two_versions(tree, store)
    seen = []
    real = plan._read_ahead
    monkeypatch.setattr(plan, "_read_ahead", lambda *args: seen.append(real(*args)) or seen[-1])
    entries.clear_cache()
    store.restore(a.id)
    assert read_tree(tree) == spec_a
    assert len(seen) == 1 and len(seen[0]) == 20  # every source came from the pool
    assert not any(isinstance(v, CorruptError) for v in seen[0].values())


def test_a_damaged_source_read_by_the_pool_stops_the_restore_before_any_write(tree, store):
    a, _ = _two_versions(tree, store)
    before = read_tree(tree)
    victim = next(e for e in store.entries(a.id) if e.path == b"d/f13.txt")
    with store.backend.read() as view:
        cid = objects.leaf_ids(view.get, victim.ref)[0]
    with store.backend.write() as batch:
        batch.delete("chunks", cid)
    entries.clear_cache()
    with pytest.raises(CorruptError, match="f13.txt"):
        store.restore(a.id)
    assert read_tree(tree) == before
