"""The record of the tree a restore left is built from the safety checkpoint's entries and the
restore's own steps (ops.snapshot.walk's after-restore inputs), in O(changed): no walk, no pass
over the stat cache, and no file read but those the restore wrote and cannot vouch for.  It is
what a full snapshot of the same tree records, over random restores (deletions, exec bits,
symlinks, nested and empty directories), with every file racy (just written: as after a
`git checkout`, the stat cache cannot vouch for them).  A user's edit during the restore is kept
and recorded by the next checkpoint."""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from restore_helpers import mutate_tree, random_history

from snapstore.facade.base import StoreBase
from snapstore.ops import restore as restore_mod
from snapstore.ops.snapshot import read as snapshot_read
from snapstore.ops.snapshot import walk as snapshot_walk
from snapstore.store import Store
from snapstore.tree import scan, statcache

NAMES = [f"d{i}/s{k}/f{j}" for i in range(3) for k in range(2) for j in range(3)] + ["top", "x", "d1/y"]


class AfterRecord:
    """Counts what the record after a restore does: files opened, walks, stat-cache passes."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.active = False
        self.opened: list[bytes] = []
        self.walks = 0
        self.cache_passes = 0
        self.records = 0
        real_open, real_walk = snapshot_read._open, scan.walk
        real_classify = snapshot_walk.worktree.classify_sorted
        real_record = StoreBase._record_tree

        def opening(root: Any, rel: bytes, *a: Any) -> Any:
            if self.active:
                self.opened.append(rel)
            return real_open(root, rel, *a)

        def walking(*a: Any, **kw: Any) -> Any:
            self.walks += self.active
            return real_walk(*a, **kw)

        def classify(*a: Any, **kw: Any) -> Any:
            self.cache_passes += self.active
            return real_classify(*a, **kw)

        def record(store: StoreBase, message: str) -> Any:
            self.active = True
            self.records += 1
            try:
                return real_record(store, message)
            finally:
                self.active = False

        monkeypatch.setattr(snapshot_read, "_open", opening)
        monkeypatch.setattr(scan, "walk", walking)
        monkeypatch.setattr(snapshot_walk.worktree, "classify_sorted", classify)
        monkeypatch.setattr(StoreBase, "_record_tree", record)

    @contextmanager
    def fresh(self) -> Iterator[None]:
        self.opened.clear()
        self.walks = self.cache_passes = 0
        yield


@pytest.fixture
def every_file_racy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No file is old enough for the stat cache to vouch for it (as right after a checkout)."""
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 1 << 62)


def _mutate(tree: Path, rng: random.Random) -> None:
    mutate_tree(tree, rng, NAMES, ["write", "write", "delete", "exec", "link", "emptydir", "dirify", "rmtree"])


def _touch_all(tree: Path) -> None:
    """Rewrite every file with its own bytes (new mtimes, as a checkout leaves them)."""
    for dirpath, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d != ".snapstore"]
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                p.write_bytes(p.read_bytes())


def _stepped(report: restore_mod.RestoreReport) -> set[bytes]:
    return {c.path for c in report.changes}


@pytest.mark.parametrize("seed", range(10))
def test_the_record_after_a_restore_is_a_full_snapshots_and_reads_only_what_it_wrote(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch, every_file_racy: None
) -> None:
    rng = random.Random(seed)
    tree = tmp_path / "t"
    tree.mkdir()
    seen = AfterRecord(monkeypatch)
    with Store.init(tree) as store:
        ids = random_history(store, tree, rng, _mutate)
        for n in range(8):
            _mutate(tree, rng)
            _touch_all(tree)
            with seen.fresh():
                if n % 3 == 2:
                    report = store.restore(rng.choice(ids), [rng.choice(["d0", "d1/s1", "top", "x", "d2/s0/f1"])])
                else:
                    report = store.restore(rng.choice(ids))
                opened, walks, passes = set(seen.opened), seen.walks, seen.cache_passes
            assert walks == 0 and passes == 0, f"seed {seed}: the record after walked or passed over the stat cache"
            assert opened <= _stepped(report), f"seed {seed}: read {sorted(opened - _stepped(report))[:5]}"
            after = store.snapshot("right after", skip_unchanged=True)
            assert after.reused, f"seed {seed}: the record after restore {n} is not what a full snapshot finds"
    assert seen.records


def test_racy_files_the_restore_left_alone_are_not_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every_file_racy: None
) -> None:
    """The replay's case: a checkout rewrote every file just before the restore, so the safety
    checkpoint read them all; the record after reads none of them again (only 3 were restored)."""
    tree = tmp_path / "t"
    for i in range(40):
        (tree / f"p{i % 4}").mkdir(parents=True, exist_ok=True)
        (tree / f"p{i % 4}" / f"m{i}.py").write_text(f"module {i}\n" * 20)
    seen = AfterRecord(monkeypatch)
    with Store.init(tree) as store:
        a = store.snapshot("A")
        for i in (1, 2, 3):
            (tree / f"p{i % 4}" / f"m{i}.py").write_text(f"edited {i}\n")
        store.snapshot("B")
        _touch_all(tree)
        with seen.fresh():
            report = store.restore(a.id)
        assert len(report.changes) == 3
        assert set(seen.opened) <= _stepped(report)
        assert store.snapshot("right after", skip_unchanged=True).reused


def _on_step(monkeypatch: pytest.MonkeyPatch, at: int, do: Callable[[], None]) -> None:
    def hook(i: int) -> None:
        if i == at:
            do()

    monkeypatch.setattr(restore_mod, "step_hook", hook)


def test_an_edit_during_the_restore_to_a_file_it_leaves_alone_is_kept_and_recorded_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every_file_racy: None
) -> None:
    tree = tmp_path / "t"
    tree.mkdir()
    for i in range(6):
        (tree / f"f{i}").write_text(f"file {i}\n")
    with Store.init(tree) as store:
        a = store.snapshot("A")
        (tree / "f0").write_text("changed\n")
        store.snapshot("B")
        _on_step(monkeypatch, 0, lambda: (tree / "f5").write_text("the user's edit, during the restore\n"))
        store.restore(a.id)
        monkeypatch.setattr(restore_mod, "step_hook", None)
        assert (tree / "f5").read_text() == "the user's edit, during the restore\n"
        assert (tree / "f0").read_text() == "file 0\n"
        cp = store.snapshot("next")
        assert store.read_bytes(cp.id, "f5") == b"the user's edit, during the restore\n"
        undone = store.undo()  # the undo's own safety checkpoint holds the edit: nothing is lost
        assert (tree / "f0").read_text() == "changed\n"
        assert undone.safety is not None
        assert store.read_bytes(undone.safety.id, "f5") == b"the user's edit, during the restore\n"


@pytest.mark.parametrize("seed", range(4))
def test_a_cli_process_counts_the_record_after_from_the_restores_changes(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Store per restore (as the CLI opens one): the record after counts its changes against
    the safety checkpoint from the entries the restore changed, without decoding manifests,
    and the counts are the manifests' difference."""
    from snapstore.ops import diff

    rng = random.Random(seed)
    tree = tmp_path / "t"
    tree.mkdir()
    seen = AfterRecord(monkeypatch)
    decoded: list[int] = []
    real = diff.manifest_difference
    monkeypatch.setattr(diff, "manifest_difference", lambda *a: (decoded.append(seen.active), real(*a))[1])
    with Store.init(tree) as store:
        ids = random_history(store, tree, rng, _mutate)
    for _ in range(5):
        _mutate(tree, rng)
        with Store.open(tree) as store:
            report = store.restore(rng.choice(ids))
            if report.op_seq is None:
                continue
            decoded_during_record = [d for d in decoded if d]
            safety = report.safety
            assert safety is not None
            [after] = [c for c in store.checkpoints(include_safety=True) if c.parent == safety.id and c.message.startswith("after restore")]
            assert not decoded_during_record, f"seed {seed}: the record after decoded manifests to count"
            want = {(c.path, c.status) for c in store.diff(safety.id, after.id)}
            got = store.changes(after.id)
            assert {(c.path, c.status) for c in got} == want
            stats = after.stats
            statuses = [s for _, s in want]
            assert (stats["added"], stats["modified"], stats["deleted"]) == (
                statuses.count(diff.ADDED), len(statuses) - statuses.count(diff.ADDED) - statuses.count(diff.DELETED),
                statuses.count(diff.DELETED),
            )
        decoded.clear()
