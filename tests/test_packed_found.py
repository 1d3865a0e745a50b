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
    m = packed.FoundMap(RECORDS[:1])
    value = m._d[b"a/big"]
    assert type(value) is bytes and len(value) == packed.RECORD_SIZE == 37
    f = RECORDS[0]
    as_objects = sys.getsizeof(f) + sys.getsizeof(f.st) + sum(sys.getsizeof(x) for x in f.st)
    assert sys.getsizeof(value) * 3 < as_objects


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


def test_drain_packs_each_record_and_drops_it_from_the_list():
    found: list[Found | None] = list(RECORDS)
    into = packed.FoundMap()
    seen = []
    for f in packed.drain(found, into):
        seen.append(f)
        assert found[len(seen) - 1] is None and f.path in into
    assert seen == RECORDS and found == [None] * 5 and list(into.records()) == RECORDS
