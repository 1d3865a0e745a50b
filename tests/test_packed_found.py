"""The watcher's records kept packed (tree/packed.py): every record comes back as it was found,
and a look's overlay never changes the state's map."""

from __future__ import annotations

import sys

from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, UNREADABLE
from snapstore.tree import packed
from snapstore.tree.scan import Found, Stat

RECORDS = [
    Found(b"a/big", FILE, Stat(0o100644, 2**63 + 5, 2**40, 1_700_000_000_123_456_789, 1_700_000_001_000_000_001)),
    Found(b"a/old", EXEC, Stat(0o104755, 7, 0, -86_400_000_000_000, -1)),  # before 1970, setuid
    Found(b"a/link", SYMLINK, Stat(0o120777, 8, 5, 10, 11), b"../x"),
    Found(b"empty", DIR, Stat(0o40755, 9, 4096, 12, 13)),
    Found(b"locked", UNREADABLE, None),
]


def test_every_record_comes_back_as_it_was_found():
    m = packed.FoundMap(RECORDS)
    assert len(m) == 5 and list(m) == [f.path for f in RECORDS]
    for f in RECORDS:
        assert m[f.path] == f and m.get(f.path) == f and f.path in m
    assert list(m.records()) == RECORDS
    assert sorted(m.inodes()) == [7, 2**63 + 5]  # the files' only
    assert m.get(b"nope") is None and m.pop(b"nope") is None
    assert m.pop(b"a/old") == RECORDS[1] and b"a/old" not in m


def test_a_file_is_kept_as_one_small_value():
    """31 bytes (a 64-byte block of the allocator, which allocates in steps of 16) when its
    mode fits 16 bits and its size 32, as nearly every file's do; else 37, and still as found."""
    m = packed.FoundMap(RECORDS[:2])
    small, big = m._d[b"a/old"], m._d[b"a/big"]
    assert type(small) is bytes and len(small) == packed.RECORD_SIZE == 31 and sys.getsizeof(small) <= 64
    assert type(big) is bytes and len(big) == 37 and m[b"a/big"] == RECORDS[0]  # (2**40 bytes)
    f = RECORDS[1]
    as_objects = sys.getsizeof(f) + sys.getsizeof(f.st) + sum(sys.getsizeof(x) for x in f.st)
    assert sys.getsizeof(small) * 3 < as_objects


def test_an_overlay_changes_nothing_below_it():
    m = packed.FoundMap(RECORDS)
    o = packed.FoundOverlay(m)
    new = Found(b"a/new", FILE, Stat(0o100600, 99, 1, 2, 3))
    o[new.path] = new
    del o[b"a/big"]
    o[b"a/link"] = RECORDS[0]._replace(path=b"a/link")
    assert b"a/big" not in o and o.get(b"a/big") is None and o[b"a/new"] == new
    assert sorted(o) == sorted([b"a/new", b"a/link", b"a/old", b"empty", b"locked"]) and len(o) == 5
    assert dict(m.items()) == {f.path: f for f in RECORDS}  # the map itself is untouched
    o[b"a/big"] = RECORDS[0]  # found again
    assert o[b"a/big"] == RECORDS[0]


def test_a_walk_into_packed_records_finds_what_a_walk_into_a_list_finds(tmp_path):
    """The watching walk packs each record as it finds it (PackedWalk): the same records in
    the same order, the same listings and the same report as a walk into a list."""
    import os

    from snapstore.testing import build_tree
    from snapstore.tree import scan

    build_tree(tmp_path, {"b/x.txt": b"x", "a/y.sh": b"#!/bin/sh\n", "a/sub/z": b"z", ".gitignore": b"*.log\n", "q.log": b"q"})
    os.chmod(tmp_path / "a" / "y.sh", 0o755)
    os.symlink("b/x.txt", tmp_path / "link")
    os.makedirs(tmp_path / "empty" / "deeper")
    walks = []
    for into in (None, packed.PackedWalk()):
        report, listings = scan.ScanReport(), {}
        got = scan.walk(os.fsencode(tmp_path), frozenset(), report, listings, into)
        records = list(into.records()) if into is not None else got
        assert into is None or got == []
        walks.append((records, listings, report.warnings, report.links))
        if into is not None:
            assert into.paths == [f.path for f in records] and dict(into.found.items()) == {f.path: f for f in records}
            assert type(into.found._d[b"b/x.txt"]) is bytes  # (kept packed)
    assert walks[0] == walks[1]
    assert [f.path for f in walks[0][0]] == [b".gitignore", b"a/sub/z", b"a/y.sh", b"b/x.txt", b"empty/deeper", b"link"]


def test_two_maps_differ_where_their_records_differ():
    """The periodic check compares the walk's packed map with the state's value by value."""
    a = packed.FoundMap(RECORDS)
    b = packed.FoundMap(RECORDS)
    assert list(a.differing(b)) == []
    b[b"a/big"] = RECORDS[0]._replace(st=RECORDS[0].st._replace(st_mtime_ns=1))  # type: ignore[union-attr]
    b[b"a/link"] = RECORDS[2]._replace(target=b"../y")
    del b[b"empty"]
    b[b"new"] = RECORDS[1]._replace(path=b"new")
    assert sorted(a.differing(b)) == [b"a/big", b"a/link", b"empty", b"new"]
