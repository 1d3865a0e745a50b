"""A checkpoint stores the manifest leaves it changes as deltas on its parent's leaves."""

from __future__ import annotations

from snapstore.ops.snapshot import encode
from snapstore.storage import entries, objects
from snapstore.store import Store
from snapstore.testing import build_tree


EDITED = "pkg7/module_with_a_long_name_0007.py"


def files(n: int) -> dict[str, bytes]:
    """``n`` files: a manifest of many leaves."""
    out = {f"pkg{i % 9}/module_with_a_long_name_{i:04d}.py": f"x = {i}\n".encode() for i in range(n)}
    out[EDITED] = b"x = 'edit 0'\n"
    return out


def edit(tree, n: int) -> None:
    """Rewrite the one edited file (the others keep their stat, so their entries are the same)."""
    (tree / EDITED).write_bytes(f"x = 'edit {n}'\n".encode())


def leaves(store: Store, cid: str) -> list[bytes]:
    with store.backend.read() as view:
        return objects.leaf_ids(view.get, store.resolve(cid).manifest)


def entry(store: Store, cid: bytes) -> entries.Entry:
    with store.backend.read() as view:
        value = view.get("chunks", cid)
    assert value is not None
    return entries.parse(cid, value)


def test_a_one_file_checkpoint_stores_its_manifest_leaf_as_a_small_delta_on_the_parents(tree, store):
    build_tree(tree, files(800))
    a = store.snapshot("a")
    edit(tree, 1)
    b = store.snapshot("b")
    old, new = leaves(store, a.id), leaves(store, b.id)
    assert len(old) > 4  # (a manifest of several leaves)
    changed = [c for c in new if c not in old]
    assert len(changed) == 1
    e = entry(store, changed[0])
    assert e.codec == entries.CODEC_DELTA and e.base in old and e.depth == 1
    whole = len(objects._compressor(3).compress(store_plain(store, changed[0])))
    assert e.frame_len < whole // 4, (e.frame_len, whole)  # (hashes hardly compress alone)
    assert [x.path for x in store.entries(a.id)] == [x.path for x in store.entries(b.id)]
    assert store.read_bytes(b.id, EDITED) == b"x = 'edit 1'\n"
    assert store.read_bytes(a.id, EDITED) == b"x = 'edit 0'\n"
    assert store.verify().ok


def store_plain(store: Store, cid: bytes) -> bytes:
    with store.backend.read() as view:
        return objects.load_chunk(view.get, cid)


def test_manifest_delta_chains_stop_at_their_depth_and_every_version_reads_back(tree, store):
    seen = []
    build_tree(tree, files(800))
    for n in range(3 * encode.MANIFEST_DELTA_DEPTH):
        edit(tree, n)
        cp = store.snapshot(f"v{n}")
        seen.append((cp.id, f"x = 'edit {n}'\n".encode()))
    depths = [entry(store, c).depth for cp, _ in seen for c in leaves(store, cp)]
    assert max(depths) == encode.MANIFEST_DELTA_DEPTH
    for cp, body in seen:
        assert store.read_bytes(cp, EDITED) == body
        assert len(store.entries(cp)) == 800
    assert store.verify().ok


def test_a_store_with_delta_depth_zero_keeps_manifest_leaves_whole(tree, store):
    store.config_set("storage.delta-depth", 0)
    build_tree(tree, files(800))
    for n in range(3):
        edit(tree, n)
        cp = store.snapshot(f"v{n}")
    assert all(entry(store, c).codec == entries.CODEC_ZSTD for c in leaves(store, cp.id))
