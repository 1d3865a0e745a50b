"""Crash recovery checks the tree first; only writers recover; readers never write (16.4, 16.21).

The crash is simulated in-process (an exception that is not an error, raised from the step hook,
leaves the journal exactly as a SIGKILL would); tests/test_restore_crash.py kills real processes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
from restore_helpers import read_tree

from snapstore.errors import ConflictError
from snapstore.ops import restore as restore_mod
from snapstore.store import Store


class Crash(BaseException):
    """Stands for SIGKILL: nothing catches it, the journal stays."""


def _crash_at(monkeypatch, step: int | None) -> None:
    """Crash before step ``step`` touches the tree (None: once every step is done, before the
    journal is cleared)."""
    if step is None:

        def finish(*args, **kwargs):  # type: ignore[no-untyped-def]
            raise Crash()

        monkeypatch.setattr(restore_mod.journal, "finish", finish)
        return

    def hook(i: int) -> None:
        if i == step:
            raise Crash()

    monkeypatch.setattr(restore_mod, "step_hook", hook)


def _interrupted(tmp_path: Path, monkeypatch, step: int | None) -> tuple[Path, dict, dict]:
    """A tree whose restore to A crashed before step ``step``; returns (root, A, before)."""
    root = tmp_path / "t"
    root.mkdir()
    for name in ("a", "b", "c", "d"):
        (root / f"{name}.txt").write_bytes(f"{name} in A\n".encode())
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        spec_a = read_tree(root)
        for name in ("a", "b", "c"):
            (root / f"{name}.txt").write_bytes(f"{name} edited\n".encode())
        (root / "d.txt").unlink()
        (root / "new.txt").write_bytes(b"new\n")
        before = read_tree(root)
        _crash_at(monkeypatch, step)
        with pytest.raises(Crash):
            store.restore("A")
        monkeypatch.undo()
        assert store.pending_restore() is not None
    return root, spec_a, before


def test_readers_never_replay_and_never_write_the_tree(tmp_path: Path, monkeypatch):
    root, spec_a, _ = _interrupted(tmp_path, monkeypatch, 2)
    half = read_tree(root)
    with Store.open(root) as store:
        assert store.checkpoints()
        store.diff("A")
        store.read_bytes("A", "a.txt")
        assert store.verify().ok
        assert "snapstore recover" in (store.pending_restore() or "")
    for argv in (["list"], ["verify"], ["diff", "A"], ["show", "A"], ["cat", "A", "a.txt"]):
        done = subprocess.run([sys.executable, "-m", "snapstore", *argv], cwd=root,
                              capture_output=True, timeout=60)
        assert b"Traceback" not in done.stderr, (argv, done.stderr)
        assert read_tree(root) == half, argv
    with Store.open(root) as store:
        assert store.pending_restore() is not None
        report = store.recover()
        assert report.pending and report.mode == "forward" and report.op_seq is not None
    assert read_tree(root) == spec_a


def test_a_writer_finishes_a_clean_interrupted_restore(tmp_path: Path, monkeypatch):
    root, spec_a, _ = _interrupted(tmp_path, monkeypatch, 3)
    with Store.open(root) as store:
        store.snapshot("after recovery")
        assert store.pending_restore() is None
        assert store.operations()[0].kind == "restore"
    assert read_tree(root) == spec_a


def test_recover_back_rolls_the_restore_back(tmp_path: Path, monkeypatch):
    root, _, before = _interrupted(tmp_path, monkeypatch, 3)
    with Store.open(root) as store:
        dry = store.recover(mode="back", dry_run=True)
        assert dry.pending and dry.steps > 0 and dry.conflicts == []
        assert store.pending_restore() is not None  # a dry run changes nothing
        store.recover(mode="back")
        assert store.pending_restore() is None
    assert read_tree(root) == before


@pytest.mark.parametrize("edit", ["rewrite a written file", "recreate a deleted file"])
def test_work_done_after_the_crash_is_never_overwritten(tmp_path: Path, monkeypatch, edit: str):
    # Crashed with every file written (a replaced file is unlinked before the data sync and its
    # new one renamed in after it: no step hook runs between those renames).
    root, spec_a, _ = _interrupted(tmp_path, monkeypatch, None)
    if edit == "rewrite a written file":
        assert (root / "b.txt").read_bytes() == b"b in A\n"  # the restore had written it
        (root / "b.txt").write_bytes(b"the user's work after the crash\n")
        changed = b"b.txt"
    else:
        assert not (root / "new.txt").exists()  # the restore had deleted it
        (root / "new.txt").write_bytes(b"recreated by the user\n")
        changed = b"new.txt"
    mine = read_tree(root)
    with Store.open(root) as store:
        assert store.recover(dry_run=True).conflicts == [changed]
        with pytest.raises(ConflictError, match="snapstore recover"):
            store.snapshot("x")
        with pytest.raises(ConflictError, match="snapstore recover"):
            store.recover()
        assert read_tree(root) == mine
        report = store.recover(mode="abandon")
        assert report.safety is not None
        assert store.pending_restore() is None
        assert read_tree(root) == mine
        # The abandoned state is recorded: the user's work is in the store.
        assert store.read_bytes(report.safety, changed.decode()) == (root / changed.decode()).read_bytes()


def test_a_planted_journal_does_not_make_list_delete_anything(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "a.txt").write_bytes(b"A\n")
    with Store.init(root) as store:
        a = store.snapshot("A")
        (root / "precious.txt").write_bytes(b"in no checkpoint\n")
        value = msgpack.packb(
            {"kind": "restore", "target": bytes.fromhex(a.id), "before": bytes.fromhex(a.id),
             "paths": None, "time_ns": 1, "pid": 1, "steps": [["delete", b"precious.txt"]]},
            use_bin_type=True,
        )
        with store.backend.write() as batch:
            batch.put("journal", b"current", value)
    done = subprocess.run([sys.executable, "-m", "snapstore", "list"], cwd=root, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert (root / "precious.txt").read_bytes() == b"in no checkpoint\n"
    with Store.open(root) as store:
        with pytest.raises(ConflictError):
            store.snapshot("a writer")
    assert (root / "precious.txt").read_bytes() == b"in no checkpoint\n"


GOOD = {"kind": "restore", "target": b"\x01" * 32, "before": b"\x02" * 32, "paths": None,
        "time_ns": 1, "pid": 1, "steps": [["write", b"a.txt"]]}


@pytest.mark.parametrize(
    "value",
    [
        5,
        [],
        {**GOOD, "target": b""},
        {**GOOD, "target": "not bytes"},
        {**GOOD, "time_ns": 1 << 63},
        {**GOOD, "time_ns": float("inf")},
        {**GOOD, "kind": "explode"},
        {**GOOD, "steps": [["write"]]},
        {**GOOD, "steps": [["write", "a.txt"]]},
        {**GOOD, "steps": [["write", b"a/../../x"]]},
        {**GOOD, "paths": [1]},
    ],
    ids=["int", "list", "empty-target", "str-target", "huge-time", "inf-time", "kind", "short-step",
         "str-path", "unsafe-path", "bad-paths"],
)
def test_every_hostile_journal_is_corrupt_never_an_internal_error(value):
    from snapstore.errors import CorruptError
    from snapstore.ops.restore import journal

    with pytest.raises(CorruptError, match="snapstore recover"):
        journal.parse(msgpack.packb(value, use_bin_type=True))
    assert journal.parse(msgpack.packb(GOOD, use_bin_type=True)).target == b"\x01" * 32
