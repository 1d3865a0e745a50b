"""The index tree updated where the leaves changed is the tree built whole, and manifests are
named by their tree (the same id whichever way they were written)."""

from __future__ import annotations

import random

import blake3
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapstore.records import manifest, manifest_codec
from snapstore.records.manifest import FILE, Entry
from snapstore.storage import objects
from snapstore.storage.index_tree import NODE_MASK, IndexTree, Ref, build_index


def _leaf(rng: random.Random, rare_cuts: bool) -> Ref:
    cid = bytearray(rng.randbytes(32))
    if rare_cuts and cid[0] & NODE_MASK == 0:
        cid[0] |= 1  # no content-defined cut at all: every node is cut at NODE_MAX
    return bytes(cid), rng.randint(1, 5000)


def _whole(leaves: list[Ref]) -> tuple[int, bytes, dict[bytes, bytes]]:
    nodes: dict[bytes, bytes] = {}
    height, root = build_index(leaves, nodes.__setitem__)
    return height, root, nodes


def _edit(rng: random.Random, leaves: list[Ref], rare_cuts: bool) -> tuple[list[Ref], int, int]:
    """A random edit (replace, insert, delete, append, truncate, prepend) and the prefix and
    suffix it kept."""
    n = len(leaves)
    i = rng.randint(0, n)
    j = min(n, i + rng.choice([0, 1, 1, 2, 5, 40, 200]))
    new = [_leaf(rng, rare_cuts) for _ in range(rng.choice([0, 1, 1, 2, 3, 70]))]
    out = leaves[:i] + new + leaves[j:]
    if not out:
        out = [_leaf(rng, rare_cuts)]
    # The caller's guarantee is only a lower bound of what is equal: give a smaller one now
    # and then, as the manifest codec does when it re-cuts more than changed.
    prefix, suffix = i, n - j
    if rng.random() < 0.3:
        prefix, suffix = rng.randint(0, prefix), rng.randint(0, suffix)
    return out, prefix, suffix


@pytest.mark.parametrize("rare_cuts", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_updates_build_the_tree_built_whole(seed: int, rare_cuts: bool) -> None:
    rng = random.Random(seed)
    leaves = [_leaf(rng, rare_cuts) for _ in range(rng.choice([1, 2, 3, 70, 900, 5000]))]
    tree = IndexTree()
    emitted: dict[bytes, bytes] = {}
    assert tree.build(leaves, emitted.__setitem__)[:2] == _whole(leaves)[:2]
    for _ in range(60):
        leaves, prefix, suffix = _edit(rng, leaves, rare_cuts)
        fresh: dict[bytes, bytes] = {}
        got = tree.update(leaves, prefix, suffix, fresh.__setitem__)
        height, root, nodes = _whole(leaves)
        assert got == (height, root)
        assert dict(tree.nodes()) == nodes  # every node of the tree, none of an old one
        assert set(fresh) <= set(nodes)
        # Only what changed is built again: the nodes the update made are few when the tree
        # is large (a bound that holds for any machine; the whole tree would fail it).
        if len(nodes) > 200 and prefix + suffix >= len(leaves) - 3:
            assert len(fresh) < len(nodes) // 4


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 255), min_size=2, max_size=300), st.data())
def test_any_first_bytes(firsts: list[int], data: st.DataObject) -> None:
    leaves = [(bytes([b]) + blake3.blake3(bytes([i % 256, i // 256])).digest()[1:], i + 1) for i, b in enumerate(firsts)]
    tree = IndexTree()
    tree.build(leaves, lambda *_: None)
    i = data.draw(st.integers(0, len(leaves) - 1))
    j = data.draw(st.integers(i, len(leaves)))
    k = data.draw(st.integers(0, 255))
    new = leaves[:i] + [(bytes([k]) + b"\x07" * 31, 7)] + leaves[j:]
    got = tree.update(new, i, len(leaves) - j, lambda *_: None)
    assert got == _whole(new)[:2]
    assert dict(tree.nodes()) == _whole(new)[2]


def _entries(n: int, salt: str = "") -> list[Entry]:
    return [
        Entry(f"dir{i // 50:03d}/file{i:05d}.txt".encode(), FILE, 0o644, i, 0, blake3.blake3(f"{salt}{i}".encode()).digest())
        for i in range(n)
    ]


def test_a_manifest_is_named_by_its_tree_whichever_way_it_was_written() -> None:
    entries = _entries(6000)
    whole: dict[bytes, bytes] = {}
    mid, size, record = manifest.write_manifest(entries, whole.__setitem__, encode=False)
    assert record is not None
    assert mid == objects.tree_id(record) and objects.id_matches(mid, record)
    # Not the whole content's hash (the rule of file streams), and not any chunk's id.
    content = b"".join(objects.iter_stream(lambda table, key: objects.encode_chunk(whole[key]) if table == "chunks" else record, mid))
    assert len(content) == size and objects.chunk_id(content) != mid
    codec = manifest_codec.Codec()
    manifest_codec.write_manifest(codec, _entries(6000, "other"), lambda *_: None, encode=False)
    rng = random.Random(5)
    for _ in range(20):
        entries = list(entries)  # (the codec keeps the list it was given: a new one each time)
        k = rng.randrange(len(entries))
        e = entries[k]
        entries[k] = e._replace(ref=blake3.blake3(rng.randbytes(8)).digest(), size=e.size + 1)
        if rng.random() < 0.3:
            del entries[rng.randrange(len(entries))]
        got: dict[bytes, bytes] = {}
        cmid, csize, crecord = manifest_codec.write_manifest(codec, entries, got.__setitem__, encode=False)
        want: dict[bytes, bytes] = {}
        wmid, wsize, wrecord = manifest.write_manifest(entries, want.__setitem__, encode=False)
        assert (cmid, csize, crecord) == (wmid, wsize, wrecord)
        assert got == want  # every chunk and index node handed over, as the whole write does
        assert msgpack.unpackb(crecord)[0] == csize
