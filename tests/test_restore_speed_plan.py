"""Restore at git's speed, continued: planning from the manifest chunks that differ, and a
watching Store (the service) that keeps its tree state across a restore.

Counts go through seams (manifest decoding, snapshot walks, snapshot_read._open), never timings.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from platform_marks import needs_inotify
from restore_helpers import read_tree, write_tree
from test_restore_speed import _Opens, _spec

from snapstore.ops.restore import batch
from snapstore.store import Store
from snapstore.tree import statcache

# -- planning from the manifest chunks that differ ------------------------------------------------


def _big_tree(tree: Path, n: int = 600) -> None:
    write_tree(tree, {f"b/f{i:04d}.txt": b"%d\n" % i for i in range(n)} | {"a.txt": b"a\n", "c.txt": b"c\n"})


def test_restore_decodes_only_the_manifest_chunks_that_differ(tree: Path, store: Store, monkeypatch):
    from snapstore.ops import restore as restore_mod
    from snapstore.records import manifest

    _big_tree(tree, 2000)
    store.snapshot("A", tags=["A"])
    (tree / "b/f0300.txt").write_bytes(b"changed\n")
    store.snapshot("B")
    decoded: list[bytes] = []
    real = manifest._check

    def counting(raw):
        decoded.append(raw[0])
        return real(raw)

    def no_full_load(*args, **kwargs):
        raise AssertionError("a restore loaded a whole manifest")

    monkeypatch.setattr(manifest, "_check", counting)
    monkeypatch.setattr(restore_mod.manifest, "load", no_full_load)
    store.restore("A")
    assert (tree / "b/f0300.txt").read_bytes() == b"300\n"
    # Of the chunks that differ, only the records that differ are made entries: the target's
    # (the safety checkpoint's side is the Store's own encoding, in memory)
    assert decoded == [b"b/f0300.txt"]


def test_a_long_lived_store_plans_the_safety_side_from_its_encoding(tree: Path, store: Store, monkeypatch):
    """The safety checkpoint's manifest was just encoded by this Store (its codec holds every
    entry by chunk): none of its chunks is read back, only the target's that differ."""
    from snapstore.storage import objects

    _big_tree(tree, 2000)
    store.snapshot("A", tags=["A"])
    (tree / "b/f0300.txt").write_bytes(b"changed\n")
    (tree / "b/f1700.txt").unlink()
    b = store.snapshot("B")
    with store.backend.read() as view:
        safety_leaves = set(objects.leaf_ids(view.get, b.manifest))
        target_leaves = set(objects.leaf_ids(view.get, store.resolve("A").manifest))
    assert len(safety_leaves - target_leaves) >= 2  # two chunks differ on each side
    from snapstore.ops import restore as restore_mod

    loaded: list[bytes] = []
    planned: list[bool] = []
    real, real_plan = objects.load_chunk, restore_mod.plan

    def load_chunk(get, cid, *args, **kwargs):
        if not planned:  # (the record after the restore reads the safety's chunks for its deltas)
            loaded.append(cid)
        return real(get, cid, *args, **kwargs)

    monkeypatch.setattr(objects, "load_chunk", load_chunk)
    monkeypatch.setattr(restore_mod, "plan", lambda *a, **k: (planned.append(True), real_plan(*a, **k))[1])
    report = store.restore("A")
    assert report.safety.id == b.id  # the tree was B's: B is the safety checkpoint
    assert read_tree(tree)["b/f0300.txt"] == ("file", b"300\n", False)
    assert read_tree(tree)["b/f1700.txt"] == ("file", b"1700\n", False)
    assert not (safety_leaves - target_leaves) & set(loaded)  # no chunk only the safety's was read
    assert target_leaves - safety_leaves <= set(loaded)  # the target's that differ were
    store.undo()
    assert read_tree(tree)["b/f0300.txt"] == ("file", b"changed\n", False)
    assert "b/f1700.txt" not in read_tree(tree)


def _plant_over(store: Store, tree: Path, extra) -> str:
    """Plant a checkpoint: the tree's latest entries plus ``extra``."""
    from restore_helpers import plant_checkpoint

    from snapstore.records import manifest

    with store.backend.read() as view:
        entries = manifest.load(view.get, store.resolve("latest").manifest)
    return plant_checkpoint(store, [*entries.values(), extra])


#: Names that sort between "b" and "b/..." (the manifest's order): they push b's contents into
#: manifest chunks of their own, which the planted target shares with the tree.
_BETWEEN = {f"b.{i:04d}": b"%d\n" % i for i in range(400)}


@pytest.mark.parametrize("b_is", ["dir", "file"])
def test_an_entry_clashing_with_the_trees_shared_chunks_is_refused(tree: Path, store: Store, b_is: str):
    """A target whose new entry clashes with entries of manifest chunks it shares with the tree
    (a file b over b's contents, or b/x under the file b) is refused as unsafe before anything
    changes, not tried and rolled back."""
    from snapstore.errors import UnsafePathError
    from snapstore.records.manifest import FILE, Entry
    from snapstore.storage.objects import chunk_id

    ref_id = chunk_id(b"pwned\n")
    if b_is == "dir":
        write_tree(tree, _BETWEEN | {f"b/f{i}": b"%d" % i for i in range(5)})
        extra = Entry(b"b", FILE, 0o100644, 6, 0, ref_id)
    else:
        write_tree(tree, _BETWEEN | {"b": b"a file\n"})
        extra = Entry(b"b/x.txt", FILE, 0o100644, 6, 0, ref_id)
    store.snapshot("honest")
    ref = _plant_over(store, tree, extra)
    before = read_tree(tree)
    with pytest.raises(UnsafePathError, match="lies below b"):
        store.restore(ref)
    assert read_tree(tree) == before
    assert store.pending_restore() is None


# -- a watching Store keeps its tree state across a restore -------------------------------------


class _Walks:
    """Counts full walks of the tree by snapshots."""

    def __init__(self, monkeypatch) -> None:
        from snapstore.tree import scan

        self.n = 0
        real = scan.walk

        def counting(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(scan, "walk", counting)


@pytest.fixture
def watched(tree: Path, monkeypatch):
    pytest.importorskip("inotify_simple")
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)  # files this test just wrote count as settled
    write_tree(tree, _spec(24, b"A"))
    with Store.init(tree):
        pass
    s = Store.open(tree, watch=True)
    s.snapshot("A", tags=["A"])
    after = read_tree(tree)
    write_tree(tree, _spec(20, b"B"))  # rewrites only: the restore rewrites known files
    s.snapshot("B")
    try:
        yield s, after
    finally:
        s.close()


def test_a_watching_store_snapshots_after_a_restore_without_walking(tree: Path, watched, monkeypatch):
    store, after = watched
    store.restore("A")
    assert read_tree(tree) == after
    walks, opens = _Walks(monkeypatch), _Opens(monkeypatch)
    (tree / "d1/f05.txt").write_bytes(b"edited after the restore\n")
    cp = store.snapshot("after restore")
    assert (walks.n, opens.paths) == (0, [b"d1/f05.txt"])
    assert store.read_bytes(cp.id, "d1/f05.txt") == b"edited after the restore\n"
    assert store.read_bytes(cp.id, "d1/f01.txt") == after["d1/f01.txt"][1]
    # the next restore's safety checkpoint does not walk either
    store.restore("latest~1")
    assert walks.n == 0


def test_another_process_working_during_the_restore_is_patched_from_its_events(tree: Path, watched, monkeypatch):
    """Events the restore did not cause: the state is kept and the events given back, so the
    next snapshot lists the directories they name again (no walk) and sees the other write."""
    from snapstore.ops import restore as restore_mod

    store, after = watched

    def meddle(i: int) -> None:
        if i == 0:
            (tree / "d3/f03.txt").write_bytes(b"someone else, not restored\n")  # the plan keeps it

    monkeypatch.setattr(restore_mod, "step_hook", meddle)
    monkeypatch.setattr(batch, "POOL_MIN_FILES", 10**6)
    (tree / "d3/f03.txt").write_bytes(after["d3/f03.txt"][1])  # as A has it: not in the plan
    store.snapshot("d3/f03 as in A")
    store.restore("A")
    monkeypatch.setattr(restore_mod, "step_hook", None)
    walks = _Walks(monkeypatch)
    cp = store.snapshot("after restore")
    assert walks.n == 0
    assert store.read_bytes(cp.id, "d3/f03.txt") == b"someone else, not restored\n"


def test_a_restored_file_changed_before_the_restore_ends_is_read_again(tree: Path, watched, monkeypatch):
    """A file rewritten after its rename (its events look like the restore's own): the stat
    the restore recorded no longer matches, so the events go back to the watcher and the next
    snapshot reads the file (no walk)."""
    from snapstore.ops.restore import apply as apply_mod

    store, _ = watched
    real_rename = apply_mod.rename

    renamed: list[bytes] = []

    def meddle(tmp: bytes, name: bytes, dir_fd: int) -> None:
        real_rename(tmp, name, dir_fd)
        renamed.append(name)
        if renamed == [b"f00.txt"]:  # the first rename (path order): d0/f00.txt, rewritten at once
            (tree / "d0/f00.txt").write_bytes(b"rewritten during the restore\n")

    monkeypatch.setattr(apply_mod, "rename", meddle)
    store.restore("A")
    monkeypatch.setattr(apply_mod, "rename", real_rename)
    walks = _Walks(monkeypatch)
    cp = store.snapshot("after restore")
    assert walks.n == 0
    assert store.read_bytes(cp.id, "d0/f00.txt") == b"rewritten during the restore\n"


def test_a_watching_store_records_and_undoes_a_restore_exactly(tree: Path, watched):
    """Right after the restore (no edit in between) the snapshot and the undo's safety
    checkpoint hold the restored tree, not the checkpoint the state was last written for."""
    store, after = watched
    edited = read_tree(tree)
    store.restore("A")
    cp = store.snapshot("right after")
    assert store.read_bytes(cp.id, "d1/f01.txt") == after["d1/f01.txt"][1]
    store.restore("A")  # a no-op restore (the tree is A): its safety reuses "right after"
    store.undo()
    assert read_tree(tree) == after  # undoing the no-op keeps A
    store.undo()
    assert read_tree(tree) == after
    store.restore("latest~1")  # B, as edited
    assert read_tree(tree) == edited
    store.undo()
    assert read_tree(tree) == after


@needs_inotify
def test_the_record_after_a_restore_edits_the_kept_order_and_reads_back_exactly(tree: Path, watched, monkeypatch):
    """The record after a restore starts from the entries the restore patched (TreeState.carried):
    it edits the kept order at the restored paths, never sorts every entry again, and what it
    records is what a walk of the tree finds."""
    from snapstore.ops.snapshot import ordered

    store, after = watched
    calls = {"full": 0, "patched": 0}
    real_full, real_patched = ordered.full, ordered._patched

    def full(entries):
        calls["full"] += 1
        return real_full(entries)

    def patched(kept, entries, touched):
        calls["patched"] += 1
        return real_patched(kept, entries, touched)

    monkeypatch.setattr(ordered, "full", full)
    monkeypatch.setattr(ordered, "_patched", patched)
    report = store.restore("A")
    assert read_tree(tree) == after
    assert calls == {"full": 0, "patched": 1}  # the record after (the safety checkpoint: nothing touched)
    latest = store.checkpoints(include_safety=True)[0]  # the record after the restore
    assert latest.message.startswith("after restore")
    with Store.open(tree) as plain:  # a plain Store walks and sorts: no difference
        assert plain.diff(latest.id) == []
    assert report.safety is not None
    (tree / "d2/f02.txt").write_bytes(b"an edit after the restore\n")
    cp = store.snapshot("after")
    assert calls["full"] == 0
    assert cp.stats["files"] == sum(1 for v in read_tree(tree).values() if v[0] == "file")
    with Store.open(tree) as plain:
        assert plain.diff(cp.id) == []
