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
