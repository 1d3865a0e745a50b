"""A checkpoint's parent and counts describe the tree it was taken from (issue 22 class 13):
after a restore, an undo or a revert, the next checkpoint counts what changed since the tree as
that operation left it, not since the tree before it."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapstore.store import Store


def _build(tree: Path, store: Store) -> None:
    for i in range(20):
        (tree / f"f{i}.txt").write_text("v1\n")
    store.snapshot("one")
    for i in range(20):
        (tree / f"f{i}.txt").write_text("v2\n")
    (tree / "new.txt").write_text("new\n")
    store.snapshot("two")


@pytest.mark.parametrize("how", ["restore", "undo", "partial", "revert"])
def test_the_next_checkpoint_counts_only_what_changed_after_the_operation(tree: Path, store: Store, how: str):
    _build(tree, store)
    if how == "restore":
        store.restore("latest~1")
    elif how == "undo":
        store.restore("latest~1")
        store.undo()
    elif how == "partial":
        store.restore("latest~1", ["f3.txt", "new.txt"])
    else:
        store.revert("latest")
    (tree / "f0.txt").write_text("the one edit\n")
    cp = store.snapshot("after")
    assert (cp.stats["added"], cp.stats["modified"], cp.stats["deleted"]) == (0, 1, 0), cp.stats
    assert cp.parent is not None
    # The parent is the tree as the operation left it: it differs from the new one in f0 only.
    assert [c.path for c in store.diff(cp.parent, cp.id)] == [b"f0.txt"]
