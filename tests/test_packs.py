"""Storage format 2: packs of solid frames, deltas, gc repacking, verify through packs."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from snapstore.errors import CorruptError
from snapstore.storage import entries, objects, packs
from snapstore.store import FORMAT_VERSION, Store
from snapstore.testing import build_tree, random_bytes, read_tree, tree_from_store
from tests.helpers import all_stored_bytes, word_text

WORDS = tuple(w.encode() for w in "alpha beta gamma delta store chunk frame pack zstd value index tree file path".split())


def text(size: int, seed: int) -> bytes:
    return word_text(size, seed, WORDS)


def chunk_values(store: Store) -> dict[bytes, bytes]:
    with store.backend.read() as view:
        return dict(view.items("chunks"))


def entry_of(store: Store, cid: bytes) -> entries.PackEntry:
    value = chunk_values(store)[cid]
    return entries.parse(cid, value)


def file_leaves(store: Store, ref: str, path: bytes) -> list[bytes]:
    entry = next(e for e in store.entries(ref) if e.path == path)
    with store.backend.read() as view:
        return objects.leaf_ids(view.get, entry.ref, distinct=False)


def test_a_new_store_is_format_2_and_every_chunk_lives_in_a_pack(tree, store):
    build_tree(tree, {f"d{i}/f{j}.txt": text(20_000, i * 100 + j) for i in range(5) for j in range(20)})
    cp = store.snapshot("one")
    assert store.format_version == FORMAT_VERSION == 3
    values = chunk_values(store)
    assert values and all(entries.is_entry(v) for v in values.values())
    with store.backend.read() as view:
        pack_sizes = [len(v) for _, v in view.items("packs")]
    # 2 MB of text in solid frames: a handful of packs, not one value per chunk
    assert 1 <= len(pack_sizes) < len(values) / 10
    assert sum(pack_sizes) < 2_000_000 / 2
    assert read_tree(tree) == tree_from_store(store, cp.id)


def test_the_store_file_is_within_10_percent_of_its_payload_after_gc_compact(tree, store):
    build_tree(tree, {f"d{i}/f{j}.py": text(3_000 + 97 * j, i * 1000 + j) for i in range(20) for j in range(100)})
    store.snapshot("one")
    store.gc(compact=True)
    payload = all_stored_bytes(store.backend)
    size = store.backend.disk_size()
    assert size <= 1.10 * payload + 64 * 1024, (size, payload)


def test_an_edited_file_is_stored_as_a_small_delta_and_both_versions_read_back(tree, store):
    old = text(40_000, 1)
    build_tree(tree, {"src/mod.py": old})
    a = store.snapshot("a")
    new = old[:20_000] + b"a changed line\n" + old[20_000:]
    build_tree(tree, {"src/mod.py": new})
    b = store.snapshot("b")
    assert b.stats["new_bytes"] < 2_000, b.stats  # a whole-chunk copy would be ~10 KB
    deltas = [entry_of(store, c) for c in file_leaves(store, b.id, b"src/mod.py")]
    assert any(e.codec == entries.CODEC_DELTA for e in deltas)
    assert store.read_bytes(a.id, "src/mod.py") == old
    assert store.read_bytes(b.id, "src/mod.py") == new
    assert store.verify().ok


def test_delta_chains_stop_at_the_configured_depth(tree, store):
    store.config_set("storage.delta-depth", 3)
    body = bytearray(text(30_000, 2))
    versions = []
    for step in range(10):
        body[1000 + step * 50 : 1000 + step * 50 + 5] = b"EDIT%d" % (step % 10)
        build_tree(tree, {"f.txt": bytes(body[:-1])})
        versions.append((store.snapshot(f"v{step}").id, bytes(body[:-1])))
    parsed = [entries.parse(c, v) for c, v in chunk_values(store).items()]
    depths = [e.depth for e in parsed if e.codec == entries.CODEC_DELTA]
    assert depths and max(depths) == 3
    for ref, content in versions:
        assert store.read_bytes(ref, "f.txt") == content


def test_delta_depth_zero_stores_every_version_whole(tree, store):
    store.config_set("storage.delta-depth", 0)
    old = text(40_000, 3)
    build_tree(tree, {"f.txt": old})
    store.snapshot("a")
    build_tree(tree, {"f.txt": old[:100] + b"x" + old[100:]})
    store.snapshot("b")
    assert not any(entries.parse(c, v).codec == entries.CODEC_DELTA for c, v in chunk_values(store).items())


def test_a_one_byte_edit_in_a_big_file_costs_less_than_256_kib(tree, store):
    data = bytearray(random_bytes(8 << 20, "big"))
    build_tree(tree, {"big.bin": bytes(data)})
    store.snapshot("a")
    data[len(data) // 2] ^= 1
    build_tree(tree, {"big.bin": bytes(data)})
    b = store.snapshot("b")
    assert 0 < b.stats["new_bytes"] < 256 << 10
    assert store.read_bytes(b.id, "big.bin") == bytes(data)


# -- verify through packs -------------------------------------------------------------------


def _two_versions(tree, store):
    old = text(40_000, 4)
    build_tree(tree, {"keep.txt": text(5_000, 5), "f.txt": old})
    a = store.snapshot("a")
    build_tree(tree, {"f.txt": old[:30_000] + b"changed\n" + old[30_000:]})
    b = store.snapshot("b")
    leaves = file_leaves(store, b.id, b"f.txt")
    delta = next(c for c in leaves if entry_of(store, c).codec == entries.CODEC_DELTA)
    return a, b, delta


def _put(store: Store, table: str, key: bytes, value: bytes | None) -> None:
    with store.backend.write() as batch:
        if value is None:
            batch.delete(table, key)
        else:
            batch.put(table, key, value)
    entries.clear_cache()


def _problems_for(store: Store, path: str) -> list[str]:
    report = store.verify()
    assert not report.ok
    return [p.message for p in report.problems if p.path == path]


def test_verify_names_the_checkpoint_and_path_of_a_damaged_frame(tree, store):
    a, b, _ = _two_versions(tree, store)
    cid = file_leaves(store, a.id, b"keep.txt")[0]
    e = entry_of(store, cid)
    with store.backend.read() as view:
        pack = bytearray(view.get("packs", e.pack))
    pack[e.frame_off + e.frame_len // 2] ^= 0xFF
    _put(store, "packs", e.pack, bytes(pack))
    report = store.verify()
    kinds = {p.kind for p in report.problems}
    assert "pack" in kinds and "chunk" in kinds
    files = [p for p in report.problems if p.kind == "file" and p.path == "keep.txt"]
    assert {p.checkpoint for p in files} == {a.id, b.id}


def test_verify_reports_a_missing_delta_base(tree, store):
    a, b, delta = _two_versions(tree, store)
    _put(store, "chunks", entry_of(store, delta).base, None)
    assert any("delta base" in m and "missing" in m for m in _all_messages(store))
    with pytest.raises(CorruptError, match="delta base"):
        store.read_bytes(b.id, "f.txt")


def _all_messages(store: Store) -> list[str]:
    return [p.message for p in store.verify().problems]


def test_verify_reports_a_delta_chain_that_loops(tree, store):
    a, b, delta = _two_versions(tree, store)
    e = entry_of(store, delta)
    base = e.base
    assert base is not None
    looped = entries.PackEntry(e.pack, e.frame_off, e.frame_len, entries.CODEC_DELTA, 0, e.size, delta, e.depth)
    _put(store, "chunks", base, looped.encode())  # the base now claims to be a delta of its delta
    assert any("loops" in m for m in _all_messages(store))


def test_verify_reports_an_entry_pointing_outside_its_pack(tree, store):
    a, b, _ = _two_versions(tree, store)
    cid = file_leaves(store, a.id, b"keep.txt")[0]
    e = entry_of(store, cid)
    moved = entries.PackEntry(e.pack, e.frame_off + (1 << 24), e.frame_len, e.codec, e.offset, e.size)
    _put(store, "chunks", cid, moved.encode())
    assert any("outside its pack" in m for m in _all_messages(store))
    assert _problems_for(store, "keep.txt")


def test_a_damaged_entry_length_is_found_even_when_the_frame_is_cached(tree, store):
    build_tree(tree, {f"f{i}.txt": text(20_000, 10 + i) for i in range(4)})
    cp = store.snapshot("a")
    second, last = (file_leaves(store, cp.id, p)[0] for p in (b"f1.txt", b"f3.txt"))
    e = entry_of(store, second)
    assert (e.pack, e.frame_off) == (entry_of(store, last).pack, entry_of(store, last).frame_off)
    _put(store, "chunks", second, entries.PackEntry(e.pack, e.frame_off, e.frame_len + 3, e.codec, e.offset, e.size).encode())
    store.read_bytes(cp.id, "f3.txt")  # puts the sound frame (past f1's chunk) in the cache
    with pytest.raises(CorruptError):
        store.read_bytes(cp.id, "f1.txt")


# -- gc --------------------------------------------------------------------------------------


def test_gc_rewrites_a_mostly_dead_pack_and_keeps_the_live_chunks_readable(tree, store):
    store.config_set("gc.consolidate", "off")  # the repack alone (consolidation: test_consolidate)
    build_tree(tree, {"live.txt": text(30_000, 20), **{f"dead{i}.txt": text(60_000, 30 + i) for i in range(10)}})
    a = store.snapshot("a")
    for i in range(10):
        os.remove(tree / f"dead{i}.txt")
    b = store.snapshot("b")
    store.delete(a.id)
    with store.backend.read() as view:
        before = sum(len(v) for _, v in view.items("packs"))
    report = store.gc()
    assert report.packs.packs_rewritten >= 1 and report.packs.chunks_moved >= 1
    with store.backend.read() as view:
        after = sum(len(v) for _, v in view.items("packs"))
    assert after < before / 4
    assert store.read_bytes(b.id, "live.txt") == text(30_000, 20)
    assert store.verify().ok


def test_gc_stores_whole_a_live_delta_whose_base_dies(tree, store):
    store.config_set("gc.consolidate", "off")  # the repack alone (consolidation: test_consolidate)
    old = text(40_000, 40)
    build_tree(tree, {"f.txt": old})
    a = store.snapshot("a")
    new = old[:100] + b"edit\n" + old[100:]
    build_tree(tree, {"f.txt": new})
    b = store.snapshot("b")
    deltas = [c for c in file_leaves(store, b.id, b"f.txt") if entry_of(store, c).codec == entries.CODEC_DELTA]
    assert deltas
    store.delete(a.id)
    report = store.gc()
    assert report.packs.deltas_made_whole == len(deltas)
    assert all(entry_of(store, c).codec != entries.CODEC_DELTA for c in deltas)
    assert store.read_bytes(b.id, "f.txt") == new
    assert store.verify().ok


def test_gc_keeps_a_pack_whose_live_chunk_is_damaged_and_repacks_the_rest(tree, store):
    store.config_set("gc.consolidate", "off")  # the repack alone (consolidation: test_consolidate)
    # live.txt is one chunk (no index node): its damage must not stop the mark
    build_tree(tree, {"live.txt": text(6_000, 70), **{f"dead{i}.txt": text(60_000, 80 + i) for i in range(6)}})
    a = store.snapshot("a")
    for i in range(6):
        os.remove(tree / f"dead{i}.txt")
    b = store.snapshot("b")
    store.delete(a.id)
    cid = file_leaves(store, b.id, b"live.txt")[0]
    e = entry_of(store, cid)
    with store.backend.read() as view:
        pack = bytearray(view.get("packs", e.pack))
    pack[e.frame_off + 20] ^= 0xFF
    _put(store, "packs", e.pack, bytes(pack))
    store.gc()
    with store.backend.read() as view:
        assert view.get("packs", e.pack) is not None  # not emptied, not deleted
    assert entry_of(store, cid) == e
    files = [p for p in store.verify().problems if p.kind == "file"]
    assert [p.path for p in files] == ["live.txt"]


def test_gc_dry_run_changes_nothing(tree, store):
    store.config_set("gc.consolidate", "off")  # the repack alone (consolidation: test_consolidate)
    build_tree(tree, {"a.txt": text(50_000, 50)})
    a = store.snapshot("a")
    build_tree(tree, {"a.txt": text(50_000, 51)})
    store.snapshot("b")
    store.delete(a.id)
    before = all_stored_bytes(store.backend)
    report = store.gc(dry_run=True)
    assert report.packs.packs_rewritten + report.packs.packs_removed >= 1
    assert all_stored_bytes(store.backend) == before


# -- reading many frames -------------------------------------------------------------------


def test_every_chunk_reads_back_whatever_the_frame_cache_holds(tree, store, monkeypatch):
    monkeypatch.setattr(entries, "CACHE_BYTES", 1)  # evict on every read
    monkeypatch.setattr(packs, "FRAME_TARGET", 16 << 10)  # many frames per pack
    spec = {f"f{i:03d}.txt": text(5_000 + i * 37, 60 + i) for i in range(120)}
    build_tree(tree, spec)
    cp = store.snapshot("a")
    for name in reversed(sorted(spec)):
        assert store.read_bytes(cp.id, name) == spec[name]


def test_gc_repack_recompresses_every_pack_at_the_level_given(tree, store):
    build_tree(tree, {f"src/m{i}.py": text(9_000 + i * 7, 300 + i) for i in range(150)})
    cp = store.snapshot("a")
    with store.backend.read() as view:
        before = dict(view.items("packs"))
    report = store.gc(repack_level=19)
    with store.backend.read() as view:
        after = dict(view.items("packs"))
    assert report.consolidated.packs_rewritten == len(before) and not set(before) & set(after)
    assert sum(map(len, after.values())) < sum(map(len, before.values()))
    assert read_tree(tree) == tree_from_store(store, cp.id)
    assert store.verify().ok


def test_cli_gc_repack(tree, store, run_cli):
    build_tree(tree, {f"f{i}.txt": text(5_000, 400 + i) for i in range(20)})
    store.snapshot("a")
    store.close()
    r = run_cli("gc", "--repack", "--level", "5", "--json", cwd=tree)
    assert r.code == 0, r.err
    assert json.loads(r.out)["consolidated"]["packs_rewritten"] >= 1


def test_gc_repack_with_consolidation_off_repacks_in_the_old_order(tree, store):
    store.config_set("gc.consolidate", "off")
    build_tree(tree, {f"src/m{i}.py": text(9_000 + i * 7, 300 + i) for i in range(40)})
    cp = store.snapshot("a")
    report = store.gc(repack_level=19)
    assert report.packs.packs_rewritten >= 1 and report.consolidated.packs_rewritten == 0
    assert read_tree(tree) == tree_from_store(store, cp.id)
    assert store.verify().ok


def test_the_delta_depth_key_is_the_config_key():
    from snapstore.ops import retention

    assert packs.DELTA_DEPTH_KEY == retention.config_key("storage.delta-depth")


def test_a_frame_decoded_by_one_thread_serves_the_others(tree, store, monkeypatch):
    """A restore reads with a pool: a per-thread frame cache decoded each frame once per thread."""
    import threading

    build_tree(tree, {f"f{i}.txt": text(20_000, 500 + i) for i in range(5)})
    cp = store.snapshot("a")
    leaves = [file_leaves(store, cp.id, f"f{i}.txt".encode())[0] for i in range(5)]
    entries.clear_cache()

    def read(cid: bytes) -> None:
        with store.backend.read() as view:
            objects.load_chunk(view.get, cid)

    first = threading.Thread(target=read, args=(leaves[4],))
    first.start()
    first.join()
    with entries._chunks_lock:
        entries._chunks.clear()  # only the frames stay cached
    calls = []
    real = entries.inflate
    monkeypatch.setattr(entries, "inflate", lambda *a, **k: calls.append(1) or real(*a, **k))
    for cid in leaves:
        other = threading.Thread(target=read, args=(cid,))
        other.start()
        other.join()
    assert calls == []


def _edit_in_one_checkpoint(tree, store, monkeypatch, names: list[str], seed: int) -> tuple[list[str], Any]:
    """Snapshot ``names`` (12 KB texts), edit one line of each, snapshot again with the pools it
    asks for recorded; checks that each file is a delta on its previous version and that both
    versions read back.  Returns the pools asked for and the second checkpoint."""
    from snapstore.ops import workers

    old = {n: text(12_000, seed + i) for i, n in enumerate(names)}
    build_tree(tree, old)
    a = store.snapshot("a")
    new = {n: body[:6_000] + b"# an edit\n" + body[6_000:] for n, body in old.items()}
    build_tree(tree, new)
    pools: list[str] = []
    real = workers.pool
    monkeypatch.setattr(workers, "pool", lambda name, n: (pools.append(name), real(name, n))[1])
    b = store.snapshot("b")
    for n in names:
        assert any(entry_of(store, c).codec == entries.CODEC_DELTA for c in file_leaves(store, b.id, n.encode()))
        assert store.read_bytes(b.id, n) == new[n] and store.read_bytes(a.id, n) == old[n]
    return pools, b


def test_a_checkpoint_of_a_few_edited_files_makes_their_deltas_in_the_calling_thread(tree, store, monkeypatch):
    """An agent's step (a few edited files, their bases in one frame) makes its deltas where
    it reads: a delta costs less than the hand-off to the delta pool and the wait for a core."""
    pools, _ = _edit_in_one_checkpoint(tree, store, monkeypatch, [f"src/f{i}.py" for i in range(8)], 200)
    assert "delta" not in pools


def test_a_checkpoint_of_many_edited_files_makes_their_deltas_in_threads(tree, store, monkeypatch):
    """Past PARALLEL_DELTAS files with a base, the deltas are made in the delta pool: each edited
    file is still a delta on its previous version, the frames in the chunks' order (the same
    packs as made one by one), and every version reads back."""
    from snapstore.ops.snapshot import write

    names = [f"src/m{i:02d}.py" for i in range(3 * write.PARALLEL_DELTAS)]
    pools, b = _edit_in_one_checkpoint(tree, store, monkeypatch, names, 100)
    assert pools.count("delta") == 1  # (and the manifest's new leaves, several now, the frame pool)
    # (a one-line edit of a 12 KB file: a delta of ~40-140 bytes, the file alone ~3 KB)
    assert b.stats["new_bytes"] < 300 * len(names)
    assert store.verify().ok


def test_a_small_delta_is_kept_without_compressing_its_chunk_alone(monkeypatch):
    """A delta under 1/DELTA_SURE of the chunk's size pays whatever the chunk compresses to
    alone: one compression, not two; a bigger one is still weighed against the chunk alone."""
    base = text(40_000, 7)
    edited = base[:20_000] + b"one more line\n" + base[20_000:]
    calls = []
    real = objects._compressor
    monkeypatch.setattr(objects, "_compressor", lambda level: (calls.append(level), real(level))[1])
    frame = packs.delta_frame(b"c" * 32, edited, b"b" * 32, base, 1, 3)
    assert frame is not None and len(frame.data) * packs.DELTA_SURE <= len(edited)
    assert calls == []
    other = text(40_000, 8)
    assert packs.delta_frame(b"c" * 32, other, b"b" * 32, base, 1, 3) is None
    assert calls == [3]


def test_a_delta_of_an_eighth_of_its_chunk_is_kept_without_compressing_it_alone(monkeypatch):
    """An edit that rewrites a few KB of a 40 KB text makes a delta between 1/32 and 1/8 of the
    chunk: it pays unless the chunk compressed alone more than 4:1 (text does not), so it is
    kept after one compression; and a rewrite whose delta is larger is still weighed."""
    base = text(40_000, 7)
    edited = base[:16_000] + text(8_000, 9) + base[24_000:]
    calls = []
    real = objects._compressor
    monkeypatch.setattr(objects, "_compressor", lambda level: (calls.append(level), real(level))[1])
    frame = packs.delta_frame(b"c" * 32, edited, b"b" * 32, base, 1, 3)
    assert frame is not None
    assert len(edited) // 32 < len(frame.data) <= len(edited) // 8
    assert calls == []
    rewritten = base[:2_000] + text(36_000, 10) + base[38_000:]
    packs.delta_frame(b"d" * 32, rewritten, b"b" * 32, base, 1, 3)
    assert calls == [3]
