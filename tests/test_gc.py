"""gc: mark and sweep, the stat cache, compaction, reopening a swapped file, random sequences."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import pytest
from helpers import assert_one_line_error, subprocess_env
from hypothesis import given, settings
from hypothesis import strategies as st

from snapstore.errors import LockedError
from snapstore.storage import lmdb_generations
from snapstore.store import Store
from snapstore.testing import random_bytes
from snapstore.tree import statcache


def write(root, name: str, data: bytes) -> None:
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def tables(store) -> dict[str, dict[bytes, bytes]]:
    from snapstore.storage.backend import TABLES

    with store.backend.read() as view:
        return {t: dict(view.items(t)) for t in TABLES}


def assert_readable(store, expected: dict[str, dict[str, bytes]]) -> None:
    """Every surviving checkpoint gives back exactly the files it was taken with."""
    alive = {c.id for c in store.checkpoints(include_safety=True)}
    for cid, files in expected.items():
        if cid not in alive:
            continue
        assert {os.fsdecode(e.path) for e in store.entries(cid) if e.is_file} == set(files)
        for name, data in files.items():
            assert store.read_bytes(cid, name) == data


def snap(store, root, message: str, files: dict[str, bytes], expected, **kw):
    for name, data in files.items():
        write(root, name, data)
    cp = store.snapshot(message, **kw)
    current = {}
    for dirpath, _, names in os.walk(root):
        if ".snapstore" in dirpath:
            continue
        for n in names:
            full = os.path.join(dirpath, n)
            with open(full, "rb") as f:
                current[os.path.relpath(full, root)] = f.read()
    expected[cp.id] = current
    return cp


def test_gc_removes_only_what_no_checkpoint_reaches(tree, store):
    expected: dict = {}
    a = snap(store, tree, "a", {"big": random_bytes(300_000, 1), "small": b"one"}, expected)
    snap(store, tree, "b", {"big": random_bytes(300_000, 2), "small": b"two"}, expected)
    dry = store.gc(dry_run=True)
    assert dry.chunks_removed == 0  # nothing is garbage yet
    store.delete(a.id)
    report = store.gc()
    assert report.chunks_removed > 0
    assert report.bytes_removed >= 300_000 + 3  # the old big file and the old small one
    assert report.streams_removed >= 1  # big's index tree record
    assert store.verify().ok
    assert_readable(store, expected)
    assert store.gc().chunks_removed == 0  # idempotent


def test_gc_dry_run_changes_nothing(tree, store):
    expected: dict = {}
    a = snap(store, tree, "a", {"x": random_bytes(100_000, 3)}, expected)
    snap(store, tree, "b", {"x": random_bytes(100_000, 4)}, expected)
    store.delete(a.id)
    before = tables(store)
    report = store.gc(dry_run=True, compact=True)
    assert report.chunks_removed > 0 and report.dry_run and not report.compacted
    assert tables(store) == before


def test_gc_drops_statcache_entries_of_removed_streams(tree, store, monkeypatch):
    """A later snapshot must not reuse a cached stream id whose chunks gc removed."""
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)  # so the cache is trusted
    content = random_bytes(200_000, 5)
    write(tree, "keep.bin", content)
    time.sleep(0.05)
    only = store.snapshot("only")
    # Delete the only checkpoint: every stream is garbage, including the one the cache names.
    store.delete(only.id)
    assert tables(store)["statcache"]
    report = store.gc()
    assert report.statcache_removed == 1
    assert tables(store)["statcache"] == {}
    cp = store.snapshot("again")  # the file is unchanged on disk: only the cache could skip it
    assert store.read_bytes(cp.id, "keep.bin") == content
    assert store.verify().ok


def test_gc_keeps_statcache_entries_of_live_streams(tree, store, monkeypatch):
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)
    write(tree, "a", random_bytes(50_000, 6))
    time.sleep(0.05)
    store.snapshot("one")
    report = store.gc()
    assert report.statcache_removed == 0 and report.chunks_removed == 0
    assert len(tables(store)["statcache"]) == 1


def test_gc_marks_conversations_and_their_bases(tree, store):
    write(tree, "f", b"x")
    msgs = [{"role": "user", "content": "m" * 600 + str(i)} for i in range(6)]
    a = store.snapshot("a", conversation=msgs[:3])
    b = store.snapshot("b", conversation=msgs)  # may be stored as a delta on a's
    store.delete(a.id)
    store.gc()
    assert store.verify().ok
    assert store.conversation(b.id) == msgs


def test_compact_after_deleting_everything_returns_to_near_empty_size(tmp_path):
    empty_root = tmp_path / "empty"
    empty_root.mkdir()
    with Store.init(empty_root) as empty:
        empty.snapshot("nothing")
        empty_size = empty.backend.disk_size()
    root = tmp_path / "tree"
    root.mkdir()
    with Store.init(root) as store:
        for i in range(12):
            write(root, f"f{i % 4}", random_bytes(400_000, i))
            store.snapshot(f"s{i}", conversation=[{"i": i, "text": "x" * 2000}])
        for c in store.checkpoints(include_safety=True):
            store.delete(c.id)
        grown = store.backend.disk_size()  # deleting records may itself grow the file a little
        report = store.gc(compact=True)
        assert report.compacted
        assert report.bytes_removed > 12 * 400_000 * 0.9 / 3  # at least the 4 last versions
        assert report.size_before == grown
        assert report.size_after == store.backend.disk_size()
        assert report.size_after <= empty_size + 64 * 1024, (empty_size, grown, report.size_after)
        assert report.disk_freed == grown - report.size_after
        current = lmdb_generations.read_current(store.store_dir)[1]
        assert [e for e in os.listdir(store.store_dir) if e.startswith("gen-")] == [current]
        assert store.verify().ok
        # The store works after compaction: write, read, verify, compact again.
        write(root, "new", b"after compaction")
        cp = store.snapshot("after")
        assert store.read_bytes(cp.id, "new") == b"after compaction"
        store.gc(compact=True)
        assert store.read_bytes(cp.id, "new") == b"after compaction"
        assert store.verify().ok


def test_two_store_objects_in_one_process_follow_compaction(tree, store):
    expected: dict = {}
    for i in range(4):
        snap(store, tree, f"s{i}", {"f": random_bytes(100_000, 10 + i)}, expected)
    other = Store.open(tree)
    try:
        store.prune(keep_last=1)
        gen = lmdb_generations.read_current(store.store_dir)[1]
        store.gc(compact=True)
        assert lmdb_generations.read_current(store.store_dir)[1] != gen  # a new generation
        snap(other, tree, "from other", {"g": b"other"}, expected)
        assert [c.message for c in store.checkpoints()] == ["from other", "s3"]
        assert_readable(store, expected)
        assert other.verify().ok
    finally:
        other.close()


_CHILD = r"""
import sys
from snapstore.store import Store
s = Store.open(sys.argv[1])
print(len(s.checkpoints()), flush=True)
sys.stdin.readline()
print(len(s.checkpoints()), flush=True)  # a reader may still see the old (consistent) file
open(sys.argv[1] + "/from-child", "w").write("child")
cp = s.snapshot("from child")
print(cp.id, s.verify().ok, flush=True)
"""


def test_a_second_process_reopens_after_compaction(tree, store):
    """A process that opened the store before `gc --compact` writes to the new file."""
    expected: dict = {}
    for i in range(5):
        snap(store, tree, f"s{i}", {"f": random_bytes(150_000, 20 + i)}, expected)
    store.prune(keep_last=2)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tree)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert child.stdout.readline().strip() == "2"
        report = store.gc(compact=True)
        assert report.compacted and report.size_after < report.size_before
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "2"
        cid, ok = child.stdout.readline().split()
        assert ok == "True"
        assert child.wait(timeout=60) == 0
    finally:
        child.kill()
    # The child's checkpoint went to the file this process now maps, not to the unlinked one.
    assert store.checkpoints()[0].id == cid
    assert store.read_bytes(cid, "from-child") == b"child"
    assert store.verify().ok
    assert_readable(store, expected)


def test_gc_waits_for_the_writer_lock(tree, store):
    write(tree, "f", b"x")
    store.snapshot("one")
    other = Store.open(tree, lock_timeout=0.1)
    try:
        with store._lock.held():
            with pytest.raises(LockedError):
                other.gc()
    finally:
        other.close()


def test_gc_in_memory_store(tmp_path):
    root = tmp_path / "mem"
    root.mkdir()
    store = Store.in_memory(root)
    write(root, "f", random_bytes(100_000, 30))
    a = store.snapshot("a")
    write(root, "f", random_bytes(100_000, 31))
    b = store.snapshot("b")
    store.delete(a.id)
    report = store.gc(compact=True)
    assert report.chunks_removed > 0 and not report.compacted
    assert store.verify().ok
    assert store.read_bytes(b.id, "f") == random_bytes(100_000, 31)


def test_gc_refuses_a_store_whose_manifest_cannot_be_read(tree, store):
    write(tree, "f", random_bytes(50_000, 32))
    cp = store.snapshot("a")
    with store.backend.write() as batch:
        batch.delete("chunks", cp.manifest)
    before = tables(store)
    from snapstore.errors import CorruptError

    with pytest.raises(CorruptError, match="gc stopped"):
        store.gc()
    assert tables(store) == before


def test_gc_cli_reports_and_exit_codes(tree, store, run_cli):
    expected: dict = {}
    a = snap(store, tree, "a", {"f": random_bytes(80_000, 33)}, expected)
    snap(store, tree, "b", {"f": random_bytes(80_000, 34)}, expected)
    store.close()
    assert run_cli("delete", a.id[:10], cwd=tree).code == 0
    r = run_cli("gc", "--dry-run", cwd=tree)
    assert r.code == 0 and "would remove" in r.text
    r = run_cli("gc", "--compact", cwd=tree)
    assert r.code == 0 and "removed" in r.text and "compacted" in r.text
    r = run_cli("gc", "--json", cwd=tree)
    assert r.code == 0 and '"chunks_removed": 0' in r.text
    r = run_cli("stats", "--json", cwd=tree)
    assert r.code == 0 and '"checkpoints": 1' in r.text
    r = run_cli("verify", cwd=tree)
    assert r.code == 0
    r = run_cli("gc", cwd=tree / "..")
    assert r.code == 3
    assert_one_line_error(r.err)


# -- random sequences ----------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("snap"), st.integers(0, 5), st.integers(0, 3)),
        st.tuples(st.just("prune"), st.integers(1, 3), st.booleans()),
        st.tuples(st.just("delete"), st.integers(0, 10), st.booleans()),
        st.tuples(st.just("gc"), st.booleans(), st.booleans()),
        st.tuples(st.just("restore"), st.integers(0, 10), st.booleans()),
    ),
    min_size=3,
    max_size=14,
)


@settings(max_examples=15)
@given(ops=OPS, seed=st.integers(0, 1000))
def test_random_snapshot_prune_delete_gc_sequences(ops, seed):
    from snapstore.errors import UsageError

    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "tree")
        os.mkdir(root)
        with Store.init(root) as store:
            expected: dict = {}
            for n, (op, a, b) in enumerate(ops):
                if op == "snap":
                    files = {f"f{a}": random_bytes(1000 + 9000 * b, seed * 100 + n)}
                    if b == 3:
                        files[f"d/big{a}"] = random_bytes(70_000, seed + n)
                    snap(store, root, f"s{n}", files, expected, tags=[f"t{n}"] if b == 0 else ())
                elif op == "prune":
                    store.prune(keep_last=a, keep_tagged=b)
                elif op == "delete":
                    alive = store.checkpoints(include_safety=True)
                    if alive:
                        try:
                            store.delete(alive[a % len(alive)].id)
                        except UsageError:
                            pass  # undo needs it: refused, as documented
                elif op == "gc":
                    store.gc(compact=a, dry_run=b)
                elif op == "restore":
                    alive = store.checkpoints()
                    if alive:
                        store.restore(alive[a % len(alive)].id)
                    if b and store.operations():
                        store.undo()
            store.gc(compact=True)
            report = store.verify()
            assert report.ok, [str(p) for p in report.problems]
            assert_readable(store, expected)
            # Every surviving checkpoint also restores byte-exact into the tree.
            for cp in store.checkpoints():
                store.restore(cp.id)
                for name, data in expected[cp.id].items():
                    with open(os.path.join(root, name), "rb") as f:
                        assert f.read() == data
