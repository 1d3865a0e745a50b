"""Corruption is found, named and reported; damaged or unknown stores fail cleanly."""

from __future__ import annotations

import msgpack
import pytest
from helpers import assert_one_line_error, run_snapstore

from snapstore.errors import CorruptError, FormatVersionError, UnsafePathError
from snapstore.records.checkpoint import seq_key
from snapstore.records.manifest import FILE, SYMLINK, Entry
from snapstore.storage.backend import JOURNAL_KEY
from snapstore.storage.lmdb_backend import LmdbBackend
from snapstore.storage.objects import chunk_id
from snapstore.store import Store
from snapstore.testing import build_tree, random_bytes


def _flip_chunk_byte(store_dir, cid: bytes, offset: int = -1) -> None:
    """Flip one byte of chunk ``cid``'s stored value, through the LMDB API."""
    backend = LmdbBackend(str(store_dir))
    try:
        env = backend.env
        db = env.open_db(b"chunks")
        with env.begin(write=True, db=db) as txn:
            value = bytearray(txn.get(cid))
            value[offset] ^= 0x01
            txn.put(cid, bytes(value))
    finally:
        backend.close()


@pytest.fixture
def damaged(tree, store):
    """A store whose file ``victim.bin`` (one chunk) has a flipped byte; yields its chunk id."""
    build_tree(tree, {"victim.bin": random_bytes(5000, 1), "fine.txt": b"fine\n"})
    cp = store.snapshot("one")
    entry = next(e for e in store.entries(cp.id) if e.path == b"victim.bin")
    _flip_chunk_byte(store.store_dir, entry.ref)  # a one-chunk stream's id is its chunk's id
    return entry.ref.hex()


def test_verify_is_clean_on_a_good_store(tree, store):
    build_tree(tree, {"a": random_bytes(300_000, 2), "b": b"x" * 100_000})
    store.snapshot("one", conversation=[{"role": "user", "content": "hi"}])
    report = store.verify()
    assert report.ok and report.problems == []
    assert report.checkpoints == 1 and report.files == 2 and report.chunks > 3


def test_verify_names_the_chunk_and_the_file(store, damaged):
    report = store.verify()
    assert not report.ok
    chunk_problems = [p for p in report.problems if p.kind == "chunk"]
    assert [p.id for p in chunk_problems] == [damaged]
    file_problems = [p for p in report.problems if p.kind == "file"]
    assert [p.path for p in file_problems] == ["victim.bin"]
    assert file_problems[0].checkpoint == store.resolve("latest").id


def test_verify_reports_every_problem(tree, store):
    build_tree(tree, {"a": random_bytes(4000, 3), "b": random_bytes(4000, 4)})
    cp = store.snapshot("one")
    for e in store.entries(cp.id):
        _flip_chunk_byte(store.store_dir, e.ref, offset=10)
    report = store.verify()
    assert {p.path for p in report.problems if p.kind == "file"} == {"a", "b"}
    assert len([p for p in report.problems if p.kind == "chunk"]) == 2


def test_reading_a_damaged_file_raises_corrupt_error(store, damaged):
    with pytest.raises(CorruptError) as info:
        store.read_bytes("latest", "victim.bin")
    assert damaged in str(info.value)
    assert store.read_bytes("latest", "fine.txt") == b"fine\n"


def test_cli_verify_exits_6_naming_chunk_and_file(tree, damaged):
    proc = run_snapstore("verify", cwd=tree)
    assert proc.returncode == 6
    out = proc.stdout.decode()
    assert damaged in out and "victim.bin" in out
    assert b"Traceback" not in proc.stderr
    as_json = run_snapstore("verify", "--json", cwd=tree)
    assert as_json.returncode == 6
    import json

    doc = json.loads(as_json.stdout)
    assert doc["ok"] is False
    assert {(p["kind"], p["id"]) for p in doc["problems"]} >= {("chunk", damaged)}
    assert "victim.bin" in {p["path"] for p in doc["problems"]}


def test_cli_cat_of_damaged_file_exits_6_with_one_line(tree, damaged):
    proc = run_snapstore("cat", "latest", "victim.bin", cwd=tree)
    assert proc.returncode == 6
    assert_one_line_error(proc.stderr)
    assert damaged in proc.stderr.decode()
    good = run_snapstore("cat", "latest", "fine.txt", cwd=tree)
    assert (good.returncode, good.stdout) == (0, b"fine\n")


def _set_meta(store_dir, key: bytes, value: bytes) -> None:
    backend = LmdbBackend(str(store_dir))
    try:
        with backend.write() as batch:
            batch.put("meta", key, value)
    finally:
        backend.close()


def test_unknown_format_version_is_refused(tree, store):
    store.snapshot("one")
    store_dir = store.store_dir
    store.close()
    _set_meta(store_dir, b"format", b"999")
    with pytest.raises(FormatVersionError):
        Store.open(tree)
    for args in (["list"], ["snapshot"], ["verify"], ["cat", "latest", "x"]):
        proc = run_snapstore(*args, cwd=tree)
        assert proc.returncode == 7, (args, proc.stderr)
        assert_one_line_error(proc.stderr)
        assert b"999" in proc.stderr


def test_other_chunker_parameters_are_refused(tree, store):
    import msgpack

    from snapstore.storage import chunker

    store_dir = store.store_dir
    store.close()
    other = {**chunker.PARAMS, "fastcdc": {**chunker.PARAMS["fastcdc"], "avg": 65536}}
    _set_meta(store_dir, b"chunker", msgpack.packb(other))
    with pytest.raises(FormatVersionError):
        Store.open(tree)
    proc = run_snapstore("list", cwd=tree)
    assert proc.returncode == 7
    assert_one_line_error(proc.stderr)


def test_damaged_meta_is_reported_as_corruption(tree, store):
    store_dir = store.store_dir
    store.close()
    _set_meta(store_dir, b"compression", b"not a number")
    proc = run_snapstore("list", cwd=tree)
    assert_one_line_error(proc.stderr)
    assert proc.returncode == 6


# -- verify applies every reader's validation --------------------------------------------------


_CONTENT = b"planted\n"


def _plant(store: Store, entries: list[Entry]) -> str:
    """A checkpoint with arbitrary entries (valid hashes, hostile paths)."""
    from restore_helpers import plant_checkpoint

    return plant_checkpoint(store, entries, _CONTENT)


def _file(path: bytes) -> Entry:
    return Entry(path, FILE, 0o644, len(_CONTENT), 0, chunk_id(_CONTENT))


UNSAFE = {
    "traversal": [_file(b"../escape.txt")],
    "absolute": [_file(b"/tmp/x")],
    "empty part": [_file(b"a//b")],
    "NUL": [_file(b"ok\x00x")],
    ".git": [_file(b".git/hooks/post-checkout")],
    "the store": [_file(b".snapstore/data.mdb")],
    "below a symlink": [Entry(b"evil", SYMLINK, 0o777, 0, 0, b"../outside"), _file(b"evil/passwd")],
    "below a file": [_file(b"f"), _file(b"f/under")],
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_verify_reports_a_manifest_that_restore_refuses(tree, store, case):
    store.snapshot("good")
    cid = _plant(store, UNSAFE[case])
    problems = [p for p in store.verify().problems if p.checkpoint == cid]
    assert [p.kind for p in problems] == ["manifest"], store.verify().problems
    with pytest.raises(UnsafePathError):
        store.restore(cid)  # the reader refuses the same manifest


def test_verify_cli_fails_on_an_unsafe_manifest(tree, store):
    _plant(store, UNSAFE["traversal"])
    store.close()
    done = run_snapstore("verify", cwd=tree)
    assert done.returncode == CorruptError.exit_code, done.stdout
    assert b"escape.txt" in done.stdout + done.stderr


@pytest.mark.parametrize(
    "value",
    [
        msgpack.packb({"kind": "restore", "target": 5, "before": b"", "time_ns": 1}),
        msgpack.packb({"kind": "restore", "target": b"\1" * 32, "before": b"\2" * 32, "time_ns": 1e300}),
        msgpack.packb({"kind": "teleport", "target": b"\1" * 32, "before": b"\2" * 32, "time_ns": 1}),
        msgpack.packb([1, 2, 3]),
        b"\xc1 not msgpack",
    ],
    ids=["empty-before", "huge-time", "unknown-kind", "not-a-map", "garbage"],
)
def test_verify_reports_a_damaged_oplog_entry(tree, store, value):
    store.snapshot("one")
    with store.backend.write() as batch:
        batch.put("oplog", seq_key(1), value)
    problems = store.verify().problems
    assert [p.kind for p in problems] == ["oplog"], problems


def test_verify_accepts_real_oplog_entries(tree, store):
    (tree / "a").write_bytes(b"1")
    store.snapshot("one")
    (tree / "a").write_bytes(b"2")
    store.snapshot("two")
    store.restore("latest~1")
    store.undo()
    assert len(store.operations()) == 2
    assert store.verify().ok, store.verify().problems


@pytest.mark.parametrize(
    "value",
    [b"\x05", msgpack.packb({"target": b"\1" * 32, "steps": [["write", b"../x"]]})],
    ids=["an-int", "unsafe-step"],
)
def test_verify_reports_a_damaged_journal(tree, store, value):
    store.snapshot("one")
    with store.backend.write() as batch:
        batch.put("journal", JOURNAL_KEY, value)
    problems = store.verify().problems
    assert [p.kind for p in problems] == ["journal"], problems


def _big_tree(tree, salt: str) -> None:
    # Enough entries for a manifest of several chunks (one with a streams record).
    build_tree(tree, {f"d{i // 100:02d}/f{i:04d}.txt": f"{salt} {i}\n".encode() for i in range(1500)})


def _put_stream_record(store_dir, key: bytes, value: bytes) -> None:
    backend = LmdbBackend(str(store_dir))
    try:
        with backend.env.begin(write=True, db=backend.env.open_db(b"streams")) as txn:
            txn.put(key, value)
    finally:
        backend.close()


def test_a_manifest_record_put_under_another_manifests_id_is_found(tree, store):
    """A manifest is named by its tree: a streams record moved under another manifest's id (a
    whole valid tree, so every chunk and node checks out) no longer matches the id."""
    _big_tree(tree, "one")
    first = store.snapshot("one")
    _big_tree(tree, "two")
    second = store.snapshot("two")
    with store.backend.read() as view:
        first_record = view.get("streams", first.manifest)
        assert first_record is not None and view.get("streams", second.manifest) is not None
    assert store.verify().ok
    _put_stream_record(store.store_dir, second.manifest, first_record)
    report = Store.open(store.root).verify()
    problems = [p for p in report.problems if p.kind == "manifest"]
    assert [p.id for p in problems] == [second.manifest.hex()]
    assert "names neither its tree nor its content" in problems[0].message


def test_a_manifest_named_by_its_contents_hash_still_verifies(tree, store, monkeypatch):
    """Manifests written before tree ids are named by the BLAKE3 of their bytes: they verify,
    and a record moved under such an id is still found."""
    from snapstore.records import manifest
    from snapstore.storage import objects

    write = objects.write_stream_known
    monkeypatch.setattr(manifest.objects, "write_stream_known", lambda *a, **k: write(*a, **{**k, "tree": False}))
    _big_tree(tree, "old")
    first = store.snapshot("one")
    _big_tree(tree, "older")
    second = Store.open(store.root).snapshot("two")  # (a first snapshot: written whole)
    monkeypatch.undo()
    mid = second.manifest
    with store.backend.read() as view:
        record = view.get("streams", mid)
        assert record is not None and not objects.id_matches(mid, record)
        assert chunk_id(objects.read_stream(view.get, mid)) == mid
        first_record = view.get("streams", first.manifest)
    assert store.verify().ok
    _put_stream_record(store.store_dir, mid, first_record)
    report = Store.open(store.root).verify()
    assert [p.id for p in report.problems if p.kind == "manifest"] == [second.manifest.hex()]


def test_each_chunk_of_a_lost_frame_is_named_by_its_own_line(tree):
    """Two chunks in one frame of a pack that is gone: two lines, each naming its own chunk
    (the second used to repeat the first's message word for word)."""
    from snapstore.storage import entries

    build_tree(tree, {"a.txt": b"one\n", "b.txt": b"two\n"})
    with Store.init(tree) as store:
        store.snapshot("A")
        refs = {e.path: e.ref for e in store.entries("latest")}
        with store.backend.write() as batch:
            pid = entries.parse(refs[b"a.txt"], batch.get("chunks", refs[b"a.txt"]) or b"").pack
            assert entries.parse(refs[b"b.txt"], batch.get("chunks", refs[b"b.txt"]) or b"").pack == pid
            batch.delete("packs", pid)
        entries.clear_cache()
        report = store.verify()
    lines = [p.message for p in report.problems if p.kind == "chunk"]
    assert len(lines) == len(set(lines)) == 2
    for cid in refs.values():
        assert any(line.startswith(f"chunk {cid.hex()}") for line in lines)


def test_a_bit_flipped_inside_an_incompressible_frame_names_the_chunk_the_file_and_the_checkpoint(tree):
    """Random bytes are stored in a raw zstd block, which decodes whatever its bytes are: the
    per-chunk re-hash is the only content check there (frames carry no checksum).  Without it
    verify said only "pack damaged", and repair had nothing to store again."""
    import random

    from snapstore.storage import entries

    victim = random.Random(7).randbytes(5000)
    build_tree(tree, {"victim.bin": victim, "fine.txt": b"fine\n"})
    with Store.init(tree) as store:
        cp = store.snapshot("A")
        cid = next(e.ref for e in store.entries(cp.id) if e.path == b"victim.bin")
        with store.backend.write() as batch:
            e = entries.parse(cid, batch.get("chunks", cid) or b"")
            pack = bytearray(batch.get("packs", e.pack) or b"")
            pack[e.frame_off + e.frame_len - 100] ^= 0x04  # (inside the block's payload)
            batch.put("packs", e.pack, bytes(pack))
        entries.clear_cache()
        report = store.verify()
    named = {(p.kind, p.id) for p in report.problems}
    assert ("chunk", cid.hex()) in named, report.problems
    files = [p for p in report.problems if p.kind == "file"]
    assert [(p.path, p.checkpoint) for p in files] == [("victim.bin", cp.id)]
