"""prune, delete, the retention policy, config and stats (library and CLI)."""

from __future__ import annotations

import os

import pytest
from helpers import assert_one_line_error

from snapstore.errors import RefError, UsageError
from snapstore.ops import retention
from snapstore.records.checkpoint import Checkpoint
from snapstore.storage.backend import TABLES
from snapstore.store import Store


def write(root, name: str, data: bytes) -> None:
    with open(os.path.join(root, name), "wb") as f:
        f.write(data)


def make(store, root, n: int, **kw) -> list:
    out = []
    for i in range(n):
        write(root, "f", f"version {i}".encode())
        out.append(store.snapshot(f"s{i}", **kw))
    return out


def tables(store):
    with store.backend.read() as view:
        return {t: dict(view.items(t)) for t in TABLES}


def messages(store, **kw):
    return [c.message for c in store.checkpoints(**kw)]


# -- durations and the pure selection -------------------------------------------------------


@pytest.mark.parametrize(
    "text, seconds",
    [("30m", 1800), ("12h", 43200), ("7d", 604800), ("2w", 1209600), ("1d12h", 129600), ("90s", 90)],
)
def test_parse_duration(text, seconds):
    assert retention.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7", "d", "3x", "-1d", "0m", "1.5h", "7 days"])
def test_bad_durations_are_usage_errors(text):
    with pytest.raises(UsageError):
        retention.parse_duration(text)


def _cp(i: int, *, minutes_ago: int, kind: str = "checkpoint", tags=(), task=None) -> Checkpoint:
    return Checkpoint(
        id=f"{i:064x}", parent=None, time_ns=NOW - minutes_ago * 60 * 10**9, message=f"c{i}",
        task=task, tags=tuple(tags), kind=kind, manifest=b"\0" * 32, conversation=None,
        metadata={}, stats={}, seq=i,
    )


NOW = 10**18


def test_select_keep_rules_combine_as_a_union():
    cps = [
        _cp(1, minutes_ago=500, tags=["release"]),
        _cp(2, minutes_ago=400),
        _cp(3, minutes_ago=300, kind="safety"),
        _cp(4, minutes_ago=200),
        _cp(5, minutes_ago=20, kind="safety"),
        _cp(6, minutes_ago=10),
    ]
    def removed(policy, guarded=None, task=None):
        r = retention.select(cps, policy, guarded or {}, task=task, now_ns=NOW)
        return [c.message for c in r.removed]

    assert removed(retention.RetentionRules(keep_last=2)) == ["c1", "c2", "c3", "c5"]  # safety not counted
    assert removed(retention.RetentionRules(keep_within=30 * 60)) == ["c1", "c2", "c3", "c4"]
    assert removed(retention.RetentionRules(keep_tagged=True)) == ["c2", "c3", "c4", "c5", "c6"]
    assert removed(retention.RetentionRules(keep_last=1, keep_within=30 * 60, keep_tagged=True)) == [
        "c2", "c3", "c4"
    ]
    assert removed(retention.RetentionRules(keep_last=1), {cps[2].id: "undo"}) == ["c1", "c2", "c4", "c5"]


def test_select_with_a_task_leaves_other_tasks_alone():
    cps = [_cp(i, minutes_ago=100 - i, task="a" if i % 2 else "b") for i in range(1, 7)]
    r = retention.select(cps, retention.RetentionRules(keep_last=1), {}, task="a", now_ns=NOW)
    assert [c.message for c in r.removed] == ["c1", "c3"]
    assert r.kept == 1


# -- prune on a real store ------------------------------------------------------------------


def test_prune_keep_last_and_data_stays_readable(tree, store):
    cps = make(store, tree, 6)
    report = store.prune(keep_last=2)
    assert [c.id for c in report.removed] == [c.id for c in cps[:4]]
    assert messages(store) == ["s5", "s4"]
    assert store.read_bytes("latest", "f") == b"version 5"
    assert store.verify().ok  # a missing parent is not a problem
    assert store.changes("latest~1")  # show works on a checkpoint whose parent is gone
    store.gc()
    assert store.read_bytes("latest~1", "f") == b"version 4"
    assert store.verify().ok


def test_prune_keep_tagged_and_task(tree, store):
    make(store, tree, 3, task="a")
    write(tree, "g", b"tagged")
    store.snapshot("tagged", tags=["keep-me"], task="a")
    make(store, tree, 3, task="b")
    store.prune(keep_last=1, keep_tagged=True, task="a")
    assert messages(store, task="a") == ["tagged"]
    assert len(messages(store, task="b")) == 3
    store.prune(keep_last=1)
    assert messages(store) == ["s2"]
    with pytest.raises(RefError):
        store.resolve("keep-me")  # no --keep-tagged this time: the tag went with its checkpoint


def test_prune_keep_within_keeps_recent(tree, store):
    make(store, tree, 3)
    report = store.prune(keep_within="1h")
    assert report.removed == [] and report.kept == 3


def test_prune_dry_run_changes_nothing(tree, store):
    make(store, tree, 5)
    before = tables(store)
    report = store.prune(keep_last=1, dry_run=True)
    assert len(report.removed) == 4 and report.dry_run
    assert tables(store) == before


def test_prune_needs_a_rule_and_valid_values(tree, store):
    make(store, tree, 1)
    with pytest.raises(UsageError):
        store.prune()
    with pytest.raises(UsageError):
        store.prune(keep_last=0)
    with pytest.raises(UsageError):
        store.prune(keep_within="soon")


def test_checkpoints_undo_can_reach_are_protected(tree, store):
    cps = make(store, tree, 4)
    report = store.restore(cps[0].id)
    safety = report.safety
    pruned = store.prune(keep_last=1)
    alive = {c.id for c in store.checkpoints(include_safety=True)}
    assert cps[0].id in alive and safety.id in alive  # target and before of the last restore
    assert pruned.protected >= 1
    with pytest.raises(UsageError, match="undo"):
        store.delete(cps[0].id)
    store.gc(compact=True)
    store.undo()
    with open(tree / "f", "rb") as f:
        assert f.read() == b"version 3"
    assert store.verify().ok


def test_only_the_newest_operations_are_protected(tree, store):
    cps = make(store, tree, 2)
    for i in range(retention.UNDO_DEPTH + 1):
        write(tree, "g", f"edit {i}".encode())  # each safety checkpoint holds a unique tree
        store.restore(cps[i % 2].id)
    ops = store.operations()  # newest first
    assert len(ops) == retention.UNDO_DEPTH + 1
    assert len({op.before for op in ops}) == len(ops)
    with store.backend.read() as view:
        guarded = retention.protected(view)
    for op in ops[: retention.UNDO_DEPTH]:
        assert {op.before, op.target} <= set(guarded)
    oldest = ops[-1]
    assert oldest.before not in guarded  # the 11th-newest operation is beyond undo's reach
    assert set(guarded) == {op.before for op in ops[:-1]} | {cps[0].id, cps[1].id}
    store.prune(keep_last=2)
    alive = {c.id for c in store.checkpoints(include_safety=True)}
    assert oldest.before not in alive
    assert {op.before for op in ops[:-1]} <= alive


def test_pending_journal_checkpoints_are_protected(tree, store):
    import msgpack

    cps = make(store, tree, 3)
    with store.backend.write() as batch:
        batch.put(
            "journal",
            b"current",
            msgpack.packb({"target": bytes.fromhex(cps[0].id), "before": bytes.fromhex(cps[1].id)}),
        )
    with store.backend.read() as view:
        guarded = retention.protected(view)
    assert {cps[0].id, cps[1].id} <= set(guarded)


# -- delete ---------------------------------------------------------------------------------


def test_delete_removes_record_log_entry_and_tags(tree, store):
    cps = make(store, tree, 3)
    write(tree, "f", b"tagged")
    tagged = store.snapshot("t", tags=["x", "y"])
    store.snapshot("after")
    store.delete("x")
    t = tables(store)
    assert bytes.fromhex(tagged.id) not in t["checkpoints"]
    assert bytes.fromhex(tagged.id) not in t["log"].values()
    assert t["tags"] == {}
    assert messages(store) == ["after", "s2", "s1", "s0"]
    with pytest.raises(RefError):
        store.resolve("x")
    with pytest.raises(RefError):
        store.delete("nope")
    # Its parent is gone: the checkpoint still shows, as a whole tree added against nothing.
    assert [(c.status, c.path) for c in store.changes("latest")] == [("A", b"f")]
    assert store.verify().ok
    store.delete(cps[0].id[:8])
    assert messages(store) == ["after", "s2", "s1"]


# -- config and automatic retention ---------------------------------------------------------


def test_config_defaults_set_get_unset(tree, store):
    assert store.config() == {
        "retention.keep-last": "off",
        "retention.keep-within": "off",
        "retention.keep-tagged": "true",
        "retention.gc": "false",
        "service.idle-timeout": "1800",
        "service.autostart": "true",
        "hooks.background-window": "600",
        "storage.delta-depth": "10",
        "storage.durability": "normal",
        "gc.repack-below": "0.5",
        "gc.consolidate": "full",
        "maintenance.auto": "true",
        "maintenance.checkpoints": "32",
        "maintenance.loose-packs": "16",
        "maintenance.budget-ms": "250",
        "maintenance.detach": "true",
        "remote.retry-budget": "60",
        "remote.identity": "system",
        "watch.check-interval": "300",
    }
    assert store.config_set("retention.keep-last", 100) == "100"
    assert store.config_set("retention.keep-within", "30D") == "30d"
    with store.backend.read() as view:
        assert view.get("meta", b"config:retention.keep-last") == b"100"
    assert store.config_get("retention.keep-within") == "30d"
    assert store.config_set("retention.keep-last", "off") == "off"
    with pytest.raises(UsageError):
        store.config_set("retention.keep-last", "many")
    with pytest.raises(UsageError):
        store.config_set("retention.keep-within", "3x")
    with pytest.raises(UsageError):
        store.config_get("no.such.key")


def test_retention_policy_applies_after_each_snapshot(tree, store):
    store.config_set("retention.keep-last", 3)
    make(store, tree, 6)
    assert messages(store) == ["s5", "s4", "s3"]
    write(tree, "f", b"tagged")
    store.snapshot("tagged", tags=["t"])
    make(store, tree, 4)
    assert messages(store) == ["s3", "s2", "s1", "tagged"]  # tags kept by default
    store.config_set("retention.keep-tagged", "false")
    store.config_set("retention.gc", "true")
    make(store, tree, 1)
    assert messages(store) == ["s0", "s3", "s2"]
    assert store.verify().ok
    assert store.gc().chunks_removed == 0  # retention.gc already collected


def test_retention_policy_survives_reopen(tree):
    with Store.init(tree) as s:
        s.config_set("retention.keep-last", 2)
    with Store.open(tree) as s:
        make(s, tree, 4)
        assert len(s.checkpoints()) == 2


# -- stats ----------------------------------------------------------------------------------


def test_stats_counts_and_ratios(tree, store):
    data = os.urandom(100_000)
    write(tree, "a", data)
    write(tree, "b", data)  # the same content twice: stored once
    store.snapshot("one", task="t1")
    write(tree, "c", b"hello" * 1000)
    store.snapshot("two", task="t2")
    st = store.stats()
    assert st.checkpoints == 2 and st.safety_checkpoints == 0 and st.tasks == 2
    assert st.latest_files == 3 and st.latest_bytes == 205_000
    assert st.logical_bytes == 200_000 + 205_000
    assert 100_000 < st.unique_bytes < 120_000
    assert st.dedup_ratio > 3
    assert st.stored_bytes <= st.unique_bytes
    assert st.chunks > 0 and st.disk_size == store.backend.disk_size()
    # Where the space goes: every non-empty table, its records' bytes and its pages.
    assert st.tables["packs"]["payload"] >= st.stored_bytes
    assert st.tables["checkpoints"]["records"] == 2
    assert all(t["pages"] >= 4096 and t["payload"] > 0 for t in st.tables.values())
    assert sum(t["pages"] for t in st.tables.values()) <= st.disk_size
    assert "streams" not in st.tables or st.tables["streams"]["records"] == st.streams


# -- the CLI --------------------------------------------------------------------------------


def test_cli_prune_delete_config_stats(tree, store, run_cli):
    make(store, tree, 5)
    store.close()
    r = run_cli("prune", "--keep-last", "2", "--dry-run", cwd=tree)
    assert r.code == 0 and r.text.count("would remove") == 4  # 3 rows + the summary
    r = run_cli("list", cwd=tree)
    assert r.text.count("\n") == 5
    r = run_cli("prune", "--keep-last", "2", cwd=tree)
    assert r.code == 0 and "removed 3 checkpoint(s)" in r.text
    r = run_cli("prune", "--keep-within", "12h", "--json", cwd=tree)
    assert r.code == 0 and '"removed": []' in r.text
    r = run_cli("delete", "latest", cwd=tree)
    assert r.code == 0 and r.text.startswith("deleted ")
    r = run_cli("config", "retention.keep-last", "100", cwd=tree)
    assert r.code == 0 and "retention.keep-last = 100" in r.text
    r = run_cli("config", "retention.keep-last", cwd=tree)
    assert r.text == "100\n"
    r = run_cli("config", cwd=tree)
    assert "retention.keep-within = off" in r.text
    r = run_cli("config", "--unset", "retention.keep-last", cwd=tree)
    assert "retention.keep-last = off" in r.text
    r = run_cli("stats", cwd=tree)
    assert r.code == 0 and "dedup ratio" in r.text


@pytest.mark.parametrize(
    "args, code",
    [
        (["prune"], 2),
        (["prune", "--keep-last", "0"], 2),
        (["prune", "--keep-last", "many"], 2),
        (["prune", "--keep-within", "3x"], 2),
        (["delete", "nope"], 4),
        (["delete"], 2),
        (["config", "no.such.key"], 2),
        (["config", "retention.keep-within", "soon"], 2),
        (["gc", "--bogus"], 2),
    ],
)
def test_cli_errors_are_one_line_with_documented_codes(tree, store, run_cli, args, code):
    make(store, tree, 1)
    store.close()
    r = run_cli(*args, cwd=tree)
    assert r.code == code, (r.code, r.err)
    assert_one_line_error(r.err)


def test_cli_delete_refuses_what_undo_needs(tree, store, run_cli):
    cps = make(store, tree, 2)
    store.restore(cps[0].id)
    before = store.operations()[0].before  # the tree as it was: what undo goes back to
    store.close()
    for needed in (cps[0].id, before):  # the operation's target, and its "before"
        r = run_cli("delete", needed, cwd=tree)
        assert r.code == 2 and "undo" in r.err, (needed, r.err)
        assert_one_line_error(r.err)


def test_cli_locked_store_exit_code(tree, store, run_cli):
    make(store, tree, 1)
    with store._lock.held():
        for args in (["gc"], ["prune", "--keep-last", "1"], ["delete", "latest"]):
            r = run_cli("--lock-timeout", "0.1", *args, cwd=tree)
            assert r.code == 5, args
            assert_one_line_error(r.err)
