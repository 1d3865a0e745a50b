"""Selective revert of a whole agent session recorded by the Claude Code hook, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers import assert_one_line_error

from snapstore.errors import ConflictError
from snapstore.integrations import claude_code
from snapstore.store import Store

SESSION = "sess-42"


def event(project: Path, name: str, **fields: Any) -> None:
    doc = {"session_id": SESSION, "hook_event_name": name, "cwd": str(project), "transcript_path": None, **fields}
    out = claude_code.run(json.dumps(doc), str(project), lambda: Store.open(project), start_service=False)
    assert out == "", out


def tool_call(project: Path, n: int, tool: str, action) -> None:  # type: ignore[no-untyped-def]
    """What Claude Code does around one tool call: PreToolUse, the call, PostToolUse."""
    args = {"tool_name": tool, "tool_use_id": f"toolu_{n}", "tool_input": {"file_path": str(project / "app.py")}}
    event(project, "PreToolUse", **args)
    action()
    event(project, "PostToolUse", **args)


def session(project: Path) -> None:
    app = project / "app.py"
    app.write_text("".join(f"line {i}\n" for i in range(12)))
    (project / "notes.txt").write_text("old notes\n")
    event(project, "UserPromptSubmit", prompt="tidy up app.py")
    # The agent edits line 1; the user then edits line 6 and util.txt between tool calls.
    tool_call(project, 1, "Edit", lambda: app.write_text(app.read_text().replace("line 1\n", "agent 1\n")))
    app.write_text(app.read_text().replace("line 6\n", "user 6\n"))
    (project / "util.txt").write_text("the user's file\n")
    # The agent's shell command: a new file, a removed file, line 10 edited.
    def bash() -> None:
        (project / "generated.txt").write_text("made by the agent\n")
        (project / "notes.txt").unlink()
        app.write_text(app.read_text().replace("line 10\n", "agent 10\n"))

    tool_call(project, 2, "Bash", bash)
    # The user edits line 3 (recorded at the next tool call's "before" checkpoint).
    app.write_text(app.read_text().replace("line 3\n", "user 3\n"))
    tool_call(project, 3, "Write", lambda: (project / "agent_notes.md").write_text("# plan\n"))
    event(project, "Stop")


def test_reverting_the_agent_s_session_keeps_exactly_the_user_s_changes(tmp_path: Path) -> None:
    project = tmp_path / "proj"
    project.mkdir()
    session(project)
    with Store.open(project) as store:
        actors = [(c.message.split(":")[0], c.metadata.get("actor")) for c in reversed(store.checkpoints(task=SESSION))]
        assert ("before Bash", "user") in actors and ("after Bash", "agent") in actors
        dry = store.revert(task=SESSION, actor="agent", dry_run=True)
        assert sorted(dry.diffs) == [b"agent_notes.md", b"app.py", b"generated.txt", b"notes.txt"]
        report = store.revert(task=SESSION, actor="agent")
        assert report.to_json()["merged"] == ["app.py"]
    expected = "".join(f"line {i}\n" for i in range(12)).replace("line 6\n", "user 6\n").replace("line 3\n", "user 3\n")
    assert (project / "app.py").read_text() == expected
    assert (project / "notes.txt").read_text() == "old notes\n"
    assert (project / "util.txt").read_text() == "the user's file\n"
    assert not (project / "generated.txt").exists() and not (project / "agent_notes.md").exists()
    # And the user's changes alone can be taken back instead, leaving the agent's.
    with Store.open(project) as store:
        store.undo()
        store.revert(task=SESSION, actor="user", conflicts="refuse")
    text = (project / "app.py").read_text()
    assert "agent 1\n" in text and "agent 10\n" in text and "user" not in text
    assert not (project / "util.txt").exists() and (project / "generated.txt").exists()
    # Both, one after the other: the session's start.  The first revert's own checkpoint is not
    # one of the user's changes, so the second does not take it back.
    with Store.open(project) as store:
        store.undo()
        store.revert(task=SESSION, actor="agent")
        store.revert(task=SESSION, actor="user")
    assert (project / "app.py").read_text() == "".join(f"line {i}\n" for i in range(12))
    assert sorted(p.name for p in project.iterdir() if p.name != ".snapstore") == ["app.py", "notes.txt"]


def test_cli_revert_dry_run_conflicts_exit_codes_and_json(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "a.txt").write_text("1\n2\n3\n4\n5\n")
    assert run_cli("init", cwd=tree).code == 0
    assert run_cli("snapshot", "-m", "base", cwd=tree).code == 0
    (tree / "a.txt").write_text("1\nagent\n3\n4\n5\n")
    assert run_cli("snapshot", "-m", "agent", cwd=tree).code == 0
    (tree / "a.txt").write_text("1\nagent\n3\n4\nuser\n")
    with Store.open(tree) as store:
        agent = store.resolve("latest").id  # a revert records a checkpoint: "latest" moves

    dry = run_cli("revert", agent, "-n", cwd=tree)
    assert dry.code == 0, dry.err
    assert "-agent\n+2\n" in dry.text and "merged    a.txt" in dry.text and "nothing was changed" in dry.text
    assert (tree / "a.txt").read_text() == "1\nagent\n3\n4\nuser\n"

    done = run_cli("revert", agent, "--json", "--", "a.txt", cwd=tree)
    assert done.code == 0, done.err
    doc = json.loads(done.text)
    assert doc["merged"] == ["a.txt"] and doc["op"] == 1 and doc["undo"] == "snapstore undo"
    assert (tree / "a.txt").read_text() == "1\n2\n3\n4\nuser\n"
    assert run_cli("undo", cwd=tree).code == 0
    assert (tree / "a.txt").read_text() == "1\nagent\n3\n4\nuser\n"

    (tree / "a.txt").write_text("1\nuser\n3\n4\n5\n")
    refused = run_cli("revert", agent, cwd=tree)
    assert refused.code == ConflictError.exit_code == 9
    assert_one_line_error(refused.err)
    assert "a.txt: line 2" in refused.err
    assert (tree / "a.txt").read_text() == "1\nuser\n3\n4\n5\n"
    marked = run_cli("revert", agent, "--conflicts=markers", cwd=tree)
    assert marked.code == 1 and "conflict  a.txt: line 2" in marked.text
    assert "<<<<<<<" in (tree / "a.txt").read_text()
    assert run_cli("undo", cwd=tree).code == 0
    theirs = run_cli("revert", agent, "--theirs", cwd=tree)
    assert theirs.code == 0 and (tree / "a.txt").read_text() == "1\n2\n3\n4\n5\n"
    assert run_cli("revert", agent, "--ours", "--conflicts=theirs", cwd=tree).code == 2
    assert run_cli("revert", "--actor", "agent", cwd=tree).code == 2
    help_ = run_cli("revert", "--help", cwd=tree)
    assert help_.code == 0 and "Example:" in help_.text and "--task S --actor agent" in help_.text


def test_cli_refused_revert_is_one_error_line_naming_every_conflict(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    tree = tmp_path / "t"
    tree.mkdir()
    for name in ("a.txt", "b.txt"):
        (tree / name).write_text("1\n2\n3\n")
    assert run_cli("init", cwd=tree).code == 0
    assert run_cli("snapshot", "-m", "base", cwd=tree).code == 0
    for name in ("a.txt", "b.txt"):
        (tree / name).write_text("1\nagent\n3\n")
    assert run_cli("snapshot", "-m", "agent", cwd=tree).code == 0
    for name in ("a.txt", "b.txt"):
        (tree / name).write_text("1\nuser\n3\n")
    refused = run_cli("revert", "latest", cwd=tree)
    assert refused.code == 9
    assert_one_line_error(refused.err)
    assert "2 conflict(s)" in refused.err and "a.txt: line 2" in refused.err and "b.txt: line 2" in refused.err


def test_cli_revert_exits_1_whenever_conflicts_remain_even_without_markers(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    # A binary file changed since cannot hold markers: it stays as it is, listed as a conflict,
    # and the exit code must still say "conflicts remain" (docs/cli.md), dry run or not.
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "b.bin").write_bytes(b"\x00base\x00")
    assert run_cli("init", cwd=tree).code == 0
    assert run_cli("snapshot", "-m", "base", cwd=tree).code == 0
    (tree / "b.bin").write_bytes(b"\x00agent\x00")
    assert run_cli("snapshot", "-m", "agent", cwd=tree).code == 0
    (tree / "b.bin").write_bytes(b"\x00user\x00")
    dry = run_cli("revert", "latest", "-n", "--conflicts=markers", cwd=tree)
    assert dry.code == 1, dry.err
    assert "conflict  b.bin" in dry.text
    done = run_cli("revert", "latest~0", "--conflicts=markers", "--json", cwd=tree)
    assert done.code == 1, done.err
    assert [c["path"] for c in json.loads(done.text)["conflicted"]] == ["b.bin"]
    assert (tree / "b.bin").read_bytes() == b"\x00user\x00"
