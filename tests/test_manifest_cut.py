"""Manifest chunks are part of the format: the bulk encoder must cut and encode exactly as the
record-by-record definition does, or a new version would stop deduplicating old manifests."""

from __future__ import annotations

import random

import msgpack
import pytest

from snapstore.records import manifest
from snapstore.records.manifest import EXEC, FILE, SYMLINK, Entry
from snapstore.storage import chunker, objects


def _reference(entries: list[Entry]) -> list[bytes]:
    records = [(e.path, msgpack.packb([e.path, e.kind, e.mode, e.size, e.mtime_ns, e.ref])) for e in entries]
    return [b"".join(g) for g in chunker.cut_records(records)]


def _entries(rng: random.Random, n: int) -> list[Entry]:
    paths = sorted({bytes(rng.choice(b"abcdef/") for _ in range(rng.randint(1, 30))) + b"x" for _ in range(n)})
    out = []
    for p in paths:
        kind = rng.choice([FILE, FILE, EXEC, SYMLINK])
        ref = rng.randbytes(32) if kind != SYMLINK else rng.randbytes(rng.randint(1, 40))
        out.append(Entry(p, kind, 0o100644, rng.randint(0, 1 << 40), rng.randint(0, 1 << 62), ref))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_write_manifest_stores_the_reference_chunks(seed):
    rng = random.Random(seed)
    entries = _entries(rng, rng.choice([0, 1, 50, 2000]))
    memo: dict = {}
    versions = [entries]
    if entries:  # then one entry changed, re-encoded through the memo the first call filled
        i = rng.randrange(len(entries))
        versions.append(entries[:i] + [entries[i]._replace(size=entries[i].size + 1)] + entries[i + 1 :])
    for version in versions:
        stored: dict[bytes, bytes] = {}
        _, size, _ = manifest.write_manifest(version, stored.__setitem__, encode=False, memo=memo)
        expected = _reference(version)
        for chunk in expected:
            assert stored.get(objects.chunk_id(chunk)) == chunk, "a reference chunk is missing"
        assert size == sum(len(c) for c in expected)
