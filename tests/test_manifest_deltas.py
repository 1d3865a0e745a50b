"""A checkpoint stores the manifest leaves it changes as deltas on its parent's leaves."""

from __future__ import annotations

from snapstore.ops.snapshot import manifest_deltas
from snapstore.storage import entries, objects
from snapstore.store import Store
from snapstore.testing import build_tree
from tests.helpers import chunk_entry as entry

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
    for n in range(3 * manifest_deltas.MANIFEST_DELTA_DEPTH):
        edit(tree, n)
        cp = store.snapshot(f"v{n}")
        seen.append((cp.id, f"x = 'edit {n}'\n".encode()))
    depths = [entry(store, c).depth for cp, _ in seen for c in leaves(store, cp)]
    assert max(depths) == manifest_deltas.MANIFEST_DELTA_DEPTH
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


def test_a_checkpoint_stores_at_most_max_leaves_deltas_and_the_rest_whole(tree, store, monkeypatch):
    monkeypatch.setattr(manifest_deltas, "MAX_LEAVES", 3)
    build_tree(tree, files(800))
    a = store.snapshot("a")
    for i in range(0, 800, 40):  # one file in each of 20 leaves or so
        (tree / f"pkg{i % 9}/module_with_a_long_name_{i:04d}.py").write_bytes(b"changed\n")
    b = store.snapshot("b")
    changed = [c for c in leaves(store, b.id) if c not in leaves(store, a.id)]
    kinds = [entry(store, c).codec for c in changed]
    assert len(changed) > 6 and kinds.count(entries.CODEC_DELTA) == 3
    assert store.read_bytes(b.id, "pkg0/module_with_a_long_name_0360.py") == b"changed\n"
    assert store.verify().ok


def test_a_long_lived_store_finds_its_parents_leaves_without_reading_an_index_node(tree, store, monkeypatch):
    build_tree(tree, files(3_000))  # (an index of two levels)
    store.snapshot("a")
    edit(tree, 1)
    store.snapshot("b")  # its new index nodes are kept parsed
    reads = []
    real = objects.index_children

    def counting(get, nid, size):  # type: ignore[no-untyped-def]
        reads.append(nid)
        return real(get, nid, size)

    monkeypatch.setattr(objects, "index_children", counting)
    edit(tree, 2)
    c = store.snapshot("c")
    assert reads == []
    changed = [x for x in leaves(store, c.id) if x not in leaves(store, store.checkpoints()[1].id)]
    assert changed and all(entry(store, x).codec == entries.CODEC_DELTA for x in changed)


def test_a_damaged_parent_index_leaves_the_new_leaves_whole(tree, store):
    build_tree(tree, files(800))
    a = store.snapshot("a")
    edit(tree, 1)
    b = store.snapshot("b")
    parent, mid = store.resolve(a.id).manifest, store.resolve(b.id).manifest
    with store.backend.read() as view:
        record, old = view.get("streams", mid), view.get("streams", parent)
        before = {n for n, _, _ in objects.walk_stream(view.get, parent)}
        new = [(n, objects.load_chunk(view.get, n)) for n, _, _ in objects.walk_stream(view.get, mid) if n not in before]
    assert record is not None and old is not None and new
    assert manifest_deltas.split(store.context, new, mid, record, parent)[1]  # (sound: a delta)
    with store.backend.write() as batch:  # the parent's record, damaged
        batch.put("streams", parent, b"\xc1" + old[1:])
    assert manifest_deltas.split(store.context, new, mid, record, parent) == (new, [])


def test_two_deltas_of_the_same_bytes_on_different_bases_both_read_back(tree, store):
    """The same edit of two versions that differ elsewhere gives the same delta frame; stored
    once (one pack), each entry names its own base, and the frame cache must not serve one
    chunk's bytes for the other."""
    from snapstore.storage import packs

    body = bytes(range(256)) * 8
    base1, base2 = b"mtime=1111" + body, b"mtime=2222" + body
    new1, new2 = (b[:1000] + b"EDITED" + b[1006:] for b in (base1, base2))
    ids = {d: objects.chunk_id(d) for d in (base1, base2, new1, new2)}
    with store.backend.write() as batch:
        for table, key, value in packs.pack_ops(packs.solid_frames([(ids[base1], base1), (ids[base2], base2)], 3)):
            batch.put(table, key, value)
    frames = [packs.delta_frame(ids[n], n, ids[b], b, 1, 3) for n, b in ((new1, base1), (new2, base2))]
    assert frames[0] is not None and frames[1] is not None and frames[0].data == frames[1].data
    for f in frames:  # (one pack each: the same bytes, so the same pack id)
        with store.backend.write() as batch:
            for table, key, value in packs.pack_ops([f]):
                batch.put(table, key, value)
    assert entry(store, ids[new1]).pack == entry(store, ids[new2]).pack
    entries.clear_cache()
    with store.backend.read() as view:
        assert objects.load_chunk(view.get, ids[new1]) == new1
        assert objects.load_chunk(view.get, ids[new2]) == new2
