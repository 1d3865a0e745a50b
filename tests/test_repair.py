"""``snapstore verify --repair``: the damaged chunks the working tree still holds are stored
again (new packs, replaced entries), every checkpoint naming them reads them again, and what
the tree no longer holds is still reported.  Real CLI processes, a real LMDB store."""

from __future__ import annotations

import json
import os
import random

from snapstore.storage import entries, objects
from snapstore.store import Store
from snapstore.testing import build_tree
from tests.helpers import run_snapstore


def files(n: int = 40) -> dict[str, bytes]:
    return {f"src/m{i:02d}.py": f"value_{i} = {i}\n".encode() * (20 + i) for i in range(n)}


def chunk_of(store: Store, ref: str, path: str) -> bytes:
    """The one chunk of a small file (its stream id is its chunk's id)."""
    entry = next(e for e in store.entries(ref) if e.path == path.encode())
    return entry.ref


def damage_frame(store: Store, cid: bytes) -> None:
    """Flip a byte inside the frame holding ``cid`` (every chunk of that frame is damaged)."""
    with store.backend.write() as batch:
        e = entries.parse(cid, batch.get("chunks", cid) or b"")
        pack = bytearray(batch.get("packs", e.pack) or b"")
        pack[e.frame_off + e.frame_len // 2] ^= 0x55
        batch.put("packs", e.pack, bytes(pack))
    entries.clear_cache()


def damage_entry(store: Store, cid: bytes) -> None:
    with store.backend.write() as batch:
        value = bytearray(batch.get("chunks", cid) or b"")
        value[-3] ^= 0x55  # (in the pack id: the entry names no pack the store has)
        batch.put("chunks", cid, bytes(value))


def verify(tree) -> tuple[int, str]:
    done = run_snapstore("verify", cwd=tree)
    return done.returncode, done.stdout.decode()


def test_a_damaged_frame_is_stored_again_from_the_tree_and_every_checkpoint_reads_back(tree):
    build_tree(tree, files())
    with Store.init(tree) as store:
        a = store.snapshot("A")
        (tree / "src/new.py").write_bytes(b"added\n")
        b = store.snapshot("B")
        cid = chunk_of(store, a.id, "src/m07.py")
        with store.backend.read() as view:
            damaged_pack = entries.parse(cid, view.get("chunks", cid) or b"").pack
        damage_frame(store, cid)
    code, out = verify(tree)
    assert code == 6 and "problem: chunk" in out and "problem: pack" in out
    done = run_snapstore("verify", "--repair", cwd=tree)
    out = done.stdout.decode()
    assert done.returncode == 0, (out, done.stderr)
    assert done.stderr == b""
    damaged = out.count("problem:")
    assert damaged == 0 and "repaired " in out and "damaged chunk(s) from the working tree" in out
    assert "not in the tree" not in out
    assert verify(tree)[0] == 0
    with Store.open(tree) as store:
        with store.backend.read() as view:
            assert view.get("packs", damaged_pack) is None  # emptied, and gone
        for ref, want in ((a.id, files()), (b.id, {**files(), "src/new.py": b"added\n"})):
            assert {e.path.decode(): store.read_bytes(ref, e.path) for e in store.entries(ref)} == want


def test_what_the_tree_no_longer_holds_stays_reported_and_the_tree_is_not_touched(tree):
    build_tree(tree, files())
    with Store.init(tree) as store:
        a = store.snapshot("A")
        old = chunk_of(store, a.id, "src/m03.py")
        (tree / "src/m03.py").write_bytes(b"a new version\n")
        store.snapshot("B")
        damage_entry(store, old)
    before = {p: p.read_bytes() for p in tree.rglob("*.py")}
    mtimes = {p: p.stat().st_mtime_ns for p in before}
    done = run_snapstore("verify", "--repair", cwd=tree)
    out = done.stdout.decode()
    assert done.returncode == 6, out
    assert f"problem: chunk: chunk {old.hex()}" in out
    assert "repaired 0 of 1 damaged chunk(s)" in out and "1 not in the tree any more" in out
    assert {p: p.read_bytes() for p in tree.rglob("*.py")} == before
    assert {p: p.stat().st_mtime_ns for p in before} == mtimes
    assert verify(tree)[0] == 6


def test_the_chunks_and_index_nodes_of_a_big_file_are_stored_again(tree):
    rng = random.Random(3)
    big = b"".join(b"%08d %s\n" % (i, rng.randbytes(24).hex().encode()) for i in range(60_000))  # ~3.4 MB
    build_tree(tree, {"big.txt": big, "small.txt": b"small\n"})
    with Store.init(tree) as store:
        a = store.snapshot("A")
        sid = chunk_of(store, a.id, "big.txt")
        with store.backend.read() as view:
            nodes = list(objects.walk_stream(view.get, sid))
        index = [cid for cid, _, height in nodes if height > 0]
        leaves = [cid for cid, _, height in nodes if height == 0]
        assert index and len(leaves) > 4
        damage_entry(store, index[0])
        damage_entry(store, leaves[len(leaves) // 2])
    done = run_snapstore("verify", "--repair", "--json", cwd=tree)
    doc = json.loads(done.stdout)
    assert done.returncode == 0, doc
    assert (doc["damaged_chunks"], doc["repaired_chunks"], doc["ok"]) == (2, 2, True)
    assert not doc["before"]["ok"] and doc["after"]["ok"]
    with Store.open(tree) as store:
        assert store.read_bytes(a.id, "big.txt") == big


def test_a_symlink_to_a_file_outside_the_tree_is_not_read(tree, tmp_path):
    """The damaged chunk's content is outside the tree, behind a symlink in it: repair never
    follows it (the walk records the link, the open refuses links)."""
    build_tree(tree, files(4))
    with Store.init(tree) as store:
        a = store.snapshot("A")
        cid = chunk_of(store, a.id, "src/m01.py")
        outside = tmp_path / "outside.py"
        outside.write_bytes((tree / "src/m01.py").read_bytes())
        (tree / "src/m01.py").unlink()
        os.symlink(outside, tree / "src/m01.py")
        damage_entry(store, cid)
    done = run_snapstore("verify", "--repair", cwd=tree)
    assert done.returncode == 6
    assert "repaired 0 of 1 damaged chunk(s)" in done.stdout.decode()


def test_a_sound_store_is_verified_and_nothing_is_written(tree):
    build_tree(tree, files(8))
    with Store.init(tree) as store:
        store.snapshot("A")
        with store.backend.read() as view:
            packs = sorted(k for k, _ in view.items("packs"))
    done = run_snapstore("verify", "--repair", cwd=tree)
    assert done.returncode == 0
    assert "repaired" not in done.stdout.decode() and ": ok" in done.stdout.decode()
    with Store.open(tree) as store, store.backend.read() as view:
        assert sorted(k for k, _ in view.items("packs")) == packs


def test_the_sound_frames_of_a_damaged_pack_are_moved_before_the_pack_goes(tree):
    """A pack of several frames, one damaged: the damaged frame's chunks come from the tree,
    the other frames' chunks are copied out of the pack (they read back), and only then is the
    pack deleted: nothing that named it is left without its bytes."""
    rng = random.Random(5)
    words = [rng.randbytes(4).hex() for _ in range(3000)]
    build_tree(tree, {f"f{i:02d}.txt": " ".join(rng.choice(words) for _ in range(9000)).encode() for i in range(60)})
    with Store.init(tree) as store:
        a = store.snapshot("A")
        frames: dict[bytes, set[int]] = {}
        with store.backend.read() as view:
            for cid, value in view.items("chunks"):
                e = entries.parse(cid, value)
                frames.setdefault(e.pack, set()).add(e.frame_off)
            pid = next(p for p, offs in frames.items() if len(offs) >= 2)
            victim = next(cid for cid, value in view.items("chunks") if entries.parse(cid, value).pack == pid)
        damage_frame(store, victim)
    done = run_snapstore("verify", "--repair", "--json", cwd=tree)
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["after"]["ok"], doc
    assert doc["repaired_chunks"] == doc["damaged_chunks"] > 0
    with Store.open(tree) as store:
        with store.backend.read() as view:
            assert view.get("packs", pid) is None
        for e in store.entries(a.id):
            assert store.read_bytes(a.id, e.path) == (tree / e.path.decode()).read_bytes()


def test_a_missing_chunk_the_tree_holds_is_stored_again(tree):
    build_tree(tree, files(6))
    with Store.init(tree) as store:
        a = store.snapshot("A")
        cid = chunk_of(store, a.id, "src/m02.py")
        with store.backend.write() as batch:
            batch.delete("chunks", cid)
    done = run_snapstore("verify", "--json", cwd=tree)
    assert done.returncode == 6 and json.loads(done.stdout)["missing_chunks"] == [cid.hex()]
    done = run_snapstore("verify", "--repair", cwd=tree)
    assert done.returncode == 0, done.stdout
    assert "repaired 1 of 1 damaged chunk(s)" in done.stdout.decode()
    with Store.open(tree) as store:
        assert store.read_bytes(a.id, "src/m02.py") == files(6)["src/m02.py"]


def test_a_file_swapped_for_a_symlink_between_the_walk_and_the_open_is_not_followed(tree, tmp_path, monkeypatch):
    """The walk saw a regular file; before repair opens it, it becomes a symlink to a file
    outside the tree that holds the damaged chunk's content.  The open refuses the link
    (O_NOFOLLOW): nothing outside the tree is read, and the chunk stays damaged."""
    from snapstore.ops import repair

    build_tree(tree, files(4))
    outside = tmp_path / "outside.py"
    outside.write_bytes(files(4)["src/m01.py"])
    with Store.init(tree) as store:
        a = store.snapshot("A")
        damage_entry(store, chunk_of(store, a.id, "src/m01.py"))
        real_walk = repair.scan.walk

        def racing_walk(*args, **kwargs):
            for f in real_walk(*args, **kwargs):
                if f.path == b"src/m01.py":  # (seen as a file; swapped before the open)
                    os.unlink(tree / "src/m01.py")
                    os.symlink(outside, tree / "src/m01.py")
                yield f

        monkeypatch.setattr(repair.scan, "walk", racing_walk)
        report = store.repair()
    assert (report.damaged, report.repaired) == (1, 0)
    assert not report.ok


def test_repair_never_opens_what_the_walk_did_not_report_as_a_file(tree, tmp_path, monkeypatch):
    """Symlinks (in the tree and out of it) and directories are passed over by kind, before
    any open: the walk's kind is the first guard, the no-follow open the second."""
    from snapstore.ops import repair

    build_tree(tree, files(4))
    os.symlink("src/m01.py", tree / "inner-link")
    os.symlink(tmp_path, tree / "outer-link")
    (tree / "empty").mkdir()
    opened: list[bytes] = []
    real_open = repair.open_beneath

    def spy(root, rel, flags):
        opened.append(rel)
        return real_open(root, rel, flags)

    with Store.init(tree) as store:
        a = store.snapshot("A")
        damage_entry(store, chunk_of(store, a.id, "src/m03.py"))  # (the last file: every one is read)
        monkeypatch.setattr(repair, "open_beneath", spy)
        report = store.repair()
    assert report.ok
    assert sorted(opened) == sorted(p.encode() for p in files(4))


def test_a_missing_index_node_is_listed_and_stored_again(tree):
    """An index node's entry gone (not damaged): verify lists it among the missing chunks, and
    repair stores it again from the file (it was reported only as a stream problem, so repair
    never looked for it; found by make torture's small stores)."""
    rng = random.Random(11)
    big = b"".join(b"%08d %s\n" % (i, rng.randbytes(24).hex().encode()) for i in range(30_000))
    build_tree(tree, {"big.txt": big})
    with Store.init(tree) as store:
        a = store.snapshot("A")
        sid = chunk_of(store, a.id, "big.txt")
        with store.backend.read() as view:
            index = [cid for cid, _, height in objects.walk_stream(view.get, sid) if height > 0]
        with store.backend.write() as batch:
            batch.delete("chunks", index[0])
    done = run_snapstore("verify", "--json", cwd=tree)
    assert done.returncode == 6 and index[0].hex() in json.loads(done.stdout)["missing_chunks"]
    done = run_snapstore("verify", "--repair", cwd=tree)
    assert done.returncode == 0, done.stdout
    with Store.open(tree) as store:
        assert store.read_bytes(a.id, "big.txt") == big
