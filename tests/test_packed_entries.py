"""A watching Store's entries kept packed (tree.packed.EntryMap): a dict of entries to every
user (the same answers as a plain dict under random edits, through every method and through
``dict(m)``, ``{**m}``, ``d.update(m)`` and comparisons either way), one packed value a path
inside, and the path order (ops.snapshot.ordered) holding those very values."""

from __future__ import annotations

import random
import sys

from snapstore.ops.snapshot import ordered
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, UNREADABLE, Entry
from snapstore.tree.packed import EntryMap


def _entry(rng: random.Random, path: bytes) -> Entry:
    kind = rng.choice((FILE, FILE, EXEC, SYMLINK, DIR, UNREADABLE))
    ref = b"" if kind in (DIR, UNREADABLE) else rng.randbytes(32)
    mtime = rng.randint(-(10**18), 10**18)
    return Entry(path, kind, rng.choice((0o100644, 0o100755, 0o40755, 0o120777)), rng.randint(0, 1 << 40), mtime, ref)


def test_an_entry_map_answers_as_a_dict_of_entries(tmp_path):
    rng = random.Random(3)
    m, d = EntryMap(), {}
    paths = [f"d{i % 5}/f{i}".encode() for i in range(200)]
    for step in range(3000):
        p = rng.choice(paths)
        op = rng.random()
        if op < 0.4:
            e = _entry(rng, p)
            m[p] = e
            d[p] = e
        elif op < 0.5:
            assert m.pop(p, None) == d.pop(p, None)
        elif op < 0.6:
            e = _entry(rng, p)
            assert m.setdefault(p, e) == d.setdefault(p, e)
        elif op < 0.7:
            batch = {q: _entry(rng, q) for q in rng.sample(paths, 5)}
            m.update(batch)
            d.update(batch)
        elif op < 0.75 and p in d:
            del m[p], d[p]
        assert m.get(p) == d.get(p) and (p in m) == (p in d) and len(m) == len(d), step
    assert dict(m) == d and {**m} == d and m == d and d == m and not (m != d)
    assert sorted(m.items()) == sorted(d.items()) and sorted(m.values()) == sorted(d.values())
    plain: dict[bytes, Entry] = {}
    plain.update(m)
    assert all(type(e) is Entry for e in plain.values()) and plain == d
    copy = m.copy()
    assert type(copy) is EntryMap and copy == m
    some = next(iter(d))
    copy[some] = copy[some]._replace(size=copy[some].size + 1)
    assert copy != m and m == d  # (a copy: the original untouched)
    for p, e in d.items():
        value = dict.__getitem__(m, p)
        assert type(value) is bytes, e  # kept packed
        assert sys.getsizeof(value) < sys.getsizeof(e) + sys.getsizeof(e.ref) + sys.getsizeof(e.mtime_ns)


def test_a_files_entry_is_one_value_of_an_80_byte_block():
    """A file's entry with a 32-byte stream id: 47 bytes (an 80-byte block of the allocator,
    which allocates in steps of 16) when its mode fits 16 bits and its size 32; a bigger file's
    in the wide layout, and both come back as they were."""
    m = EntryMap()
    small = Entry(b"a", FILE, 0o100644, 123, -1, b"s" * 32)
    big = Entry(b"b", EXEC, 0o100755, 1 << 40, 1 << 62, b"b" * 32)
    m[b"a"], m[b"b"] = small, big
    assert len(dict.__getitem__(m, b"a")) == 47 and sys.getsizeof(dict.__getitem__(m, b"a")) <= 80
    assert len(dict.__getitem__(m, b"b")) > 47
    assert m[b"a"] == small and m[b"b"] == big


def test_an_entry_that_does_not_pack_is_kept_as_it_is():
    m = EntryMap()
    odd = [
        Entry(b"big", FILE, 1 << 40, 1, 2, b"x" * 32),  # a mode past 32 bits
        Entry(b"neg", FILE, 0o100644, -1, 2, b"x" * 32),  # a negative size
        Entry(b"other", FILE, 0o100644, 1, 2, b"x" * 32),  # kept under another path
    ]
    for key, e in zip((b"big", b"neg", b"elsewhere"), odd, strict=True):
        m[key] = e
        assert m[key] == e and dict.__getitem__(m, key) is e


def test_the_order_holds_the_maps_packed_values_and_edits_them():
    rng = random.Random(11)
    paths = sorted({f"d{rng.randint(0, 30)}/f{rng.randint(0, 5000)}".encode() for _ in range(5000)})
    d = {p: _entry(rng, p) for p in paths}
    m = EntryMap(d)
    got, want = ordered.full(m), ordered.full(d)
    assert list(got.entries) == list(want.entries) and (got.files, got.size) == (want.files, want.size)
    assert got.entries[5:2600] == want.entries[5:2600] and got.entries[-1] == want.entries[-1]
    assert got.entries.packed and not want.entries.packed  # (a plain dict's entries given as they are)
    assert all(v is d[p] for c in want.entries.chunks for p, v in zip(*c, strict=True))
    for chunk_paths, values in got.entries.chunks:  # the map's very values: no entry a file
        assert all(dict.__getitem__(m, p) is v for p, v in zip(chunk_paths, values, strict=True))
    for _ in range(20):
        kept = got
        edited = m.copy()
        touched = set()
        for p in rng.sample(paths, 30):
            touched.add(p)
            if rng.random() < 0.3:
                edited.pop(p, None)
            else:
                edited[p] = _entry(rng, p)
        new = ordered.order(kept, m, edited, touched, m)
        fresh = ordered.full(edited)
        assert list(new.entries) == list(fresh.entries) and new.paths == fresh.paths
        assert (new.files, new.size) == (fresh.files, fresh.size)
        assert all(type(v) is bytes for _, values in new.entries.chunks for v in values)
        m, got = edited, new
