"""Chunk boundaries are a storage format: golden boundaries, and the chunking laws."""

from __future__ import annotations

import io
import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapstore.storage import chunker
from snapstore.testing import random_bytes

GOLDEN_SEED = b"snapstore golden chunker v1"
GOLDEN_SIZE = 2 << 20

#: Computed once from chunker.cut_buffer(random_bytes(2 MiB, GOLDEN_SEED)) with the pinned
#: parameters (min 8 KiB, avg 32 KiB, max 128 KiB, normalisation 1, seed 0).  If this test
#: fails, the chunker moved its boundaries: every existing store would stop deduplicating.
GOLDEN_ENDS = [
    58841, 73388, 119034, 192738, 221630, 268031, 302065, 355250, 368351, 406174,
    431992, 469290, 506865, 516643, 579092, 641499, 723332, 734553, 775484, 818794,
    906022, 929085, 960903, 980650, 990916, 1008052, 1041748, 1067084, 1077013, 1088153,
    1121788, 1153688, 1166835, 1210387, 1261542, 1299472, 1317243, 1359163, 1407646, 1453955,
    1465682, 1522768, 1575334, 1589645, 1631779, 1644217, 1686509, 1729527, 1770150, 1792691,
    1836876, 1862455, 1909778, 1946715, 1994787, 2028557, 2093119, 2097152,
]  # fmt: skip

#: Record-chunker boundaries (cumulative record counts) for the two fixed inputs below.
GOLDEN_RECORD_ENDS_SMALL = [20, 119, 128, 139, 140, 277, 278, 300]
GOLDEN_RECORD_ENDS_LARGE = [8, 23, 31, 46, 61, 78, 80, 96, 112, 117, 120]


def _ends(chunks) -> list[int]:
    out, offset = [], 0
    for c in chunks:
        offset += len(c)
        out.append(offset)
    return out


def _golden_input() -> bytes:
    return random_bytes(GOLDEN_SIZE, GOLDEN_SEED)


def test_parameters_are_pinned():
    assert chunker.PARAMS == {
        "fastcdc": {"min": 8192, "avg": 32768, "max": 131072, "nc": 1, "seed": 0},
        "records": {"mask": 31, "max_bytes": 65536},
        "messages": {"min_bytes": 1024},
    }


def test_golden_boundaries_cut_buffer():
    assert _ends(chunker.cut_buffer(_golden_input())) == GOLDEN_ENDS


def test_golden_boundaries_cut_stream():
    assert _ends(chunker.cut_stream(io.BytesIO(_golden_input()))) == GOLDEN_ENDS


class _TrickleReader(io.RawIOBase):
    """A raw stream that returns at most ``step`` bytes per read (like a pipe)."""

    def __init__(self, data: bytes, step: int):
        self._data = memoryview(data)
        self._pos = 0
        self._step = step

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self._step, len(self._data) - self._pos)
        b[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        return n


def test_golden_boundaries_cut_stream_short_reads():
    stream = _TrickleReader(_golden_input(), 7001)
    assert _ends(chunker.cut_stream(stream)) == GOLDEN_ENDS


def test_constant_input_is_cut_at_max_size():
    assert [len(c) for c in chunker.cut_buffer(bytes(1 << 20))] == [chunker.MAX_SIZE] * 8


def _records_small():
    out = []
    for i in range(300):
        key = b"src/dir%02d/file%04d.py" % (i % 17, i)
        out.append((key, msgpack.packb([key, i * 37 % 5000]) + bytes(i * 53 % 700)))
    return out


def _records_large():
    # ~3-5 KB records: RECORD_MAX_BYTES (64 KiB) ends some chunks, the key mask others.
    out = []
    for i in range(120):
        out.append((b"conv/%05d" % i, msgpack.packb(f"m{i}:" + "x" * (3000 + i * 97 % 2000))))
    return out


def _record_ends(records) -> list[int]:
    ends, n = [], 0
    for group in chunker.cut_records(records):
        n += len(group)
        ends.append(n)
    return ends


def test_golden_record_boundaries():
    assert _record_ends(_records_small()) == GOLDEN_RECORD_ENDS_SMALL
    assert _record_ends(_records_large()) == GOLDEN_RECORD_ENDS_LARGE


def test_record_chunks_respect_max_bytes_and_keep_records_whole():
    records = _records_large()
    groups = list(chunker.cut_records(records))
    assert [r for g in groups for r in g] == [enc for _, enc in records]
    assert any(sum(map(len, g)) + 5000 > chunker.RECORD_MAX_BYTES for g in groups)
    for g in groups:
        assert sum(map(len, g)) <= chunker.RECORD_MAX_BYTES


def test_no_records_no_chunks():
    assert list(chunker.cut_records([])) == []


def test_empty_input_is_one_empty_chunk():
    assert [bytes(c) for c in chunker.cut_buffer(b"")] == [b""]
    assert list(chunker.cut_stream(io.BytesIO(b""))) == [b""]


_sizes = st.one_of(
    st.integers(0, 3 * chunker.MAX_SIZE),
    st.sampled_from(
        [
            chunker.MIN_SIZE - 1,
            chunker.MIN_SIZE,
            chunker.MIN_SIZE + 1,
            chunker.AVG_SIZE,
            chunker.MAX_SIZE - 1,
            chunker.MAX_SIZE,
            chunker.MAX_SIZE + 1,
            2 * chunker.MAX_SIZE + chunker.MIN_SIZE,
        ]
    ),
)
_data = st.one_of(
    st.binary(max_size=2000),
    st.builds(random_bytes, _sizes, st.integers(0, 1 << 30)),
    # low-entropy data: long runs hit MAX_SIZE cuts
    st.builds(lambda n, b: bytes([b]) * n, _sizes, st.integers(0, 255)),
    st.builds(lambda n, s: (random_bytes(97, s) * (n // 97 + 1))[:n], _sizes, st.integers(0, 99)),
)


@settings(max_examples=60)
@given(_data)
def test_chunks_join_back_and_respect_sizes(data):
    chunks = [bytes(c) for c in chunker.cut_buffer(data)]
    assert b"".join(chunks) == data
    assert all(len(c) <= chunker.MAX_SIZE for c in chunks)
    assert all(len(c) >= chunker.MIN_SIZE for c in chunks[:-1])
    assert chunks and (len(chunks) == 1 or all(chunks))
    # the streaming chunker cuts at exactly the same places
    assert list(chunker.cut_stream(io.BytesIO(data))) == chunks


@settings(max_examples=40)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=30), st.binary(max_size=9000)), max_size=60))
def test_record_chunks_join_back(records):
    groups = list(chunker.cut_records(records))
    assert [r for g in groups for r in g] == [enc for _, enc in records]
    assert all(g for g in groups)
    for g in groups:
        # a chunk exceeds the limit only when it is a single oversized record
        assert sum(map(len, g)) <= chunker.RECORD_MAX_BYTES or len(g) == 1


@pytest.mark.parametrize("seed", range(40))
def test_cut_record_bytes_cuts_exactly_where_cut_records_does(seed):
    """The bulk cutter (manifests) and the record-by-record definition agree on every input:
    chunk-ending keys, runs past RECORD_MAX_BYTES (forced cuts), records bigger than the limit,
    a chunk-ending last record or not, and no records at all."""
    rng = random.Random(seed)
    n = rng.choice([0, 1, 2, 5, 40, 300])
    keys = [rng.randbytes(rng.randint(1, 12)) for _ in range(n)]
    big = chunker.RECORD_MAX_BYTES
    sizes = [rng.choice([1, 60, 900, big // 3, big // 2 + 1, big + 5]) for _ in range(n)]
    encoded = [rng.randbytes(s) for s in sizes]
    expected = [b"".join(g) for g in chunker.cut_records(zip(keys, encoded))]
    cut = list(chunker.cut_record_bytes(keys, encoded))
    assert [data for _, data in cut] == expected
    ends = [end for end, _ in cut]  # each chunk's end: the number of records up to its last
    assert ends == sorted(set(ends)) and (not ends or ends[-1] == n)
    assert [sum(len(e) for e in encoded[a:b]) for a, b in zip([0, *ends], ends)] == [len(d) for d in expected]
    assert b"".join(expected) == b"".join(encoded)
