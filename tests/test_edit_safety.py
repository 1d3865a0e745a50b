"""The edit tool against a hostile or busy tree (issue 22 classes 5 and 9): it never writes
through a directory swapped for a symlink while it waited, never replaces a write no checkpoint
holds, and plans (a possibly slow fuzzy search, now bounded) without the writer lock."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.errors import ConflictError, UnsafePathError, UsageError
from snapstore.ops import edit as edit_mod
from snapstore.ops import edit_target
from snapstore.store import Store

HOLD_LOCK = r"""
import sys, time, os
from snapstore.store import Store
store = Store.open(sys.argv[1])
with store._lock.held():
    print("held", flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.01)
"""


def one(old: str, new: str) -> list[dict[str, str]]:
    return [{"old_text": old, "new_text": new}]


def test_a_directory_swapped_for_a_symlink_while_the_edit_waits_is_refused(tmp_path: Path):
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f.txt").write_text("value = 1\n")
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "f.txt").write_text("value = 1\n")  # the same content: a decoy
    Store.init(tree).close()
    release = tmp_path / "release"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tree), str(release)], stdout=subprocess.PIPE, env=subprocess_env())
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    outcome: list[BaseException | None] = []

    def run() -> None:
        with Store.open(tree, lock_timeout=30) as store:
            try:
                store.edit("sub/f.txt", one("value = 1", "value = 2"))
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)  # the edit has planned and waits for the lock
    os.rename(tree / "sub", tmp_path / "moved-away")
    os.symlink(outside / "sub", tree / "sub")
    release.touch()
    worker.join(60)
    holder.wait(10)
    assert len(outcome) == 1 and isinstance(outcome[0], UnsafePathError), outcome
    assert (outside / "sub" / "f.txt").read_text() == "value = 1\n"  # nothing written outside
    assert (tmp_path / "moved-away" / "f.txt").read_text() == "value = 1\n"


def test_a_write_racing_the_rename_is_put_back_and_the_edit_taken_back(tree: Path, store: Store, monkeypatch: pytest.MonkeyPatch):
    f = tree / "f.txt"
    f.write_text("value = 1\n")
    real = edit_target.rename

    def racing(tmp: str, name: str, dir_fd: int) -> None:
        with open(f, "a") as other:  # another process's write, after the last check
            other.write("appended by the shell\n")
        real(tmp, name, dir_fd)

    monkeypatch.setattr(edit_target, "rename", racing)
    with pytest.raises(ConflictError, match="taken back"):
        store.edit("f.txt", one("value = 1", "value = 2"))
    assert f.read_text() == "value = 1\nappended by the shell\n"  # that write is not lost
    assert not [p for p in os.listdir(tree) if "snapstore-tmp" in p]


def test_a_change_after_the_plan_is_never_written_over(tree: Path, store: Store, monkeypatch: pytest.MonkeyPatch):
    f = tree / "f.txt"
    f.write_text("value = 1\n")
    real_plan = edit_mod.plan

    def slow_plan(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = real_plan(*args, **kwargs)
        f.write_text("value = 1\nthe user's line\n")  # lands while the edit is planned
        return out

    monkeypatch.setattr(edit_mod, "plan", slow_plan)
    with pytest.raises(ConflictError, match="changed while the edit was prepared"):
        store.edit("f.txt", one("value = 1", "value = 2"))
    assert f.read_text() == "value = 1\nthe user's line\n"
    # ... and the checkpoint taken first holds that version
    assert store.read_bytes("latest", "f.txt") == b"value = 1\nthe user's line\n"


def test_the_plan_runs_without_the_writer_lock(tree: Path, store: Store, monkeypatch: pytest.MonkeyPatch):
    (tree / "f.txt").write_text("value = 1\n")
    real_plan = edit_mod.plan
    during: list[str] = []

    def plan_and_snapshot(*args, **kwargs):  # type: ignore[no-untyped-def]
        with Store.open(tree, lock_timeout=0.5) as other:  # another writer is not held up
            during.append(other.snapshot("while the edit plans").id)
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(edit_mod, "plan", plan_and_snapshot)
    store.edit("f.txt", one("value = 1", "value = 2"))
    assert len(during) == 1 and (tree / "f.txt").read_text() == "value = 2\n"


def test_the_fuzzy_search_is_bounded(monkeypatch: pytest.MonkeyPatch):
    import rapidfuzz.fuzz

    calls = []
    real = rapidfuzz.fuzz.ratio
    monkeypatch.setattr(rapidfuzz.fuzz, "ratio", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    lines = [f"    value_{i} = compute({i}, {i * 7919 % 1000003})  # line {i}" for i in range(20000)]
    data = ("\n".join(lines) + "\n").encode()
    missing = "\n".join(f"    missing_{i} = other({i})  # nowhere in the file" for i in range(200))
    with pytest.raises(UsageError, match="not found"):
        edit_mod.plan(data, [edit_mod.Edit(missing, "x = 1")], path="f.py")
    assert len(calls) <= 1  # not one comparison per window (20,000 of 200 lines each)
    calls.clear()
    near = "\n".join(x.replace("compute", "compte") if k % 10 == 0 else x for k, x in enumerate(lines[12000:12050]))
    _, matches, _ = edit_mod.plan(data, [edit_mod.Edit(near, "x = 1")], path="f.py")
    assert [(m.level, m.start_line) for m in matches] == [("similar", 12001)]
    assert len(calls) <= 10
