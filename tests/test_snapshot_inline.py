"""Few changed files are read inline (no pool, no writer thread) and their chunks written with the
checkpoint; many go through the pool and the writer.  Both must store the same checkpoint."""

from __future__ import annotations

import pytest

from snapstore.ops.snapshot import read as snapshot_read
from snapstore.store import Store
from snapstore.testing import build_tree, random_bytes


def _history(tmp_path, name: str) -> tuple[list[list[tuple]], dict, Store]:
    root = tmp_path / name
    spec = {f"src/m{i}.py": f"print({i})\n".encode() * (i + 1) for i in range(12)}
    spec["big.bin"] = random_bytes(300_000, seed=1)  # several FastCDC chunks (pyfastcdc)
    spec["empty"] = b""
    build_tree(root, spec)
    store = Store.init(root)
    store.snapshot("first")
    (root / "src/m3.py").write_bytes(b"changed\n")
    big = bytearray((root / "big.bin").read_bytes())
    big[150_000:150_010] = b"0123456789"  # one chunk changes: a delta against the old one
    (root / "big.bin").write_bytes(bytes(big))
    (root / "new.txt").write_bytes(b"new\n")
    cp = store.snapshot("second")
    # Everything but the mtimes (the two trees were written at different moments).
    versions = [[(e.path, e.kind, e.mode, e.size, e.ref) for e in store.entries(ref)] for ref in ("latest~1", "latest")]
    return versions, cp.stats, store


def test_inline_and_pooled_reads_store_the_same_checkpoints(tmp_path, monkeypatch):
    inline_versions, inline_stats, inline_store = _history(tmp_path, "inline")
    monkeypatch.setattr(snapshot_read, "INLINE_FILES", 0)  # everything through the pool
    pooled_versions, pooled_stats, pooled_store = _history(tmp_path, "pooled")
    assert inline_versions == pooled_versions
    for key in ("added", "modified", "deleted", "files_read"):
        assert inline_stats.get(key) == pooled_stats.get(key), key
    # (The manifests hold each tree's own mtimes, so their compressed sizes may differ a little.)
    assert abs(inline_stats["new_bytes"] - pooled_stats["new_bytes"]) < 0.05 * pooled_stats["new_bytes"]
    for store in (inline_store, pooled_store):
        assert store.verify().ok
        assert store.read_bytes("latest", "big.bin") == (tmp_path / "inline" / "big.bin").read_bytes()
        store.close()


@pytest.mark.parametrize(
    ("files", "size", "inline"),
    [(1, 10, True), (256, 16 << 10, True), (257, 10, False), (2, 3 << 20, False), (1, 5 << 20, False)],
)
def test_reads_inline_only_few_small_files(files, size, inline, tmp_path):
    from snapstore.tree import scan

    st = scan.Stat(0o100644, 1, size, 0, 0)
    found = [scan.Found(b"f%d" % i, 0, st) for i in range(files)]
    assert snapshot_read.reads_inline(found) is inline


def test_the_next_version_of_a_changed_file_finds_its_delta_base_without_decoding(tmp_path, monkeypatch):
    """A long-lived Store keeps a modified file's new chunks: editing it again deltas against
    them without decoding the frame they were packed into."""
    from snapstore.storage import entries

    root = tmp_path / "t"
    build_tree(root, {"f.py": random_bytes(20_000, seed=3), "g.py": b"x\n"})
    store = Store.init(root)
    store.snapshot("one")
    data = bytearray((root / "f.py").read_bytes())
    data[100:104] = b"abcd"
    (root / "f.py").write_bytes(bytes(data))
    store.snapshot("two")  # f.py changed: its new chunk is a delta, and kept
    decoded = []
    real = entries.inflate
    monkeypatch.setattr(entries, "inflate", lambda *a, **k: decoded.append(a[0]) or real(*a, **k))
    data[200:204] = b"efgh"
    (root / "f.py").write_bytes(bytes(data))
    three = store.snapshot("three")
    assert decoded == []  # the base came from memory
    assert three.stats["new_bytes"] < 2_000  # and it was still stored as a delta
    assert store.read_bytes("latest", "f.py") == bytes(data)
    assert store.verify().ok
    store.close()


@pytest.mark.parametrize("skip_unchanged", [False, True])
def test_files_read_inline_get_their_stat_cache_entries(tmp_path, monkeypatch, skip_unchanged):
    """The pool's writer stores the stat-cache entries of the files it reads; inline reads store
    theirs with the checkpoint (or alone, when skip_unchanged records nothing): the next
    snapshot reads nothing."""
    import time

    from snapstore.tree import statcache

    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n", "b.txt": b"b\n"})
    store = Store.init(root)
    monkeypatch.setattr(statcache, "now_ns", lambda: 0)  # read "before" their mtimes: racy
    store.snapshot("one")
    monkeypatch.setattr(statcache, "now_ns", lambda: time.time_ns() + 10**12)  # settled from now
    if not skip_unchanged:
        (root / "a.txt").write_bytes(b"changed\n")
    second = store.snapshot("two", skip_unchanged=skip_unchanged)
    assert second.stats["files_read"] == 2  # both racy entries re-read
    assert second.reused is skip_unchanged
    again = Store.open(root)  # a fresh Store (a CLI process): no memory of the last snapshot
    assert again.snapshot("three").stats["files_read"] == 0
    again.close()
    store.close()
