"""Selective revert: what it refuses and what it never overwrites (symlinks, concurrent edits,
changes made after the merge was computed, bad arguments, conflicts naming their place)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from snapstore.errors import ConflictError, RefError, UsageError
from snapstore.store import Store

TASK = "session-1"


def snap(store: Store, message: str, actor: str, task: str = TASK):
    return store.snapshot(message, task=task, metadata={"actor": actor})


def test_a_user_symlink_is_never_written_through(tree: Path, store: Store, tmp_path: Path):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    (tree / "s.txt").write_text("a\n")
    snap(store, "base", "user")
    (tree / "s.txt").write_text("agent\n")
    cp = snap(store, "agent", "agent")
    (tree / "s.txt").unlink()
    os.symlink(outside, tree / "s.txt")
    with pytest.raises(ConflictError, match="its type changed"):
        store.revert(cp.id)
    store.revert(cp.id, conflicts="theirs")
    assert outside.read_text() == "outside\n"
    assert not os.path.islink(tree / "s.txt") and (tree / "s.txt").read_text() == "a\n"


def test_a_concurrent_edit_during_the_apply_rolls_back(tree: Path, store: Store, monkeypatch):
    from snapstore.ops import restore

    (tree / "c.txt").write_text("1\n2\n")
    (tree / "e.txt").write_text("1\n2\n")
    snap(store, "base", "user")
    (tree / "c.txt").write_text("agent\n2\n")
    (tree / "e.txt").write_text("agent\n2\n")
    cp = snap(store, "agent", "agent")

    def meddle(i: int) -> None:
        if i == 1:
            (tree / "e.txt").write_text("an editor saved this\n")

    monkeypatch.setattr(restore, "step_hook", meddle)
    with pytest.raises(ConflictError, match="e.txt changed while"):
        store.revert(cp.id)
    assert (tree / "c.txt").read_text() == "agent\n2\n"  # rolled back
    assert (tree / "e.txt").read_text() == "an editor saved this\n"


def test_bad_arguments_are_usage_errors(tree: Path, store: Store):
    (tree / "x").write_text("x\n")
    snap(store, "base", "user")
    with pytest.raises(UsageError):
        store.revert()
    with pytest.raises(UsageError):
        store.revert("latest", task=TASK)
    with pytest.raises(UsageError):
        store.revert("latest", conflicts="whatever")
    with pytest.raises(UsageError):
        store.revert(task=TASK, actor="robot")
    with pytest.raises(UsageError):
        store.revert("latest", actor="agent")
    with pytest.raises(RefError):
        store.revert(task="no-such-session", actor="agent")


def test_a_change_after_the_merge_was_computed_is_never_overwritten(tree: Path, store: Store):
    # The merge is computed from the safety checkpoint; a file changed after it (here by a
    # before_restore hook, which runs between the two) must stop the revert, not be replaced.
    (tree / "h.txt").write_text("1\n2\n3\n")
    snap(store, "base", "user")
    (tree / "h.txt").write_text("agent\n2\n3\n")
    cp = snap(store, "agent", "agent")

    def editor_saves(_store, **_kw):
        (tree / "h.txt").write_text("agent\n2\n3\nsaved by an editor\n")

    store.hooks.register("before_restore", editor_saves)
    with pytest.raises(ConflictError, match="h.txt changed while"):
        store.revert(cp.id)
    assert (tree / "h.txt").read_text() == "agent\n2\n3\nsaved by an editor\n"


def test_a_conflict_where_the_tree_removed_the_lines_names_its_place(tree: Path, store: Store):
    (tree / "g.txt").write_text("1\n2\n3\n4\n5\n")
    snap(store, "base", "user")
    (tree / "g.txt").write_text("1\n2\nagent\n4\n5\n")
    cp = snap(store, "agent", "agent")
    (tree / "g.txt").write_text("1\n2\n4\n5\n")  # the user deleted the line the agent changed
    with pytest.raises(ConflictError) as err:
        store.revert(cp.id)
    assert "g.txt: at line 3 (both changed the same lines)" in str(err.value)
    report = store.revert(cp.id, conflicts="markers")
    assert report.to_json()["conflicted"][0]["lines"] == [[3, 2]]


# -- a file taken back where the tree has a directory now, and the reverse (issue 22 class 6) ----


def _verify_clean(store: Store) -> None:
    report = store.verify()
    assert not report.problems, report.problems


@pytest.mark.parametrize("conflicts", ["theirs", "ours", "markers", "refuse"])
def test_a_file_cannot_come_back_where_the_tree_has_a_directory_now(tree: Path, store: Store, conflicts: str):
    (tree / "d").write_text("one\n")
    snap(store, "base", "user")
    (tree / "d").write_text("two\n")
    cp = snap(store, "agent", "agent")
    (tree / "d").unlink()
    (tree / "d").mkdir()
    (tree / "d" / "x").write_text("the user's new file\n")
    latest = store.resolve("latest").id
    if conflicts in ("refuse", "theirs"):
        # No side settles it without deleting the user's d/x: refused, nothing recorded as user.
        with pytest.raises(ConflictError, match="d: whole file"):
            store.revert(cp.id, conflicts=conflicts)
    else:
        report = store.revert(cp.id, conflicts=conflicts)
        assert [o.path for o in report.conflicted] == ([b"d"] if conflicts == "markers" else [])
    assert store.resolve("latest").id == latest  # no new checkpoint the store would reject
    assert (tree / "d" / "x").read_text() == "the user's new file\n"
    _verify_clean(store)
    store.restore("latest", dry_run=True)  # the latest checkpoint is one restore accepts


def test_files_cannot_come_back_below_what_is_a_file_now(tree: Path, store: Store):
    (tree / "d").mkdir()
    (tree / "d" / "x").write_text("one\n")
    snap(store, "base", "user")
    (tree / "d" / "x").write_text("two\n")
    cp = snap(store, "agent", "agent")
    (tree / "d" / "x").unlink()
    (tree / "d").rmdir()
    (tree / "d").write_text("the user's file\n")
    latest = store.resolve("latest").id
    with pytest.raises(ConflictError, match="d/x"):
        store.revert(cp.id, conflicts="theirs")
    assert store.resolve("latest").id == latest
    assert (tree / "d").read_text() == "the user's file\n"
    _verify_clean(store)


def test_a_target_record_the_store_would_reject_is_never_committed(tree: Path, store: Store):
    # Below the planner: record_target itself checks the record before its transaction.
    from snapstore.errors import UnsafePathError
    from snapstore.ops.revert.planner import PathOutcome, State
    from snapstore.ops.revert.record import record_target, target_entries
    from snapstore.records.manifest import FILE, Entry
    from snapstore.storage.objects import chunk_id

    (tree / "d").mkdir()
    (tree / "d" / "x").write_text("x\n")
    store.snapshot("base")
    safety, current, _ = store._take_safety("test")
    data = b"a file named d\n"
    bad = PathOutcome(b"d", "reverted", State(Entry(b"d", FILE, 0o644, len(data), 0, chunk_id(data)), data))
    before = len(store.checkpoints(include_safety=True))
    with pytest.raises(UnsafePathError, match="lies below d"):
        record_target(
            store.context, current, target_entries(current, [bad]), [bad],
            parent=safety, message="bad", task=None, metadata={},
        )
    assert len(store.checkpoints(include_safety=True)) == before
    _verify_clean(store)
