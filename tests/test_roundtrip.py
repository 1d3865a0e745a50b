"""Snapshot round trips: every path comes back byte-identical, with its kind and exec bit."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from hypothesis import given, settings
from strategies import trees

from snapstore.ops.snapshot import read as snapshot_read
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK
from snapstore.store import Store
from snapstore.testing import (
    EmptyDir,
    Exec,
    Symlink,
    assert_trees_equal,
    build_tree,
    random_bytes,
    read_tree,
    tree_from_store,
)


def _check_checkpoint(store, cp, spec):
    """Everything the store says about ``cp`` matches ``spec``."""
    assert_trees_equal(spec, tree_from_store(store, cp.id))
    by_path = {e.path: e for e in store.entries(cp.id)}
    assert set(by_path) == set(spec)
    for path, node in spec.items():
        e = by_path[path]
        if isinstance(node, bytes | Exec):
            data = node if isinstance(node, bytes) else node.data
            assert e.kind == (EXEC if isinstance(node, Exec) else FILE)
            assert bool(e.mode & 0o100) == isinstance(node, Exec)
            assert e.size == len(data)
            chunks = list(store.iter_bytes(cp.id, path))
            assert b"".join(chunks) == data
            assert store.read_bytes(cp.id, path) == data
        elif isinstance(node, Symlink):
            assert e.kind == SYMLINK and e.ref == node.target
        else:
            assert node is EmptyDir and e.kind == DIR
    files = [n for n in spec.values() if isinstance(n, bytes | Exec)]
    assert cp.stats["files"] == len(files)
    assert cp.stats["bytes"] == sum(len(n if isinstance(n, bytes) else n.data) for n in files)
    assert cp.stats["skipped"] == {"special": 0, "vanished": 0, "unreadable": 0}
    assert cp.warnings == ()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("roundtrip")


@pytest.mark.parametrize("whole_read_max", [snapshot_read.WHOLE_READ_MAX, 0], ids=["whole", "streamed"])
@settings(max_examples=30)
@given(spec=trees)
def test_roundtrip_lmdb(scratch, whole_read_max, spec):
    # whole_read_max=0 sends every non-empty file through the streaming path of big files.
    with tempfile.TemporaryDirectory(dir=scratch) as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(snapshot_read, "WHOLE_READ_MAX", whole_read_max)
        root = os.path.join(tmp, "tree")
        spec = build_tree(root, spec)
        assert_trees_equal(spec, read_tree(root))  # the builder itself is faithful
        with Store.init(root) as store:
            cp = store.snapshot("round trip")
            _check_checkpoint(store, cp, spec)
        # and again after reopening the store from disk
        with Store.open(root) as store:
            _check_checkpoint(store, store.resolve("latest"), spec)


@settings(max_examples=60)
@given(spec=trees)
def test_roundtrip_in_memory(scratch, spec):
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        spec = build_tree(tmp, spec)
        store = Store.in_memory(tmp)
        _check_checkpoint(store, store.snapshot("mem"), spec)


@settings(max_examples=20)
@given(first=trees, second=trees)
def test_second_snapshot_of_changed_tree(scratch, first, second):
    """A tree replaced by another one: the new checkpoint holds the new tree, the old one the old."""
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        root = os.path.join(tmp, "tree")
        first = build_tree(root, first)
        store = Store.in_memory(root)
        cp1 = store.snapshot("first")
        shutil.rmtree(root)
        second = build_tree(root, second)
        cp2 = store.snapshot("second")
        _check_checkpoint(store, cp2, second)
        _check_checkpoint(store, cp1, first)
        assert cp2.parent == cp1.id


def test_large_files_take_the_streaming_path(tree, store, monkeypatch):
    """Files above WHOLE_READ_MAX are streamed; they come back byte-identical."""
    big = snapshot_read.WHOLE_READ_MAX
    spec = {
        "exactly-whole-read-max": random_bytes(big, 1),
        "just-above": random_bytes(big + 1, 2),
        "dir/large exec": Exec(random_bytes(big + 3 * 131072 + 17, 3)),
        "zeros": bytes(big + 5),
    }
    build_tree(tree, spec)
    streamed = []
    original = snapshot_read.chunker.cut_stream

    def spy(f):
        streamed.append(os.fstat(f.fileno()).st_size)
        return original(f)

    monkeypatch.setattr(snapshot_read.chunker, "cut_stream", spy)
    cp = store.snapshot("big")
    assert sorted(streamed) == sorted([big + 1, big + 3 * 131072 + 17, big + 5])
    _check_checkpoint(store, cp, build_tree(tree, {}) | {k.encode(): v for k, v in spec.items()})


def test_odd_names_fixed_examples(tree, store):
    spec = {
        b"not utf8 \xff\xfe": b"a",
        b"new\nline": b"b",
        b"back\\slash": b"c",
        b"  spaces  ": b"",
        b"dir with space/\xe9t\xe9 (latin-1)": Exec(b"#!/bin/sh\n"),
        b"empty dir \xff": EmptyDir,
        b"link\n": Symlink(b"target \xff/../x"),
    }
    spec = build_tree(tree, spec)
    cp = store.snapshot("odd")
    _check_checkpoint(store, cp, spec)
    # paths given as str with surrogate escapes name the same files
    assert store.read_bytes(cp.id, os.fsdecode(b"not utf8 \xff\xfe")) == b"a"
    assert store.read_bytes(cp.id, "back\\slash") == b"c"
