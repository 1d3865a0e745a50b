"""Finding one path in a manifest: a binary search over its chunks, the same answer as a scan."""

from __future__ import annotations

import math
import random

import pytest

from snapstore.errors import CorruptError
from snapstore.records import manifest
from snapstore.records.manifest import FILE, Entry
from snapstore.storage import objects


def _stored(n: int, seed: int) -> tuple[bytes, list[Entry], dict[tuple[str, bytes], bytes]]:
    rng = random.Random(seed)
    paths = sorted({f"{rng.choice('abcdefgh')}/{rng.randrange(10**9):09d}.py".encode() for _ in range(n)})
    entries = [Entry(p, FILE, 0o100644, i, 0, rng.randbytes(32)) for i, p in enumerate(paths)]
    table: dict[tuple[str, bytes], bytes] = {}
    mid, _, record = manifest.write_manifest(entries, lambda k, v: table.__setitem__(("chunks", k), v))
    if record is not None:
        table[("streams", mid)] = record
    return mid, entries, table


@pytest.mark.parametrize("n,seed", [(0, 0), (1, 1), (40, 2), (6000, 3)])
def test_find_gives_what_a_scan_gives_for_every_path_and_for_absent_ones(n, seed):
    mid, entries, table = _stored(n, seed)
    get = lambda t, k: table.get((t, k))  # noqa: E731
    for e in entries:
        assert manifest.find(get, mid, e.path) == e
    absent = [b"", b"0", b"a", b"a/", b"zzz", b"\xff"] + [e.path + b"x" for e in entries[::97]]
    absent += [e.path[:-1] for e in entries[::89]]
    listed = {e.path for e in entries}
    for p in absent:
        if p not in listed:
            assert manifest.find(get, mid, p) is None


def test_find_reads_a_logarithmic_number_of_chunks():
    """A descent: at each level a binary search over the children (each probe reads down the
    leftmost side of a child to its first record), never the whole index or every chunk."""
    mid, entries, table = _stored(20000, 4)
    nodes = list(objects.walk_stream(lambda t, k: table.get((t, k)), mid))
    leaves = {cid for cid, _, h in nodes if h == 0}
    index = {cid for cid, _, h in nodes if h > 0}
    height = max(h for _, _, h in nodes)
    assert len(leaves) > 100 and len(index) > 10 and height >= 2
    reads: list[bytes] = []

    def get(t: str, k: bytes) -> bytes | None:
        if t == "chunks":
            reads.append(k)
        return table.get((t, k))

    bound = math.ceil(math.log2(len(leaves))) + height + 1
    for e in random.Random(5).sample(entries, 50):
        reads.clear()
        assert manifest.find(get, mid, e.path) == e
        assert len({k for k in reads if k in leaves}) <= bound
        assert len({k for k in reads if k in index}) <= 2 * height + math.ceil(math.log2(len(leaves))) < len(index)


def test_a_record_that_disagrees_with_its_index_is_corrupt_not_a_crash():
    from snapstore.errors import CorruptError

    mid, entries, table = _stored(6000, 6)
    size, height, root = objects.parse_stream_record(mid, table[("streams", mid)])
    table[("streams", mid)] = objects.stream_record(size + 1, height, root)
    get = lambda t, k: table.get((t, k))  # noqa: E731
    with pytest.raises(CorruptError):
        manifest.find(get, mid, entries[len(entries) // 2].path)


@pytest.mark.parametrize("damaged_at", [0.1, 0.5, 0.9])
def test_a_damaged_chunk_hides_only_its_own_paths(damaged_at):
    """The search steps around a chunk it cannot read: every path of a readable chunk is still
    found (present or absent), and only a path that may be in the damaged chunk raises."""
    mid, entries, table = _stored(6000, 6)
    get = lambda t, k: table.get((t, k))  # noqa: E731
    leaves = [cid for cid, _, h in objects.walk_stream(get, mid) if h == 0]
    bad = leaves[int(len(leaves) * damaged_at)]
    lost = {e.path for e in manifest.iter_entries_of_chunks(mid, [objects.load_chunk(get, bad)])}
    value = bytearray(table[("chunks", bad)])
    value[len(value) // 2] ^= 0x55
    table[("chunks", bad)] = bytes(value)
    found = 0
    for e in entries:
        if e.path in lost:
            with pytest.raises(CorruptError):
                manifest.find(get, mid, e.path)
        else:
            assert manifest.find(get, mid, e.path) == e
            found += 1
    assert found == len(entries) - len(lost) and lost


@pytest.mark.parametrize("n,seed", [(0, 0), (1, 1), (40, 2), (6000, 3)])
def test_find_many_gives_what_find_gives(n, seed):
    mid, entries, table = _stored(n, seed)
    get = lambda t, k: table.get((t, k))  # noqa: E731
    rng = random.Random(seed)
    wanted = sorted({e.path for e in rng.sample(entries, min(n, 300))} | {b"", b"a/", b"zzz", b"\xff"})
    wanted += [] if not entries else [entries[-1].path + b"x"]
    wanted.sort()
    assert manifest.find_many(get, mid, wanted) == {p: e for p in wanted if (e := manifest.find(get, mid, p)) is not None}
    assert manifest.find_many(get, mid, [e.path for e in entries]) == {e.path: e for e in entries}


def test_find_many_reads_each_chunk_once_and_no_more_than_finds_would():
    mid, entries, table = _stored(20000, 4)
    reads: list[bytes] = []

    def get(t: str, k: bytes) -> bytes | None:
        if t == "chunks":
            reads.append(k)
        return table.get((t, k))

    for count in (1, 20, 200):
        picked = sorted(e.path for e in random.Random(count).sample(entries, count))
        reads.clear()
        assert set(manifest.find_many(get, mid, picked)) == set(picked)
        many = list(reads)
        reads.clear()
        for p in picked:
            manifest.find(get, mid, p)
        assert len(set(many)) <= len(set(reads)) and len(many) <= 2 * len(set(many))
