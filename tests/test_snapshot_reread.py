"""Re-reading files whose content the store has (a restore's safety checkpoint after git
rewrote them): each file's bytes are hashed once, no delta base is looked up and nothing is
compressed; and the chunk boundaries of what a snapshot stores stay the chunker's."""

from __future__ import annotations

import os

import pytest

from snapstore.ops.snapshot import read as snapshot_read
from snapstore.storage import chunker, objects, packs
from snapstore.store import Store
from snapstore.testing import build_tree, random_bytes

SMALL = [0, 1, 100, chunker.MIN_SIZE - 1, chunker.MIN_SIZE]


class _CountingBlake3:
    """Stands in for the blake3 module in storage.objects: counts the bytes hashed."""

    def __init__(self, real) -> None:
        self.real = real
        self.hashed = 0

    def blake3(self, data=b"", **kw):
        self.hashed += len(data)
        hasher = self.real.blake3(data, **kw)
        counter = self

        class Hasher:
            def update(self, more):
                counter.hashed += len(more)
                hasher.update(more)
                return self

            def digest(self, *a, **k):
                return hasher.digest(*a, **k)

        return Hasher()


def _rewrite_same(root, names) -> None:
    for name in names:
        path = root / name
        data = path.read_bytes()
        os.unlink(path)  # as git's read-tree -u does: a new file, a new stat
        path.write_bytes(data)


def _tree(tmp_path):
    root = tmp_path / "t"
    spec = {f"s{size}.py": random_bytes(size, seed=size) for size in SMALL}
    spec["big.bin"] = random_bytes(300_000, seed=7)  # several FastCDC chunks
    build_tree(root, spec)
    return root, spec


@pytest.mark.parametrize("pooled", [False, True])
def test_rereading_stored_content_hashes_each_byte_once_and_looks_up_no_base(tmp_path, monkeypatch, pooled):
    if pooled:
        monkeypatch.setattr(snapshot_read, "INLINE_FILES", 0)  # through the pool and the writer
    root, spec = _tree(tmp_path)
    store = Store.init(root)
    store.snapshot("one")
    _rewrite_same(root, spec)
    counter = _CountingBlake3(objects.blake3)
    monkeypatch.setattr(objects, "blake3", counter)
    bases: list[bytes] = []  # the readers' look-ups of a file's previous version (a delta base)
    real_previous = snapshot_read.previous_streams

    def counted(lookups):  # type: ignore[no-untyped-def]
        previous = real_previous(lookups)
        return lambda path: bases.append(path) or previous(path)

    monkeypatch.setattr(snapshot_read, "previous_streams", counted)
    stored: list[int] = []  # chunks the readers' sinks compressed and stored
    real_ops = packs.chunk_ops
    monkeypatch.setattr(packs, "chunk_ops", lambda c, *a, **k: stored.append(len(c) + len(k.get("deltas", ()))) or real_ops(c, *a, **k))
    two = store.snapshot("two")
    assert two.stats["files_read"] == len(spec)
    small = sum(SMALL)
    big = len(spec["big.bin"])
    # A small file is one chunk: its bytes hashed once (its chunk's id is its stream's);
    # a big file's twice (its chunks, and the whole for its stream id), and its index node.
    assert small + 2 * big <= counter.hashed < small + 2 * big + 4096
    assert bases == []  # no previous version looked up: nothing to delta
    assert not any(stored)  # no chunk compressed or stored again
    store.close()


def test_a_changed_file_still_gets_its_delta(tmp_path):
    root = tmp_path / "t"
    data = bytearray(random_bytes(6000, seed=1))
    build_tree(root, {"f.py": bytes(data)})
    store = Store.init(root)
    store.snapshot("one")
    data[10:14] = b"abcd"
    (root / "f.py").write_bytes(bytes(data))
    two = store.snapshot("two")
    assert two.stats["new_bytes"] < 1_000  # a delta on the previous version, not 6 KB
    assert store.read_bytes("latest", "f.py") == bytes(data)
    assert store.verify().ok
    store.close()


@pytest.mark.parametrize("size", [*SMALL, chunker.MIN_SIZE + 1, 20_000, 300_000, (4 << 20) + 5])
def test_stored_chunks_are_the_chunkers(tmp_path, size):
    """The chunks a snapshot stores for a file are exactly chunker.cut_buffer's (the golden
    boundaries of tests/test_chunker.py), whichever read path the file takes: so new
    checkpoints keep deduplicating against old ones."""
    root = tmp_path / "t"
    data = random_bytes(size, seed=size + 1)
    build_tree(root, {"f": data})
    store = Store.init(root)
    store.snapshot("one")
    ref = [e.ref for e in store.entries("latest") if e.path == b"f"][0]
    expected = [objects.chunk_id(c) for c in chunker.cut_buffer(data)]
    with store.backend.read() as view:
        leaves = objects.leaf_ids(view.get, ref, distinct=False)
    assert leaves == expected
    assert ref == objects.chunk_id(data) if len(expected) > 1 else ref == expected[0]
    store.close()


@pytest.mark.parametrize("pooled", [False, True])
def test_delta_bases_in_one_frame_decode_it_once(tmp_path, monkeypatch, pooled):
    """Edited files whose previous versions share a solid frame: the frame is decoded once
    for all their delta bases (the base furthest into it first), not once as a prefix and
    again whole when a later base lies past that prefix."""
    import zstandard

    from snapstore.storage import entries

    if pooled:
        monkeypatch.setattr(snapshot_read, "INLINE_FILES", 0)
    root = tmp_path / "t"
    names = [f"f{i}.py" for i in range(6)]
    spec = {name: random_bytes(6000, seed=i + 20) for i, name in enumerate(names)}
    build_tree(root, spec)
    store = Store.init(root)
    store.snapshot("one")  # the six files in one solid frame of 36,000 plain bytes
    for name in names:
        data = bytearray(spec[name])
        data[3000:3004] = b"edit"
        (root / name).write_bytes(bytes(data))
    entries.clear_cache()  # as in a new process: no decoded frame, no remembered chunk
    decoded: list[int] = []
    real = entries.inflate

    def inflate(cid, frame, *a, **k):
        if zstandard.frame_content_size(frame) == 6 * 6000:
            decoded.append(len(frame))
        return real(cid, frame, *a, **k)

    monkeypatch.setattr(entries, "inflate", inflate)
    two = store.snapshot("two")
    assert len(decoded) == 1
    assert two.stats["new_bytes"] < 6 * 1000  # each file a delta on its previous version
    assert all(store.read_bytes("latest", n) == (root / n).read_bytes() for n in names)
    store.close()
