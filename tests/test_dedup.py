"""Deduplication: an unchanged tree costs (almost) nothing, a 1-byte edit costs about one chunk."""

from __future__ import annotations

import os

from helpers import stored_bytes

from snapstore.testing import build_tree, random_bytes

MiB = 1 << 20


def _data_mdb(tree) -> int:
    return os.path.getsize(tree / ".snapstore" / "data.mdb")


def _mixed_tree(n_files: int = 120) -> dict[str, bytes]:
    spec = {}
    for i in range(n_files):
        size = (i * 7919) % (300 * 1024) + i  # 0 .. ~300 KiB, crossing every chunker limit
        if i % 3 == 0:  # compressible text
            spec[f"src/pkg{i % 7}/mod{i}.py"] = (f"def f{i}(x):\n    return x * {i}\n" * 4000)[:size].encode()
        else:
            spec[f"data/d{i % 5}/blob{i}.bin"] = random_bytes(size, i)
    return spec


def test_unchanged_resnapshot_adds_under_one_percent(tree, store):
    build_tree(tree, _mixed_tree())
    cp1 = store.snapshot("first")
    content1 = stored_bytes(store.backend)
    disk1 = _data_mdb(tree)
    assert cp1.stats["new_bytes"] > 5 * MiB  # the tree is big enough for 1 % to mean something

    cp2 = store.snapshot("second, nothing changed")
    assert cp2.id != cp1.id and cp2.parent == cp1.id
    assert cp2.manifest == cp1.manifest
    assert cp2.stats["added"] == cp2.stats["modified"] == cp2.stats["deleted"] == 0
    grown = stored_bytes(store.backend) - content1
    assert cp2.stats["new_bytes"] == grown
    assert grown < content1 / 100
    assert _data_mdb(tree) - disk1 < content1 / 100


def test_unchanged_resnapshot_in_memory(tree):
    from snapstore.store import Store

    build_tree(tree, _mixed_tree(40))
    store = Store.in_memory(tree)
    store.snapshot("first")
    before = stored_bytes(store.backend)
    cp2 = store.snapshot("again")
    assert stored_bytes(store.backend) - before == cp2.stats["new_bytes"] < before / 100


def test_one_byte_change_in_a_32_mib_file(tree, store):
    data = bytearray(random_bytes(32 * MiB, b"dedup-32"))
    build_tree(tree, {"big.bin": bytes(data), "small.txt": b"hello\n"})
    cp1 = store.snapshot("first")
    content1 = stored_bytes(store.backend)
    assert content1 > 32 * MiB  # random data does not compress

    data[len(data) // 2] ^= 0x55
    build_tree(tree, {"big.bin": bytes(data)})
    cp2 = store.snapshot("one byte changed")
    assert cp2.stats["modified"] == 1 and cp2.stats["files_read"] >= 1
    assert store.read_bytes(cp2.id, "big.bin") == bytes(data)
    assert store.read_bytes(cp1.id, "big.bin") != bytes(data)
    grown = stored_bytes(store.backend) - content1
    assert 0 < grown < MiB
    assert 0 < cp2.stats["new_bytes"] < MiB
    assert cp2.stats["new_bytes"] == grown


def test_identical_files_are_stored_once(tree, store):
    blob = random_bytes(3 * MiB, b"twin")
    build_tree(tree, {"a/one.bin": blob, "b/two.bin": blob, "c/three.bin": blob})
    cp = store.snapshot("twins")
    assert stored_bytes(store.backend) < len(blob) + 64 * 1024
    ids = {e.ref for e in store.entries(cp.id) if e.is_file}
    assert len(ids) == 1
