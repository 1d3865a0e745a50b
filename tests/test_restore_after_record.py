"""The record of the tree a restore left (taken without walking it again: ops.restore.after) is
exactly what a walk finds: a snapshot right after the restore, of the unchanged tree, reuses it.
Random trees and restores: files, exec bits, symlinks, empty directories, a file becoming a
directory and back, ignored files, partial restores and undos."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from restore_helpers import mutate_tree, random_history

from snapstore.ops.restore import after
from snapstore.store import Store


def _mutate(tree: Path, rng: random.Random) -> None:
    names = [f"d{i}/f{j}" for i in range(3) for j in range(3)] + ["top", "x"]
    mutate_tree(tree, rng, names, ["write", "delete", "exec", "link", "emptydir", "dirify", "ignored"])


@pytest.mark.parametrize("seed", range(12))
def test_the_record_after_a_restore_is_what_a_walk_finds(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch):
    rng = random.Random(seed)
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / ".gitignore").write_text("*.log\n")
    used = []
    real = after.found_after
    monkeypatch.setattr(after, "found_after", lambda *a: (used.append(1), real(*a))[1])
    with Store.init(tree) as store:
        ids = random_history(store, tree, rng, _mutate)
        for _ in range(8):
            _mutate(tree, rng)
            how = rng.choice(["full", "partial", "undo"])
            if how == "undo" and store.operations():
                store.undo()
            elif how == "partial":
                store.restore(rng.choice(ids), [rng.choice(["d0", "d1", "top", "x", "d2/f1"])])
            else:
                store.restore(rng.choice(ids))
            check = store.snapshot("right after", skip_unchanged=True)
            assert check.reused, f"seed {seed}: the record after the {how} is not the tree"
    assert used  # the hint was made (the walk-free path ran)


def test_a_directory_the_restore_empties_is_recorded_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A directory that is empty in the target but held files before the restore: the files'
    records go, and the directory's record is an empty directory's, as a walk finds it."""
    made = []
    real = after.found_after
    monkeypatch.setattr(after, "found_after", lambda *a: (made.append(real(*a)), made[-1])[1])
    tree = tmp_path / "t"
    (tree / "keep" / "empty").mkdir(parents=True)
    (tree / "keep" / "z.txt").write_text("z\n")
    with Store.init(tree) as store:
        a = store.snapshot("A")
        for name in ("a.txt", "b.txt"):
            (tree / "keep" / "empty" / name).write_text(name)
        store.snapshot("B")
        store.restore(a.id)
        assert os.listdir(tree / "keep" / "empty") == []
        assert store.snapshot("right after", skip_unchanged=True).reused
    [made_after] = made
    assert made_after is not None
    assert [r.path for r in made_after.records] == [b"keep/empty", b"keep/z.txt"]
