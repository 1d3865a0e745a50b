"""Selective revert over a range of the log by actor ("what the agent did since here", issue 42
req 1) and conflicts settled per file (keep mine / take theirs / markers), through the Store on
a real LMDB store and a real tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapstore.errors import ConflictError, RefError, UsageError
from snapstore.store import Store

BASE = "".join(f"line {i}\n" for i in range(20))


def edit(path: Path, old: str, new: str) -> None:
    path.write_text(path.read_text().replace(old, new))


def snap(store: Store, message: str, actor: str, task: str = "s1") -> str:
    return store.snapshot(message, task=task, metadata={"actor": actor}).id


@pytest.fixture
def history(tree: Path) -> dict[str, str]:
    """Agent edits before the range, then, in the range, agent and user edits interleaved, one
    ``unknown`` change, and a second task's agent edit."""
    for name in ("a.py", "b.py"):
        (tree / name).write_text(BASE)
    with Store.init(tree) as s:
        ids = {"start": snap(s, "start", "user")}
        edit(tree / "a.py", "line 1\n", "early agent 1\n")
        ids["early"] = snap(s, "agent before the range", "agent")
        edit(tree / "a.py", "line 5\n", "agent 5\n")
        ids["first"] = snap(s, "agent in range", "agent")
        edit(tree / "a.py", "line 9\n", "user 9\n")
        (tree / "mine.txt").write_text("the user's\n")
        snap(s, "user in range", "user")
        (tree / "gen.txt").write_text("who knows\n")
        ids["unknown"] = snap(s, "background", "unknown")
        edit(tree / "b.py", "line 3\n", "other task 3\n")
        snap(s, "agent of another task", "agent", task="s2")
        edit(tree / "a.py", "line 14\n", "agent 14\n")
        ids["last"] = snap(s, "agent again", "agent")
    return ids


def test_a_range_by_actor_takes_back_only_that_actor_s_checkpoints_in_it(tree: Path, history: dict[str, str]):
    with Store.open(tree) as s:
        dry = s.revert(range=f"{history['early']}..{history['last']}", actor="agent", dry_run=True)
        assert "3 checkpoint(s) by the agent" in dry.what  # both tasks' agent checkpoints in the range
        assert [u.checkpoint.id for u in dry.unknown] == [history["unknown"]] and not dry.unknown[0].taken
        s.revert(range=f"{history['early']}..latest", actor="agent")
    a = (tree / "a.py").read_text()
    assert a == BASE.replace("line 1\n", "early agent 1\n").replace("line 9\n", "user 9\n")  # before the range: kept
    assert (tree / "b.py").read_text() == BASE
    assert (tree / "mine.txt").read_text() == "the user's\n"
    assert (tree / "gen.txt").read_text() == "who knows\n"  # unknown: listed, left alone


def test_a_range_by_actor_takes_unknown_changes_only_when_asked(tree: Path, history: dict[str, str]):
    with Store.open(tree) as s:
        report = s.revert(range=f"{history['first']}..latest", actor="agent", include_unknown=True)
        assert "and 1 unknown" in report.what
    assert not (tree / "gen.txt").exists()
    # The range starts after its first end: "first"'s own change (line 5) stays.
    assert "agent 5\n" in (tree / "a.py").read_text() and "agent 14\n" not in (tree / "a.py").read_text()


def test_a_range_with_no_checkpoint_of_the_actor_says_so(tree: Path, history: dict[str, str]):
    with Store.open(tree) as s, pytest.raises(RefError, match="no checkpoint by the user in"):
        s.revert(range=f"{history['unknown']}..latest", actor="user")


@pytest.fixture
def clash(tree: Path) -> Path:
    """The agent edits lines of a.py and b.py, the user then edits the same lines, unsaved."""
    for name in ("a.py", "b.py"):
        (tree / name).write_text(BASE)
    with Store.init(tree) as s:
        snap(s, "start", "user")
        edit(tree / "a.py", "line 4\n", "agent 4\n")
        edit(tree / "a.py", "line 12\n", "agent 12\n")
        edit(tree / "b.py", "line 4\n", "agent 4\n")
        snap(s, "agent edits", "agent")
    edit(tree / "a.py", "agent 4\n", "mine 4\n")
    edit(tree / "b.py", "agent 4\n", "mine 4\n")
    return tree


def test_conflicts_are_settled_per_file(clash: Path):
    with Store.open(clash) as s:
        with pytest.raises(ConflictError) as refused:
            s.revert(task="s1", actor="agent", choices={b"a.py": "ours"})
        assert "b.py" in str(refused.value) and "a.py" not in str(refused.value)  # only the unsettled one
        assert (clash / "a.py").read_text().count("mine 4") == 1  # refused: nothing changed
        s.revert(task="s1", actor="agent", choices={b"a.py": "ours", b"b.py": "theirs"})
    # keep mine: the user's line stays, the agent's other line goes back
    assert (clash / "a.py").read_text() == BASE.replace("line 4\n", "mine 4\n")
    # take theirs: the file as before the agent's change
    assert (clash / "b.py").read_text() == BASE


def test_a_markers_choice_writes_markers_in_that_file_only(clash: Path):
    with Store.open(clash) as s:
        dry = s.revert(task="s1", actor="agent", choices={b"a.py": "markers", b"b.py": "ours"}, dry_run=True)
        assert [o.path for o in dry.conflicted] == [b"a.py"]
        s.revert(task="s1", actor="agent", choices={b"a.py": "markers", b"b.py": "ours"})
    a = (clash / "a.py").read_text()
    assert "<<<<<<<" in a and "mine 4\n" in a and "agent 12" not in a
    assert (clash / "b.py").read_text() == BASE.replace("line 4\n", "mine 4\n")


def test_an_unknown_choice_is_a_usage_error(clash: Path):
    with Store.open(clash) as s, pytest.raises(UsageError, match="ours, theirs, markers"):
        s.revert(task="s1", actor="agent", choices={b"a.py": "both"}, dry_run=True)


def test_the_cli_takes_an_actor_with_a_range(tree: Path, history: dict[str, str]):
    import json

    from helpers import assert_one_line_error, run_snapstore

    done = run_snapstore("revert", f"{history['early'][:12]}..latest", "--actor", "agent", "--json", cwd=tree)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert "3 checkpoint(s) by the agent" in report["what"] and report["unknown"][0]["taken"] is False
    assert "agent 14\n" not in (tree / "a.py").read_text() and "user 9\n" in (tree / "a.py").read_text()
    bad = run_snapstore("revert", "latest", "--actor", "agent", cwd=tree)
    assert bad.returncode != 0 and b"--actor needs --task or a range" in bad.stderr
    assert_one_line_error(bad.stderr)
