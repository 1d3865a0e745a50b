"""Resource bombs in a hostile or damaged store: bounded decompression and bounded index walks.

A store can come from an archive.  A zstd frame may inflate far past the size its index records
(or claim a terabyte in its header), and a stream's index may repeat a node to describe more
bytes than exist ("billion laughs").  Every reader must report damage (CorruptError, exit 6)
quickly and without allocating what the hostile value claims; these tests craft such values in
a real store and check ``cat``, ``read_bytes``, ``verify`` and restore planning.
"""

from __future__ import annotations

import subprocess
import sys

import msgpack
import pytest
import zstandard
from helpers import subprocess_env

from snapstore.errors import CorruptError
from snapstore.storage import objects
from snapstore.store import Store
from snapstore.testing import build_tree, random_bytes

MiB = 1 << 20
#: A chunk that inflates to this much would show in the child's peak RSS.
BOMB = 256 * MiB
#: What the child may use: the interpreter, snapstore, one store (far below BOMB).
RSS_LIMIT = 120 * MiB


def _one_chunk_file(store: Store, tree, name: bytes = b"victim.bin"):
    """Snapshot a tree with a one-chunk file; returns (checkpoint, its entry)."""
    build_tree(tree, {name.decode(): random_bytes(5000, 1), "fine.txt": b"fine\n"})
    cp = store.snapshot("one")
    entry = next(e for e in store.entries(cp.id) if e.path == name)
    return cp, entry


def _multi_chunk_file(store: Store, tree):
    build_tree(tree, {"big.bin": random_bytes(600_000, 2), "fine.txt": b"fine\n"})
    cp = store.snapshot("one")
    entry = next(e for e in store.entries(cp.id) if e.path == b"big.bin")
    with store.backend.read() as view:
        assert view.get("streams", entry.ref) is not None
    return cp, entry


def _put_chunk(store: Store, cid: bytes, value: bytes) -> None:
    with store.backend.write() as batch:
        batch.put("chunks", cid, value)


def _zeros_frame(size: int, *, header: bool) -> bytes:
    comp = zstandard.ZstdCompressor(level=1, write_content_size=header)
    return bytes((objects.FLAG_ZSTD,)) + comp.compress(b"\0" * size)


def _terabyte_header_frame() -> bytes:
    # magic, a frame header with an 8-byte content size of 1 TiB, one empty last raw block
    frame = b"\x28\xb5\x2f\xfd" + bytes([0b11100000]) + (1 << 40).to_bytes(8, "little") + b"\x01\x00\x00"
    assert zstandard.frame_content_size(frame) == 1 << 40
    return bytes((objects.FLAG_ZSTD,)) + frame


_CHILD = r"""
import os, sys
from snapstore import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
with open("/proc/self/status") as f:  # VmHWM: this process image's peak RSS (reset by exec)
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
os.write(2, b"HWM %d" % hwm)
sys.exit(code)
"""


def _run_child(cwd, *args: str) -> tuple[int, bytes, int]:
    """Run the CLI with ARGS in a fresh process; returns (exit code, stderr, peak RSS in bytes)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], cwd=cwd, env=subprocess_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
    )
    err, _, hwm = done.stderr.rpartition(b"HWM ")
    return done.returncode, err, int(hwm) * 1024


# -- decompression bounds ------------------------------------------------------------------------


@pytest.mark.parametrize("header", [True, False], ids=["size-in-header", "no-size-in-header"])
def test_a_frame_inflating_past_the_cap_is_damage_with_bounded_memory(tree, store, header):
    _, entry = _one_chunk_file(store, tree)
    _put_chunk(store, entry.ref, _zeros_frame(BOMB, header=header))
    with pytest.raises(CorruptError):
        store.read_bytes("latest", "victim.bin")
    store.close()
    for args in (["cat", "latest", "victim.bin"], ["verify"]):
        code, err, rss = _run_child(tree, *args)
        assert code == 6, err
        assert b"Traceback" not in err and err.count(b"\n") <= 3, err
        assert rss < RSS_LIMIT, (args, rss)


def test_a_leaf_inflating_past_its_indexed_size_is_damage(tree, store):
    _, entry = _multi_chunk_file(store, tree)
    with store.backend.read() as view:
        leaf = objects.leaf_ids(view.get, entry.ref)[0]
    # 1 MiB of zeros: under the hard cap, but far more than the index gives this leaf.
    _put_chunk(store, leaf, _zeros_frame(MiB, header=True))
    with pytest.raises(CorruptError, match="more than the"):
        store.read_bytes("latest", "big.bin")


def test_a_header_claiming_a_terabyte_is_damage_not_memory_error(tree, store):
    _, entry = _one_chunk_file(store, tree)
    _put_chunk(store, entry.ref, _terabyte_header_frame())
    with pytest.raises(CorruptError, match="claims 1099511627776 bytes"):
        store.read_bytes("latest", "victim.bin")
    report = store.verify()
    assert [p.kind for p in report.problems] == ["chunk", "file"]
    store.close()
    code, err, _ = _run_child(tree, "cat", "latest", "victim.bin")
    assert code == 6, err


# -- index walks ---------------------------------------------------------------------------------


def _laughs(store: Store, leaf_size: int, fanout: int, height: int) -> tuple[bytes, int]:
    """Store a DAG: one real leaf, then ``height`` levels each repeating the level below
    ``fanout`` times.  Returns (root id, the size the tree really describes)."""
    data = b"L" * leaf_size
    child, size = objects.chunk_id(data), leaf_size
    with store.backend.write() as batch:
        batch.put("chunks", child, objects.encode_chunk(data))
        for _ in range(height):
            plain = msgpack.packb([[child, size]] * fanout)
            nid = objects.chunk_id(plain)
            batch.put("chunks", nid, objects.encode_chunk(plain))
            child, size = nid, size * fanout
    return child, size


def _point_stream(store: Store, sid: bytes, size: int, height: int, root: bytes) -> None:
    with store.backend.write() as batch:
        batch.put("streams", sid, objects.stream_record(size, height, root))


def test_a_dag_that_expands_past_its_record_is_damage_at_once(tree, store):
    cp, entry = _multi_chunk_file(store, tree)
    root, _ = _laughs(store, 1000, 64, 6)  # 6.9e13 bytes described by 7 chunks
    _point_stream(store, entry.ref, entry.size, 6, root)  # the record keeps the true size
    with pytest.raises(CorruptError, match="its record says"):
        store.read_bytes("latest", "big.bin")
    problems = store.verify().problems
    assert any(p.kind == "file" and p.path == "big.bin" for p in problems), problems
    (tree / "big.bin").write_bytes(b"changed")
    with pytest.raises(CorruptError):  # restore plans (reads every stream) before it writes
        store.restore(cp.id)
    assert (tree / "big.bin").read_bytes() == b"changed"


def test_a_dag_whose_record_claims_its_size_is_bounded(tree, store):
    _, entry = _multi_chunk_file(store, tree)
    root, size = _laughs(store, 1000, 64, 8)  # 2.8e17 bytes: more than any stream may hold
    _point_stream(store, entry.ref, size, 8, root)
    with pytest.raises(CorruptError, match="more than any stream may hold"):
        store.read_bytes("latest", "big.bin")
    assert store.verify().problems


def test_a_consistent_dag_costs_verify_one_visit_per_node_and_its_entry_size_is_checked(tree, store):
    _, entry = _multi_chunk_file(store, tree)
    root, size = _laughs(store, 1000, 64, 5)  # 1.07e12 bytes, consistent all the way down
    _point_stream(store, entry.ref, size, 5, root)
    report = store.verify()  # walks 6 distinct nodes, not 64**5 leaves
    problems = [p for p in report.problems if p.path == "big.bin"]
    assert problems and "the entry says 600000" in problems[0].message, report.problems


def test_gc_marks_a_consistent_dag_in_one_visit_per_node(tree, store):
    _, entry = _multi_chunk_file(store, tree)
    root, size = _laughs(store, 1000, 64, 5)
    _point_stream(store, entry.ref, size, 5, root)
    report = store.gc()
    assert report.checkpoints == 1  # finished (64**5 leaves would take hours)


def test_a_zero_filled_file_repeats_index_nodes_and_is_fine(tree, store):
    """Repeated nodes are not damage in themselves: identical content makes identical nodes."""
    build_tree(tree, {"zeros.bin": b"\0" * (12 * MiB)})
    store.snapshot("zeros")
    entry = next(e for e in store.entries("latest") if e.path == b"zeros.bin")
    with store.backend.read() as view:
        nodes = [n for n, _, h in objects.walk_stream(view.get, entry.ref)]
    assert len(set(nodes)) < len(nodes)  # the tree repeats itself
    assert store.read_bytes("latest", "zeros.bin") == b"\0" * (12 * MiB)
    assert store.verify().ok
    assert store.gc().chunks_removed == 0


def test_a_manifest_that_repeats_a_chunk_is_damage(tree, store):
    build_tree(tree, {f"d/f{i:05}": b"x%d" % i for i in range(4000)})
    cp = store.snapshot("many files")
    mid = cp.manifest
    with store.backend.read() as view:
        record = view.get("streams", mid)
        assert record is not None, "the manifest must span several chunks"
        leaves = objects.leaf_ids(view.get, mid)
        first = objects.load_chunk(view.get, leaves[0])
    # A one-level index listing the first manifest chunk twice.
    plain = msgpack.packb([[leaves[0], len(first)], [leaves[0], len(first)]])
    nid = objects.chunk_id(plain)
    with store.backend.write() as batch:
        batch.put("chunks", nid, objects.encode_chunk(plain))
        batch.put("streams", mid, objects.stream_record(2 * len(first), 1, nid))
    with pytest.raises(CorruptError, match="repeats chunk"):
        store.gc()
