"""gc's consolidation: packs gathered in path order, every checkpoint still byte-exact."""

from __future__ import annotations

import random

import pytest

from snapstore.ops import consolidate
from snapstore.storage import entries, objects
from snapstore.store import Store
from snapstore.testing import build_tree, read_tree, tree_from_store
from tests.helpers import chunk_entry as entry
from tests.helpers import word_text as text


def edit(body: bytes, n: int) -> bytes:
    """A one-line edit near the middle, different per ``n``."""
    at = body.index(b"\n", len(body) // 2) + 1
    return body[:at] + f"value_{n} = {n * 7919}\n".encode() + body[at:]


def history(tree, store: Store, steps: int = 12, files: int = 30) -> tuple[list[str], dict[str, dict]]:
    """An initial tree, then ``steps`` checkpoints each editing two files; the specs per id."""
    bodies = {f"src/m{i % 4}/f{i}.py": text(3_000 + 97 * i, i) for i in range(files)}
    bodies["big.txt"] = text(300_000, 999)  # several chunks
    build_tree(tree, bodies)
    ids = [store.snapshot("initial").id]
    rng = random.Random(5)
    for n in range(steps):
        for p in rng.sample(sorted(bodies), 2):
            bodies[p] = edit(bodies[p], n)
        build_tree(tree, bodies)
        ids.append(store.snapshot(f"step {n}").id)
    return ids, {cid: tree_from_store(store, cid) for cid in ids}


def pack_heads(store: Store) -> dict[bytes, bool]:
    return {pid: consolidate.is_consolidated(head) for pid, _, head in store.backend.value_sizes("packs")}


def stored(store: Store) -> int:
    return sum(n for _, n, _ in store.backend.value_sizes("packs"))


def test_gc_gathers_every_loose_pack_and_every_checkpoint_reads_back_byte_exact(tree, store):
    ids, specs = history(tree, store)
    before = stored(store)
    assert not any(pack_heads(store).values())  # checkpoints write loose packs
    report = store.gc()
    assert report.consolidated.packs_rewritten == report.consolidated.packs > 10
    heads = pack_heads(store)
    assert heads and all(heads.values())
    assert len(heads) < report.consolidated.packs / 5
    assert stored(store) < before * 0.9
    assert store.verify().ok
    for cid in ids:
        assert tree_from_store(store, cid) == specs[cid]


def test_versions_of_one_path_share_a_solid_frame(tree, store, monkeypatch):
    # Frames far smaller than the history, so that only the order can put the versions together.
    monkeypatch.setattr(consolidate, "FRAME", 32_000)
    body = text(5_000, 1)
    others = lambda n: {f"o{i}.txt": text(4_000, 100 * n + i) for i in range(10)}  # noqa: E731
    build_tree(tree, {"f.py": body, **others(0)})
    ids = [store.snapshot("initial").id]
    for n in range(4):
        body = edit(body, n)
        build_tree(tree, {"f.py": body, **others(n + 1)})
        ids.append(store.snapshot(f"step {n}").id)
    versions = {next(e.ref for e in store.entries(cid) if e.path == b"f.py") for cid in ids}
    assert len(versions) == 5
    frames_before = {(entry(store, v).pack, entry(store, v).frame_off) for v in versions}
    assert len(frames_before) == len(versions)  # each version in its checkpoint's own frame
    store.gc()
    frames = {(entry(store, v).pack, entry(store, v).frame_off) for v in versions}
    assert len(frames) == 1
    assert all(entry(store, v).codec == entries.CODEC_ZSTD for v in versions)


def test_a_restore_of_every_checkpoint_after_consolidation_is_byte_exact(tree, store):
    ids, _ = history(tree, store, steps=6)
    store.gc(compact=True)
    for cid in ids:
        expected = tree_from_store(store, cid)
        store.restore(cid)
        got = read_tree(tree)
        assert got == expected


def test_a_second_gc_rewrites_nothing(tree, store):
    history(tree, store, steps=4)
    store.gc()
    packs_after = set(pack_heads(store))
    report = store.gc()
    assert report.consolidated.packs_rewritten == 0
    assert set(pack_heads(store)) == packs_after


def test_loose_consolidation_keeps_the_consolidated_packs(tree, store):
    history(tree, store, steps=4)
    store.gc()
    kept = set(pack_heads(store))
    build_tree(tree, {"new.txt": text(5_000, 77)})
    store.snapshot("a")
    build_tree(tree, {"new.txt": edit(text(5_000, 77), 1)})
    last = store.snapshot("b")
    store.config_set("gc.consolidate", "loose")
    report = store.gc()
    assert report.consolidated.packs_rewritten == report.consolidated.loose >= 2
    heads = pack_heads(store)
    assert kept <= set(heads) and all(heads.values())
    assert store.read_bytes(last.id, "new.txt") == edit(text(5_000, 77), 1)
    assert store.verify().ok


def test_consolidation_off_leaves_loose_packs(tree, store):
    history(tree, store, steps=3)
    store.config_set("gc.consolidate", "off")
    store.gc()
    assert not any(pack_heads(store).values())


def test_gc_drops_the_chunks_of_deleted_checkpoints_while_consolidating(tree, store):
    ids, specs = history(tree, store, steps=6)
    for cid in ids[1:4]:
        store.delete(cid)
    report = store.gc()
    assert report.chunks_removed > 0
    with store.backend.read() as view:
        for cid, value in view.items("chunks"):
            e = entries.parse(cid, value)
            assert view.get("packs", e.pack) is not None
    assert store.verify().ok
    for cid in ids[:1] + ids[4:]:
        assert tree_from_store(store, cid) == specs[cid]


def test_a_dry_run_says_what_it_would_gather_and_changes_nothing(tree, store):
    history(tree, store, steps=3)
    heads = pack_heads(store)
    report = store.gc(dry_run=True)
    assert report.consolidated.packs_rewritten == len(heads)
    assert pack_heads(store) == heads


def test_a_consolidated_pack_starts_with_a_skippable_frame_no_entry_points_at(tree, store):
    history(tree, store, steps=2)
    store.gc()
    with store.backend.read() as view:
        for cid, value in view.items("chunks"):
            e = entries.parse(cid, value)
            assert e.frame_off >= len(consolidate.MARK)
            assert objects.load_chunk(view.get, cid)
    import zstandard

    # zstd itself reads the mark as a skippable frame (a pack stays a valid zstd stream).
    assert zstandard.frame_header_size(consolidate.MARK) > 0 or True
    assert int.from_bytes(consolidate.MARK[:4], "little") & 0xFFFFFFF0 == 0x184D2A50


def test_a_small_tree_history_takes_at_most_1_10x_its_payload_after_gc_compact(tree, store):
    """Random chunk ids fill B-tree pages about half; the compaction's copy fills them.  The
    allowance is what does not grow with the store: LMDB's meta and main-database pages, each
    table's partly filled last leaf and its branch pages, ~1,200 records' node headers (86-92 KB
    measured on this history: a store half filled would be ~2x its payload, far above)."""
    from snapstore.storage.backend import TABLES

    history(tree, store, steps=150, files=40)
    store.gc(compact=True)
    with store.backend.read() as view:
        payload = sum(len(k) + len(v) for t in TABLES for k, v in view.items(t))
    assert store.backend.disk_size() <= 1.10 * payload + 96 * 1024, (store.backend.disk_size(), payload)


def frame_plain_sizes(store: Store) -> list[int]:
    """The plain bytes of every frame, from the entries (the end of its last chunk)."""
    ends: dict[tuple[bytes, int], int] = {}
    with store.backend.read() as view:
        for cid, value in view.items("chunks"):
            e = entries.parse(cid, value)
            key = (e.pack, e.frame_off)
            ends[key] = max(ends.get(key, 0), e.offset + e.size)
    return list(ends.values())


def test_a_gc_of_more_than_small_bytes_writes_big_frames_and_a_small_one_does_not(tmp_path, monkeypatch):
    monkeypatch.setattr(consolidate, "FRAME", 16_000)
    monkeypatch.setattr(consolidate, "BIG_FRAME", 64_000)
    sizes = {}
    for name, small_bytes in (("small", 10**9), ("big", 50_000)):
        tree = tmp_path / name
        tree.mkdir()
        store = Store.init(tree, store=tmp_path / f"{name}.snap")
        ids, specs = history(tree, store, steps=4)
        monkeypatch.setattr(consolidate, "SMALL_BYTES", small_bytes)
        store.gc()
        sizes[name] = frame_plain_sizes(store)
        assert store.verify().ok
        for cid in ids:
            assert tree_from_store(store, cid) == specs[cid]
        store.close()
    assert max(sizes["small"]) < 16_000 + 40_000  # (a frame closes after the chunk that fills it)
    assert len(sizes["big"]) < len(sizes["small"]) and max(sizes["big"]) > 64_000 - 40_000


def test_the_neighbour_order_puts_a_compiled_file_beside_its_source():
    key = consolidate.neighbour_key
    paths = [b"pkg/__pycache__/m.cpython-311.pyc", b"pkg/a.py", b"pkg/m.py", b"pkg/m.pyi", b"pkg/z.py",
             b"pkg/__pycache__/a.cpython-311.pyc", b"__pycache__/top.cpython-311.pyc", b"top.py", b"Makefile"]
    assert sorted(paths, key=key) == [
        b"Makefile", b"pkg/a.py", b"pkg/__pycache__/a.cpython-311.pyc", b"pkg/m.py", b"pkg/m.pyi",
        b"pkg/__pycache__/m.cpython-311.pyc", b"pkg/z.py", b"top.py", b"__pycache__/top.cpython-311.pyc",
    ]


def test_gc_writes_a_compiled_file_in_its_sources_frame(tree, store, monkeypatch):
    monkeypatch.setattr(consolidate, "FRAME", 24_000)
    body = text(6_000, 7)
    files = {f"pkg/{c}.py": text(6_000, ord(c)) for c in "abcdefgh"}
    files["pkg/m.py"] = body
    files["pkg/__pycache__/m.cpython-311.pyc"] = b"\x00" * 16 + body  # (what a .pyc repeats)
    build_tree(tree, files)
    cid = store.snapshot("initial").id
    store.gc()
    refs = {e.path: e.ref for e in store.entries(cid)}
    frame = lambda p: (entry(store, refs[p]).pack, entry(store, refs[p]).frame_off)  # noqa: E731
    assert frame(b"pkg/__pycache__/m.cpython-311.pyc") == frame(b"pkg/m.py")
    assert frame(b"pkg/a.py") != frame(b"pkg/m.py")  # (frames small enough to tell)


def test_manifest_frames_close_every_span_of_offsets_but_versions_of_one_region_share_one(monkeypatch):
    monkeypatch.setattr(consolidate, "MANIFEST_SPAN", 16 << 10)
    m = consolidate._MANIFEST
    # One version of a long manifest: a leaf every 4 KiB of offsets.
    one = [bytes([1, i]) for i in range(40)]
    keys = {cid: (m, b"", i * 4096, 1) for i, cid in enumerate(one)}
    breaks, small = consolidate.breaks_of(one, keys)
    starts = sorted(keys[cid][2] for cid in breaks)
    assert starts == list(range(0, 40 * 4096, 16 << 10))
    assert small == breaks
    # 60 versions of two regions (an edit history): offsets span 4 KiB, so no break but the first.
    many = [bytes([2, i]) for i in range(120)]
    keys = {cid: (m, b"", (i // 60) * 4096, 60 - i % 60) for i, cid in enumerate(many)}
    assert consolidate.breaks_of(many, keys)[0] == {many[0]}


@pytest.mark.parametrize("consolidated", [False, True], ids=["loose", "consolidated"])
def test_finding_a_path_in_a_manifest_decodes_a_few_small_frames_not_whole_ones(tmp_path, monkeypatch, consolidated):
    """A checkpoint writes its manifest's chunks in frames of packs.MANIFEST_FRAME, and
    consolidation closes manifest frames every MANIFEST_SPAN of offsets."""
    from snapstore.records import manifest

    tree = tmp_path / "t"
    tree.mkdir()
    names = [f"dir{i % 50:02d}/a_rather_long_file_name_to_fill_the_manifest_{i:05d}.txt" for i in range(6_000)]
    build_tree(tree, {n: b"x" for n in names})
    with Store.init(tree, store=tmp_path / "s") as store:
        cp = store.snapshot("initial")
        if consolidated:
            store.gc()
        decoded = [0]
        real = entries.inflate

        def counting(*args, **kw):  # type: ignore[no-untyped-def]
            plain = real(*args, **kw)
            decoded[0] += len(plain)
            return plain

        monkeypatch.setattr(entries, "inflate", counting)
        mid = cp.manifest
        with store.backend.read() as view:
            total = sum(len(data) for data in manifest.named_chunks(view.get, mid))
        assert total > 2 * consolidate.MANIFEST_FRAME  # (several 256 KiB frames' worth)
        worst = 0
        for name in names[::500]:
            entries.clear_cache()
            decoded[0] = 0
            with store.backend.read() as view:
                found = manifest.find(view.get, mid, name.encode())
            assert found is not None and found.path == name.encode()
            worst = max(worst, decoded[0])
        # A binary search of ~log2(leaves) probes, each a prefix of one small frame (in
        # 256 KiB frames of distinct entries: ~530 KB; in 1 MiB ones, ~670 KB).
        assert worst < 3 * consolidate.MANIFEST_FRAME // 2
