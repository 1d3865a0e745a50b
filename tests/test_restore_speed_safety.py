"""A watching Store's restore does no work per path of the tree beyond the ones it changes.

The safety checkpoint hands the restore the tree state's own map of walk records and the
manifest memo's entries (no record made again, no dict of every entry), and the target is the
tree's entries with the differing ones in their place (:class:`TargetView`, no copy).  Counts
go through seams, never timings.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from restore_helpers import read_tree, write_tree

from snapstore.ops.restore.plan import TargetView
from snapstore.ops.snapshot import walk
from snapstore.records.manifest import FILE, Entry
from snapstore.store import Store
from snapstore.tree import packed, statcache

FILES = 1500


def _spec(tag: bytes) -> dict[str, object]:
    return {f"d{i % 30}/f{i:04d}.txt": b"%d %s\n" % (i, tag) for i in range(FILES)}


@pytest.fixture(params=["dict", "packed"])
def watched(tree: Path, monkeypatch, request):  # type: ignore[no-untyped-def]
    pytest.importorskip("inotify_simple")
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)
    if request.param == "packed":  # (the entries kept packed, as on a large tree)
        monkeypatch.setattr(walk, "PACK_ENTRIES_FROM", 0)
    write_tree(tree, _spec(b"A"))
    with Store.init(tree):
        pass
    s = Store.open(tree, watch=True)
    s.snapshot("A", tags=["A"])
    first = read_tree(tree)
    for i in range(0, 40):
        (tree / f"d{i % 30}/f{i:04d}.txt").write_bytes(b"B %d\n" % i)
    s.snapshot("B")
    try:
        yield s, first
    finally:
        s.close()


def test_a_watching_restore_makes_no_walk_record_of_every_path_again(tree: Path, watched, monkeypatch):
    store, first = watched
    made: list[bytes] = []
    real = packed.unpack

    def counting(path: bytes, value: object) -> object:
        made.append(path)
        return real(path, value)  # type: ignore[arg-type]

    monkeypatch.setattr(packed, "unpack", counting)
    store.restore("A")
    assert read_tree(tree) == first
    # The 40 paths the restore rewrites (each looked up a few times), not the 1,500 of the tree.
    assert 0 < len(made) < 400, len(made)
    assert set(made) <= {f"d{i % 30}/f{i:04d}.txt".encode() for i in range(40)}


def test_the_safety_side_is_the_snapshots_own_entries(tree: Path, watched, monkeypatch):
    from snapstore.ops import restore as restore_mod

    store, first = watched
    seen: list[object] = []
    real = restore_mod.plan

    def spying(current, target, *args):  # type: ignore[no-untyped-def]
        seen.append(current is store.context.manifest_memo.entries)
        seen.append(isinstance(target, TargetView))
        return real(current, target, *args)

    monkeypatch.setattr(restore_mod, "plan", spying)
    store.restore("A")
    assert read_tree(tree) == first
    assert seen == [True, True]


def _entry(p: bytes, tag: int) -> Entry:
    return Entry(p, FILE, 0o644, tag, tag, bytes([tag % 256]) * 32)


@pytest.mark.parametrize("seed", range(20))
def test_a_target_view_is_the_dict_it_stands_for(seed: int):
    rng = random.Random(seed)
    paths = [b"p%03d" % i for i in range(60)]
    base = {p: _entry(p, 1) for p in rng.sample(paths, 40)}
    old = {p: base[p] for p in rng.sample(sorted(base), 10)}
    new = {p: _entry(p, 2) for p in rng.sample(paths, 12)}
    # (difference's contract: a path in both old and new changed; one in old only is gone)
    expected = {p: e for p, e in base.items() if p not in old} | new
    view = TargetView(base, old, new)
    assert dict(view.items()) == expected
    assert len(view) == len(expected)
    assert sorted(view) == sorted(expected)
    for p in paths:
        assert (p in view) == (p in expected)
        assert view.get(p) == expected.get(p)


class _NoPass(dict):  # type: ignore[type-arg]
    """Walk records that refuse a pass over all of them (lookups only)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise AssertionError("a pass over every walk record")


def test_ignore_checks_of_steps_on_paths_the_scan_saw_make_no_pass_over_every_record(tmp_path: Path):
    from snapstore.ops.restore.plan import Step, skip_ignored
    from snapstore.tree.scan import Found, Stat

    found = _NoPass({
        p: Found(p, FILE, Stat(0o100644, 1, 1, 1, 1), b"") for p in (b"a/b/c.txt", b"a/d.txt", b"e.txt")
    })
    steps = [Step("write", b"a/b/c.txt"), Step("delete", b"a/d.txt"), Step("write", b"e.txt")]
    assert skip_ignored(bytes(tmp_path), steps, found, lambda _w: None) == steps
