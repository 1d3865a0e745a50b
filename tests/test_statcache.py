"""The stat cache: racy entries are not trusted, and the cache never changes a result."""

from __future__ import annotations

import os

import pytest

from snapstore.testing import build_tree, random_bytes
from snapstore.tree import statcache

SID = bytes(range(32))
NOW = 1_700_000_000_000_000_000  # a fixed "moment the content was read", in ns


def _stat(size=100, mtime=NOW - 10_000_000_000, ctime=None, ino=42, mode=0o100644):
    """A fabricated os.stat_result with the fields the cache compares."""
    ctime = mtime if ctime is None else ctime
    # st_mode, st_ino, st_dev, st_nlink, st_uid, st_gid, st_size, atime, mtime, ctime (s), then
    # the float times and the _ns fields
    fields = [mode, ino, 1, 1, 0, 0, size, mtime // 10**9, mtime // 10**9, ctime // 10**9]
    extra = {
        "st_atime": mtime / 1e9, "st_mtime": mtime / 1e9, "st_ctime": ctime / 1e9,
        "st_atime_ns": mtime, "st_mtime_ns": mtime, "st_ctime_ns": ctime,
    }  # fmt: skip
    return os.stat_result(fields, extra)


def test_fabricated_stat_has_the_fields_we_set():
    st = _stat(size=5, mtime=NOW - 7, ctime=NOW - 3, ino=9, mode=0o100755)
    assert (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode) == (
        5, NOW - 7, NOW - 3, 9, 0o100755,
    )  # fmt: skip


def test_old_matching_entry_is_trusted():
    st = _stat()
    assert statcache.lookup(statcache.encode(st, SID, NOW), st) == SID


@pytest.mark.parametrize(
    "mtime_age, ctime_age",
    [
        (0, 0),  # written in the very tick it was read
        (statcache.RACY_MARGIN_NS - 1, 10**10),  # mtime just inside the margin
        (10**10, statcache.RACY_MARGIN_NS // 2),  # ctime young (e.g. chmod or utime back)
        (-5_000_000, 10**10),  # mtime in the future of the read
    ],
)
def test_young_entry_is_not_trusted(mtime_age, ctime_age):
    st = _stat(mtime=NOW - mtime_age, ctime=NOW - ctime_age)
    assert statcache.lookup(statcache.encode(st, SID, NOW), st) is None


def test_entry_exactly_at_the_margin_is_trusted_only_beyond_it():
    at = _stat(mtime=NOW - statcache.RACY_MARGIN_NS)
    assert statcache.lookup(statcache.encode(at, SID, NOW), at) is None
    beyond = _stat(mtime=NOW - statcache.RACY_MARGIN_NS - 1)
    assert statcache.lookup(statcache.encode(beyond, SID, NOW), beyond) == SID


@pytest.mark.parametrize(
    "change",
    [
        {"size": 101},
        {"mtime": NOW - 10_000_000_001},
        {"ctime": NOW - 9_000_000_000},
        {"ino": 43},
        {"mode": 0o100755},
    ],
)
def test_any_stat_field_change_misses(change):
    cached = _stat()
    value = statcache.encode(cached, SID, NOW)
    assert statcache.lookup(value, _stat(**change)) is None


@pytest.mark.parametrize("value", [None, b"", b"\xc1garbage", b"\x93\x01\x02\x03"])
def test_missing_or_damaged_entry_misses(value):
    assert statcache.lookup(value, _stat()) is None


def test_bad_stream_id_misses():
    st = _stat()
    assert statcache.lookup(statcache.encode(st, b"short", NOW), st) is None


# -- end to end ---------------------------------------------------------------------------------


def _rewrite_same_size_same_mtime(path, data: bytes) -> None:
    st = os.stat(path)
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def _newest_change(tree, names) -> int:
    """The latest mtime or ctime among ``names``: what the racy rule compares with."""
    return max(max(os.stat(tree / n).st_mtime_ns, os.stat(tree / n).st_ctime_ns) for n in names)


def _clock(monkeypatch, now_ns: int) -> None:
    """Stamp every read at ``now_ns`` (statcache's clock seam): no dependence on machine load."""
    monkeypatch.setattr(statcache, "now_ns", lambda: now_ns)


def test_racy_rewrite_right_after_snapshot_is_detected(tree, store, monkeypatch):
    """New content, same size, same mtime, immediately after a snapshot: the next one sees it."""
    build_tree(tree, {"f.txt": b"A" * 1000, "other": b"x"})
    _clock(monkeypatch, _newest_change(tree, ["f.txt"]))  # read in the tick it was written
    cp1 = store.snapshot("one")
    _rewrite_same_size_same_mtime(tree / "f.txt", b"B" * 1000)
    cp2 = store.snapshot("two")
    assert store.read_bytes(cp2.id, "f.txt") == b"B" * 1000
    assert store.read_bytes(cp1.id, "f.txt") == b"A" * 1000
    assert cp2.stats["modified"] == 1


def test_rewrite_detected_even_when_cache_entries_are_old_enough(tree, store, monkeypatch):
    """With the racy margin at 0 the cache is trusted at once; the ctime still betrays the edit."""
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)
    build_tree(tree, {"f.txt": b"A" * 1000, "g.txt": b"unchanged"})
    store.snapshot("one")
    cp_hit = store.snapshot("cache hit")
    assert cp_hit.stats["files_read"] == 0  # the cache is in use
    _rewrite_same_size_same_mtime(tree / "f.txt", b"C" * 1000)
    cp = store.snapshot("after rewrite")
    assert cp.stats["files_read"] == 1
    assert store.read_bytes(cp.id, "f.txt") == b"C" * 1000


def test_snapshot_right_after_write_rereads_files(tree, store, monkeypatch):
    """Entries recorded within RACY_MARGIN_NS of the files' mtimes are re-read next time; once
    recorded beyond the margin they are trusted.  The clock is controlled, not the machine."""
    build_tree(tree, {"a": b"1", "b": b"2"})
    newest = _newest_change(tree, ["a", "b"])
    _clock(monkeypatch, newest + statcache.RACY_MARGIN_NS // 2)  # read 1 s after the last write
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 3600 * 10**9)  # racy however slow we are
    store.snapshot("one")
    assert store.snapshot("two").stats["files_read"] == 2
    monkeypatch.undo()
    _clock(monkeypatch, newest + statcache.RACY_MARGIN_NS + 1)  # beyond the margin for all
    assert store.snapshot("three").stats["files_read"] == 2  # "two" recorded racy entries
    assert store.snapshot("four").stats["files_read"] == 0


def _delete_statcache(backend) -> int:
    with backend.read() as view:
        keys = [k for k, _ in view.items("statcache")]
    with backend.write() as batch:
        for k in keys:
            batch.delete("statcache", k)
    with backend.read() as view:
        assert view.count("statcache") == 0
    return len(keys)


def test_deleting_the_statcache_changes_no_result(tree, store, monkeypatch):
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)  # so the cache is actually used
    spec = {
        "a.txt": b"alpha\n",
        "big.bin": random_bytes(600_000, 5),
        "d/e/f": b"",
        "d/g": random_bytes(70_000, 6),
    }
    build_tree(tree, spec)
    cp1 = store.snapshot("first")
    build_tree(tree, {"a.txt": b"alpha 2\n"})
    (tree / "d" / "g").unlink()
    with_cache = store.snapshot("with cache")
    assert with_cache.stats["files_read"] == 1  # only a.txt: the cache answered for the rest

    assert _delete_statcache(store.backend) > 0
    without_cache = store.snapshot("without cache")
    assert without_cache.stats["files_read"] == 3  # everything read again
    assert without_cache.manifest == with_cache.manifest
    assert store.entries(without_cache.id) == store.entries(with_cache.id)
    assert [store.read_bytes(without_cache.id, p) for p in ("a.txt", "big.bin", "d/e/f")] == [
        b"alpha 2\n", spec["big.bin"], b"",
    ]  # fmt: skip
    assert store.read_bytes(cp1.id, "d/g") == spec["d/g"]
    # the cache is rebuilt: the next snapshot reads nothing again
    assert store.snapshot("rebuilt").stats["files_read"] == 0


def test_statcache_forgets_deleted_paths(tree, store):
    build_tree(tree, {"keep": b"k", "drop": b"d"})
    store.snapshot("one")
    (tree / "drop").unlink()
    store.snapshot("two")
    with store.backend.read() as view:
        assert [k for k, _ in view.items("statcache")] == [b"keep"]


def test_a_value_keeps_the_mtime_its_entry_records():
    """A touched file's value (ops.snapshot.keep) holds the parent entry's mtime beside the
    stat: the entry made from it records that mtime; a plain value records the file's."""
    st = _stat()
    kept = st.st_mtime_ns - 5_000_000_000
    value = statcache.encode(st, SID, NOW, kept)
    assert statcache.lookup_entry(value, st) == (SID, kept)
    assert statcache.lookup(value, st) == SID
    assert statcache.known(value) == (SID, kept)
    plain = statcache.encode(st, SID, NOW)
    assert statcache.lookup_entry(plain, st) == (SID, st.st_mtime_ns) and statcache.known(plain) == (SID, st.st_mtime_ns)
    assert statcache.encode(st, SID, NOW, st.st_mtime_ns) == plain  # (nothing kept: the stat's own)
    assert statcache.stream_id(value) == SID  # (gc reads values of either shape)
    assert statcache.lookup_entry(value, _stat(mtime=st.st_mtime_ns + 1)) is None  # the stat rules still hold
