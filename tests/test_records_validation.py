"""Records with valid hashes but hostile values (issue 16.5): each is "damaged" (exit 6) and
isolated like a record whose hash does not match, through the library and the CLI.

Every case is planted with its right BLAKE3 id, through the LMDB backend of a real store, so
only the value checks of records.schema can catch it.
"""

from __future__ import annotations

import math
import subprocess
import sys

import msgpack
import pytest
from helpers import assert_one_line_error, subprocess_env

from snapstore.errors import CorruptError, UsageError
from snapstore.records import manifest, schema
from snapstore.records.checkpoint import key_seq, next_seq, seq_key
from snapstore.storage import objects
from snapstore.storage.objects import chunk_id
from snapstore.store import Store
from snapstore.testing import build_tree


def _deep(levels: int) -> dict:
    """``levels`` dicts, each inside the one before."""
    d: dict = {}
    for _ in range(levels - 1):
        d = {"x": d}
    return d


def plant_checkpoint(store: Store, base, tag: bytes = b"bad", **fields) -> bytes:
    """Write a record like ``base``'s with ``fields`` replaced, its right id, a log entry and
    ``tag``; returns the id."""
    record = {
        "v": 1,
        "parent": bytes.fromhex(base.id),
        "time_ns": base.time_ns + 1,
        "message": "planted",
        "task": None,
        "tags": [],
        "kind": "checkpoint",
        "manifest": base.manifest,
        "conversation": None,
        "metadata": {},
        "stats": {},
    }
    record.update(fields)
    packed = msgpack.packb(record, use_bin_type=True)
    cid = chunk_id(packed)
    _append_log(store, cid)
    with store.backend.write() as batch:
        batch.put("checkpoints", cid, packed)
        batch.put("tags", tag, cid)
    return cid


def _append_log(store: Store, value: bytes) -> None:
    with store.backend.read() as view:
        last = next(iter(view.items("log", reverse=True)), None)
    with store.backend.write() as batch:
        batch.put("log", seq_key(next_seq(last[0] if last else None)), value)


HOSTILE = {
    "time_inf": dict(time_ns=math.inf),
    "time_1e300": dict(time_ns=1e300),
    "time_negative": dict(time_ns=-1),
    "time_2_64": dict(time_ns=(1 << 64) - 1),
    "time_bool": dict(time_ns=True),
    "message_int": dict(message=5),
    "message_bytes": dict(message=b"hi"),
    "task_list": dict(task=["a"]),
    "tags_str": dict(tags="abc"),
    "tags_bytes": dict(tags=[b"x"]),
    "kind_unknown": dict(kind="weird"),
    "metadata_bytes": dict(metadata={"k": b"\x00\x01"}),
    "metadata_list": dict(metadata=[1, 2]),
    "metadata_deep": dict(metadata=_deep(1000)),
    "metadata_nan": dict(metadata={"x": math.nan}),
    "stats_str": dict(stats={"files": "many"}),
    "stats_negative": dict(stats={"files": -1}),
    "stats_float": dict(stats={"skipped": {"special": 1.5}}),
    "manifest_short": dict(manifest=b"\x01" * 31),
    "parent_str": dict(parent="ab" * 32),
    "conversation_empty": dict(conversation=b""),
}


@pytest.fixture
def good(store, tree):
    """A store with one good checkpoint (its tree is ``a.txt``)."""
    build_tree(tree, {"a.txt": b"good\n"})
    return store.snapshot("good one")


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_checkpoint_is_damaged_and_isolated(store, tree, good, run_cli, case):
    cid = plant_checkpoint(store, good, **HOSTILE[case])
    # The library: the record is left out of every listing, named it is CorruptError.
    assert [c.id for c in store.checkpoints(include_safety=True)] == [good.id]
    assert store.resolve("latest").id == good.id
    with pytest.raises(CorruptError, match="damaged"):
        store.resolve("bad")
    with pytest.raises(CorruptError):
        store.resolve(cid.hex())
    assert store.stats().checkpoints == 1
    assert not store.verify().ok
    # The CLI: the commands that list or read the rest keep working.
    for argv, code in (
        (["list"], 0),
        (["list", "--json"], 0),
        (["show", "latest"], 0),
        (["stats"], 0),
        (["show", "bad"], 6),
        (["verify"], 6),
    ):
        r = run_cli(*argv, cwd=tree)
        assert r.code == code, (argv, r.err)
        if argv[0] == "show" and code == 6:
            assert_one_line_error(r.err)
            assert "damaged" in r.err or "corrupt" in r.err
    assert b"planted" not in run_cli("list", cwd=tree).out


def _real(tree, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snapstore", *argv],
        cwd=tree,
        capture_output=True,
        env=subprocess_env(),
        timeout=120,
    )


@pytest.mark.parametrize("case", ["time_inf", "metadata_deep", "metadata_bytes"])
def test_hostile_checkpoint_through_python_m_snapstore(store, tree, good, case):
    plant_checkpoint(store, good, **HOSTILE[case])
    store.close()
    build_tree(tree, {"a.txt": b"changed\n"})
    expected = {
        ("list",): 0,
        ("list", "--json"): 0,
        ("show", "bad"): 6,
        ("stats",): 0,
        ("verify",): 6,
        ("gc",): 0,  # the damaged record's references are readable: gc keeps what they reach
        ("snapshot", "-m", "after"): 0,
        ("restore", good.id[:12]): 0,
    }
    for argv, code in expected.items():
        r = _real(tree, *argv)
        assert r.returncode == code, (argv, r.stderr)
        if code == 6 and argv[0] != "verify":  # verify reports on stdout
            assert_one_line_error(r.stderr)
        else:
            assert b"Traceback" not in r.stderr
    assert (tree / "a.txt").read_bytes() == b"good\n"
    with Store.open(tree) as s:
        after = s.resolve(":/after")
        assert after.parent == good.id  # the new checkpoint's parent skips the damaged one
        assert [c.message for c in s.checkpoints()] == ["after", "good one"]


@pytest.mark.parametrize("value", [b"", b"\x01" * 31, b"\x01" * 33])
def test_damaged_log_and_tag_values(store, tree, good, run_cli, value):
    _append_log(store, value)
    with store.backend.write() as batch:
        batch.put("tags", b"bad", value)
    assert [c.id for c in store.checkpoints()] == [good.id]
    with pytest.raises(CorruptError):
        store.resolve("bad")
    assert run_cli("list", cwd=tree).code == 0
    r = run_cli("show", "bad", cwd=tree)
    assert r.code == 6, r.err
    assert_one_line_error(r.err)


def test_a_tag_naming_a_missing_checkpoint_is_still_a_ref_error(store, tree, good, run_cli):
    with store.backend.write() as batch:
        batch.put("tags", b"gone", b"\x07" * 32)
    r = run_cli("show", "gone", cwd=tree)
    assert r.code == 4, r.err
    assert "no longer exists" in r.err


def test_a_tag_naming_a_checkpoint_with_a_bad_hash_is_damaged(store, tree, good, run_cli):
    with store.backend.read() as view:
        packed = view.get("checkpoints", bytes.fromhex(good.id))
    with store.backend.write() as batch:
        batch.put("checkpoints", bytes.fromhex(good.id), packed.replace(b"good one", b"evil one"))
        batch.put("tags", b"t1", bytes.fromhex(good.id))
    r = run_cli("show", "t1", cwd=tree)
    assert r.code == 6, r.err
    assert_one_line_error(r.err)


def _plant_op(store: Store, **fields) -> None:
    with store.backend.read() as view:
        cps = [c for c in store.checkpoints(include_safety=True)]
        last = next(iter(view.items("oplog", reverse=True)), None)
    record = {
        "kind": "restore",
        "target": bytes.fromhex(cps[-1].id),
        "before": bytes.fromhex(cps[0].id),
        "paths": None,
        "time_ns": 1,
        "changed": 1,
    }
    record.update(fields)
    with store.backend.write() as batch:
        batch.put("oplog", seq_key(next_seq(last[0] if last else None)), msgpack.packb(record))


@pytest.mark.parametrize(
    "fields",
    [
        dict(time_ns=math.inf),
        dict(time_ns=(1 << 64) - 1),
        dict(before=b""),
        dict(target=b"\x01" * 5),
        dict(kind="explode"),
        dict(changed=-5),
        dict(paths=[b""]),
        dict(paths="abc"),
    ],
    ids=lambda f: "-".join(f"{k}" for k in f),
)
def test_hostile_oplog_entry_is_damaged(store, tree, good, run_cli, fields):
    build_tree(tree, {"a.txt": b"second\n"})
    store.snapshot("second")
    _plant_op(store, **fields)
    with pytest.raises(CorruptError, match="operation log entry 1 is damaged"):
        store.operations()
    for argv in (["oplog"], ["undo"], ["prune", "--keep-last", "1"]):
        r = run_cli(*argv, cwd=tree)
        assert r.code == 6, (argv, r.err)
        assert_one_line_error(r.err)
    assert run_cli("list", cwd=tree).code == 0
    assert (tree / "a.txt").read_bytes() == b"second\n"  # undo refused before any write


@pytest.mark.parametrize(
    "record",
    [
        {"base": None, "count": 0, "depth": 0, "total": math.inf, "chunks": []},
        {"base": None, "count": 0, "depth": 0, "total": 0, "chunks": [[b"x", 1, 1]]},
        {"base": None, "count": 3, "depth": 0, "total": 3, "chunks": []},
        {"base": b"\x01" * 32, "count": 1, "depth": 999, "total": 1, "chunks": []},
        {"base": None, "count": 0, "depth": 0, "total": 0, "chunks": "no"},
        [1, 2, 3],
    ],
)
def test_hostile_conversation_record_is_damaged(store, tree, run_cli, record):
    build_tree(tree, {"a.txt": b"x"})
    cp = store.snapshot("talk", conversation=[{"role": "user", "content": "hi"}])
    with store.backend.write() as batch:
        batch.put("conversations", cp.conversation, msgpack.packb(record))
    with pytest.raises(CorruptError, match="conversation"):
        store.conversation("latest")
    r = run_cli("show", "--conversation", "latest", cwd=tree)
    assert r.code == 6, r.err
    assert_one_line_error(r.err)


@pytest.mark.parametrize("value", [b"\xff\xfe", b"-3", b"lots", b"7 d"])
def test_damaged_config_value_is_damaged_and_snapshot_still_works(store, tree, good, run_cli, value):
    with store.backend.write() as batch:
        batch.put("meta", b"config:retention.keep-last", value)
    with pytest.raises(CorruptError, match="retention.keep-last is damaged"):
        store.config()
    r = run_cli("config", cwd=tree)
    assert r.code == 6
    assert_one_line_error(r.err)
    build_tree(tree, {"a.txt": b"more\n"})
    cp = store.snapshot("more")
    assert any("automatic retention failed" in w for w in cp.warnings)
    assert run_cli("config", "--unset", "retention.keep-last", cwd=tree).code == 0
    assert store.config()["retention.keep-last"] == "off"


# -- the write side ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "metadata, why",
    [
        (_deep(schema.MAX_METADATA_DEPTH + 1), "nested deeper"),
        ({"k": b"bytes"}, "bytes"),
        ({1: "int key"}, "key is not a string"),
        ({"x": math.inf}, "not finite"),
        ({"x": 1 << 64}, "out of range"),
        ({"x": list(range(schema.MAX_METADATA_ITEMS))}, "more than"),
        ({"x": "y" * (schema.MAX_METADATA_CHARS + 1)}, "characters"),
        ([1, 2], "dict"),
    ],
)
def test_metadata_is_bounded_on_write(store, tree, metadata, why):
    build_tree(tree, {"a.txt": b"x"})
    with pytest.raises(UsageError, match=why):
        store.snapshot("m", metadata=metadata)
    assert store.checkpoints() == []


def test_metadata_at_the_bounds_is_stored_and_reads_back(store, tree):
    build_tree(tree, {"a.txt": b"x"})
    deepest = _deep(schema.MAX_METADATA_DEPTH)
    cp = store.snapshot("m", metadata=deepest)
    assert store.resolve("latest").metadata == deepest == cp.metadata


def test_message_and_task_are_bounded_on_write(store, tree):
    build_tree(tree, {"a.txt": b"x"})
    with pytest.raises(UsageError, match="message"):
        store.snapshot("m" * (schema.MAX_TEXT + 1))
    with pytest.raises(UsageError, match="task"):
        store.snapshot("ok", task="t" * (schema.MAX_TEXT + 1))
    assert store.checkpoints() == []


def test_planted_seq_keys_read_back_in_order(store, tree, good):
    # The helper appends after the last log key (guards the planting itself).
    cid = plant_checkpoint(store, good)
    with store.backend.read() as view:
        keys = [key_seq(k) for k, _ in view.items("log")]
    assert keys == [1, 2]
    assert store.resolve("latest").id == cid.hex()


@pytest.mark.parametrize("value", [b"99", b"0", b"-5", b"abc", b"\xff"])
def test_damaged_compression_level_is_damaged(store, tree, good, run_cli, value):
    with store.backend.write() as batch:
        batch.put("meta", b"compression", value)
    store.close()
    with pytest.raises(CorruptError, match="compression"):
        Store.open(tree)
    r = run_cli("snapshot", "-m", "x", cwd=tree)
    assert r.code == 6, r.err
    assert_one_line_error(r.err)


def test_conversation_message_nested_past_the_recursion_limit_is_damaged(store, tree, run_cli):
    import msgpack as mp

    from snapstore.records import conversation

    build_tree(tree, {"a.txt": b"x"})
    cp = store.snapshot("talk", conversation=[{"role": "user", "content": "hi"}])
    # A conversation with valid ids throughout whose one message is nested 100,000 levels.
    text = "[" * 100_000 + "]" * 100_000
    records = [mp.packb(text, use_bin_type=True)]
    data = b"".join(records)
    cid = chunk_id(data)
    record = mp.packb({"base": None, "count": 0, "depth": 0, "total": 1, "chunks": [[cid, len(data), 1]]})
    with store.backend.write() as batch:
        batch.put("chunks", cid, b"\x00" + data)
        batch.put("conversations", cid, record)
        packed = msgpack.packb(
            {"v": 1, "parent": None, "time_ns": cp.time_ns + 1, "message": "deep", "task": None,
             "tags": [], "kind": "checkpoint", "manifest": cp.manifest, "conversation": cid,
             "metadata": {}, "stats": {}},
            use_bin_type=True,
        )
        batch.put("checkpoints", chunk_id(packed), packed)
    _append_log(store, chunk_id(packed))
    with pytest.raises(CorruptError, match="damaged"):
        store.conversation("latest")
    with store.backend.read() as view, pytest.raises(CorruptError):
        conversation.read(view.get, cid)
    r = run_cli("show", "--conversation", "latest", cwd=tree)
    assert r.code == 6, r.err
    assert_one_line_error(r.err)


def test_references_of_a_damaged_record_for_gc(store, good):
    from snapstore.records.checkpoint import references

    cid = plant_checkpoint(store, good, time_ns=math.inf, metadata=_deep(1000))
    with store.backend.read() as view:
        packed = view.get("checkpoints", cid)
    assert references(cid, packed) == (good.manifest, None)
    with pytest.raises(CorruptError, match="does not match"):
        references(cid, packed + b"x")
    bad_ref = plant_checkpoint(store, good, tag=b"bad2", manifest=b"\x01" * 31)
    with store.backend.read() as view, pytest.raises(CorruptError, match="manifest"):
        references(bad_ref, view.get("checkpoints", bad_ref))


def test_gc_keeps_what_a_hostile_record_reaches_and_stops_when_it_cannot_know(store, tree, good):
    build_tree(tree, {"a.txt": b"only in the hostile checkpoint\n"})
    other = store.snapshot("other")
    cid = plant_checkpoint(store, other, time_ns=math.inf)
    store.delete(other.id)  # now only the hostile record reaches other's manifest and content
    store.gc()
    with store.backend.read() as view:
        entries = {e.path: e for e in manifest.iter_entries(view.get, other.manifest)}
        assert objects.read_stream(view.get, entries[b"a.txt"].ref) == b"only in the hostile checkpoint\n"
    assert cid  # still stored, still damaged
    plant_checkpoint(store, good, tag=b"bad2", manifest=b"\x01" * 31)
    with pytest.raises(CorruptError, match="gc stopped before removing anything"):
        store.gc()


def _records(*rows) -> bytes:
    return b"".join(msgpack.packb(list(r), use_bin_type=True) for r in rows)


def _row(path: bytes, n: int = 0) -> tuple:
    return (path, manifest.FILE, 0o644, n, 1, bytes(32))


def test_a_manifest_difference_reads_hostile_records_where_they_differ():
    mid = bytes(32)
    same = _records(_row(b"a"), _row(b"b"))
    old, new = manifest.difference_of_chunks(mid, [same], mid, [_records(_row(b"a"), _row(b"b", 5))])
    assert list(old) == list(new) == [b"b"] and new[b"b"].size == 5
    bad_shape = [_records(_row(b"a"), (b"b", manifest.FILE, 0o644, "big", 1, bytes(32)))]
    unsorted = [_records(_row(b"b"), _row(b"a"))]
    not_a_row = [_records(_row(b"a")) + msgpack.packb({"x": 1})]
    for hostile in (bad_shape, unsorted, not_a_row):
        with pytest.raises(CorruptError, match="is damaged"):
            manifest.difference_of_chunks(mid, [same], mid, hostile)
        with pytest.raises(CorruptError, match="is damaged"):
            manifest.difference_of_chunks(mid, hostile, mid, [same])
