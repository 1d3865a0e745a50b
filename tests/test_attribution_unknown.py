"""The third label, ``unknown`` (issue 37 req 2): what a backgrounded shell call of the agent may
write, and the user's edits while it may run, are neither the agent's nor the user's; a revert of
the agent lists them and leaves them unless asked.  Sessions go through the real hook handler
(``agents.hook``, as ``snapstore hook AGENT`` runs it) on a real store."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import call_cli, subprocess_env

from snapstore.integrations import agents, background, hook_state
from snapstore.store import Store

S = "sess-u"


def send(tree: Path, agent: str, **doc: Any) -> None:
    out = agents.hook(agent, json.dumps(doc), lambda project: lambda: Store.open(project), start_service=False)
    assert "systemMessage" not in out and "errorMessage" not in out and "user_message" not in out, out


def claude(tree: Path, **doc: Any) -> None:
    send(tree, "claude-code", session_id=S, cwd=str(tree), **doc)


def bash(tree: Path, call: str, command: str, **extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    tool = {"tool_name": "Bash", "tool_use_id": call, "tool_input": {"command": command, **extra}}
    return {"hook_event_name": "PreToolUse", **tool}, {"hook_event_name": "PostToolUse", **tool}


def labels(tree: Path) -> list[tuple[str, str | None]]:
    with Store.open(tree) as store:
        return [(c.message, c.actor) for c in reversed(store.checkpoints(task=S))]


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    t = tmp_path / "proj"
    t.mkdir()
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(t))  # Claude Code names its project so
    monkeypatch.delenv("GEMINI_PROJECT_DIR", raising=False)
    (t / "base.txt").write_text("one\ntwo\nthree\n")
    with Store.init(t) as store:
        store.snapshot("start", task=S)
    return t


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("npm run dev &", "&"), ("(sleep 1; make) &", "&"), ("make&", "&"), ("a & b", "&"),
        ("nohup ./serve", "nohup"), ("setsid ./x", "setsid"), ("./x & disown", "&"), ("disown -h %1", "disown"),
        ("Start-Process npm -ArgumentList dev", "start-process"),
        ("make && make test", None), ("ls 2>&1 | tee log", None), ("cmd &> log", None), ("a |& b", None),
        ('echo "a & b"', None), ("echo 'nohup'", "nohup"), ("pytest -q", None),
        # A here-document's body is data: Rust's `&x` written by `cat <<EOF` backgrounds nothing.
        ("cat > f.rs <<EOF\nlet y = &x;\nEOF", None), ("cat > f <<'EOF'\na & b\nEOF\n./serve &", "&"),
        ("cat <<-END > f\n\ta & b\n\tEND\nmake", None),
        # Too long to tokenize: scanned, any lone "&" counts.
        ("true && " * 20000 + "x &", "&"), ("true && " * 20000 + "x", None),
    ],
)
def test_which_command_lines_background(command: str, why: str | None):
    assert background.command_reason(command) == why


def test_powershell_call_operator_is_not_a_background():
    assert background.command_reason("& ./build.ps1", powershell=True) is None
    assert background.command_reason("./build.ps1 &", powershell=True) == "&"


def test_a_backgrounding_command_line_makes_later_changes_unknown(tree: Path):
    """A plain `cmd &` in Claude Code's Bash: what changes after its PostToolUse is unknown."""
    pre, post = bash(tree, "toolu_1", "./watch.sh > out.log &")
    claude(tree, **pre)
    (tree / "out.log").write_text("started\n")
    claude(tree, **post)
    (tree / "out.log").write_text("started\nmore, later\n")
    (tree / "mine.txt").write_text("the user's\n")
    claude(tree, hook_event_name="Stop")
    assert labels(tree)[1:] == [("after Bash: ./watch.sh > out.log &", "agent"), ("end of turn", "unknown")]


@pytest.mark.parametrize("flag", [{"run_in_background": True}, {"is_background": True}])
def test_an_agents_background_flag_makes_later_changes_unknown(tree: Path, flag: dict[str, Any]):
    pre, post = bash(tree, "toolu_1", "./serve", **flag)
    claude(tree, **pre)
    claude(tree, **post)
    (tree / "late.txt").write_text("written later\n")
    claude(tree, hook_event_name="UserPromptSubmit", prompt="next")
    with Store.open(tree) as store:
        cp = store.checkpoints()[0]
    assert cp.actor == "unknown" and "toolu_1" in cp.metadata["attributed"]


def test_users_edits_while_a_background_task_runs_at_stop_are_never_reverted(tree: Path):
    """Issue 37, broken promise 3: a run_in_background task still runs at Stop; the user edits a
    file and creates another; `revert --task S --actor agent` must keep both."""
    pre, post = bash(tree, "toolu_bg", "./long-build", run_in_background=True)
    claude(tree, hook_event_name="UserPromptSubmit", prompt="build it")
    claude(tree, **pre)
    claude(tree, **post)
    e_pre = {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_use_id": "toolu_e", "tool_input": {"file_path": str(tree / "agent.txt")}}
    claude(tree, **e_pre)
    (tree / "agent.txt").write_text("by the agent's Edit\n")
    claude(tree, **{**e_pre, "hook_event_name": "PostToolUse"})
    claude(tree, hook_event_name="Stop", background_tasks=[{"id": "toolu_bg"}])
    (tree / "base.txt").write_text("one\ntwo (the user's)\nthree\n")
    (tree / "new.txt").write_text("the user's new file\n")
    claude(tree, hook_event_name="UserPromptSubmit", prompt="and now?")
    assert labels(tree)[-1] == ("and now?", "unknown")
    with Store.open(tree) as store:
        report = store.revert(task=S, actor="agent")
    assert not (tree / "agent.txt").exists()
    assert (tree / "base.txt").read_text() == "one\ntwo (the user's)\nthree\n"
    assert (tree / "new.txt").read_text() == "the user's new file\n"
    assert [sorted(p.decode() for p in u.paths) for u in report.unknown] == [["base.txt", "new.txt"]]
    assert not any(u.taken for u in report.unknown)


def test_stop_with_no_background_task_ends_the_window(tree: Path):
    pre, post = bash(tree, "toolu_bg", "./x", run_in_background=True)
    claude(tree, **pre)
    claude(tree, **post)
    (tree / "bg.txt").write_text("the command's\n")
    claude(tree, hook_event_name="Stop", background_tasks=[])  # holds bg.txt: still unknown
    (tree / "mine.txt").write_text("the user's\n")
    claude(tree, hook_event_name="UserPromptSubmit", prompt="next")
    assert labels(tree)[-2:] == [("end of turn", "unknown"), ("next", "user")]


def test_copilot_async_shell_is_unknown_until_its_shell_completed_notification(tree: Path):
    def cop(**doc: Any) -> None:
        send(tree, "copilot", session_id=S, cwd=str(tree), timestamp="2026-11-28T10:00:00Z", **doc)

    shell = {"tool_name": "bash", "tool_input": {"command": "npm test", "mode": "async"}}
    cop(hook_event_name="PreToolUse", **shell)
    cop(hook_event_name="PostToolUse", **shell, tool_result={"result_type": "success", "text_result_for_llm": "started"})
    (tree / "report.xml").write_text("<tests/>\n")
    cop(hook_event_name="Notification", message="Shell completed", title="Shell completed", notification_type="shell_completed")
    (tree / "mine.txt").write_text("the user's\n")
    cop(hook_event_name="UserPromptSubmit", prompt="next")
    assert labels(tree)[-2:] == [("background command finished", "unknown"), ("next", "user")]


def test_gemini_is_background_shell(tree: Path):
    def gem(**doc: Any) -> None:
        send(tree, "gemini", session_id=S, cwd=str(tree), timestamp="2026-11-28T10:00:00Z", **doc)

    shell = {"tool_name": "run_shell_command", "tool_input": {"command": "npm run dev", "is_background": True}}
    gem(hook_event_name="BeforeTool", **shell)
    gem(hook_event_name="AfterTool", **shell, tool_response={"llmContent": "started", "returnDisplay": ""})
    (tree / "dist.js").write_text("built later\n")
    gem(hook_event_name="AfterAgent", prompt="p", prompt_response="r", stop_hook_active=False)
    assert labels(tree)[-1] == ("end of turn", "unknown")


def test_the_window_ends_after_the_configured_time(tree: Path):
    """Agents that never say a background call ended: hooks.background-window seconds; the event
    that finds the window over is still unknown (it holds what the call wrote), the next is not."""
    with Store.open(tree) as store:
        store.config_set("hooks.background-window", 1)
    pre, post = bash(tree, "toolu_1", "./serve &")
    claude(tree, **pre)
    claude(tree, **post)
    time.sleep(1.2)
    (tree / "a.txt").write_text("1\n")
    claude(tree, hook_event_name="UserPromptSubmit", prompt="first")
    (tree / "b.txt").write_text("2\n")
    claude(tree, hook_event_name="UserPromptSubmit", prompt="second")
    assert labels(tree)[-2:] == [("first", "unknown"), ("second", "user")]


def test_the_state_file_is_not_rewritten_when_nothing_changed(tree: Path):
    claude(tree, hook_event_name="UserPromptSubmit", prompt="p")
    [state] = (tree / ".snapstore" / hook_state.DIRNAME).iterdir()
    os.utime(state, ns=(1, 1))
    claude(tree, hook_event_name="UserPromptSubmit", prompt="q")
    assert state.stat().st_mtime_ns == 1
    pre, _ = bash(tree, "toolu_1", "ls")
    claude(tree, **pre)
    assert state.stat().st_mtime_ns != 1 and "toolu_1" in state.read_text()


def test_an_older_state_file_keeps_its_background_calls(tree: Path):
    """A state file written before the windows had times: its background calls stay open."""
    claude(tree, hook_event_name="UserPromptSubmit", prompt="p")
    [state] = (tree / ".snapstore" / hook_state.DIRNAME).iterdir()
    state.write_text(json.dumps({"running": [], "background": ["toolu_old"]}))
    (tree / "x.txt").write_text("?\n")
    claude(tree, hook_event_name="UserPromptSubmit", prompt="q")
    assert labels(tree)[-1] == ("q", "unknown")


# -- revert by actor: unknown changes are listed, taken only when asked --------------------------


def _unknown_session(tree: Path) -> None:
    pre, post = bash(tree, "toolu_1", "echo agent > agent.txt; ./bg &")
    claude(tree, **pre)
    (tree / "agent.txt").write_text("agent\n")
    claude(tree, **post)
    (tree / "bg.txt").write_text("the background command's, or the user's?\n")
    claude(tree, hook_event_name="Stop")


def test_revert_of_the_agent_lists_unknown_and_include_unknown_takes_it(tree: Path):
    _unknown_session(tree)
    with Store.open(tree) as store:
        report = store.revert(task=S, actor="agent")
        assert [u.paths for u in report.unknown] == [[b"bg.txt"]] and not report.unknown[0].taken
        assert (tree / "bg.txt").exists() and not (tree / "agent.txt").exists()
        store.undo()
        report = store.revert(task=S, actor="agent", include_unknown=True)
    assert report.unknown[0].taken and "and 1 unknown" in report.what
    assert not (tree / "bg.txt").exists() and not (tree / "agent.txt").exists()


def test_revert_with_only_unknown_changes_says_so(tree: Path):
    from snapstore.errors import RefError

    pre, post = bash(tree, "toolu_1", "./bg &")
    claude(tree, **pre)
    claude(tree, **post)
    (tree / "bg.txt").write_text("?\n")
    claude(tree, hook_event_name="Stop")
    with Store.open(tree) as store, pytest.raises(RefError, match="1 unknown checkpoint"):
        store.revert(task=S, actor="agent")


def test_cli_lists_unknown_and_json_has_the_label(tree: Path, monkeypatch):
    _unknown_session(tree)
    r = call_cli(monkeypatch, ["revert", "--task", S, "--actor", "agent"], cwd=tree)
    assert r.code == 0, r.err
    assert "left alone: 1 checkpoint(s) labelled unknown" in r.text and "bg.txt" in r.text
    assert (tree / "bg.txt").exists()
    call_cli(monkeypatch, ["undo"], cwd=tree)
    r = call_cli(monkeypatch, ["revert", "--task", S, "--actor", "agent", "--include-unknown", "--json"], cwd=tree)
    doc = json.loads(r.out)
    assert [u["paths"] for u in doc["unknown"]] == [["bg.txt"]] and doc["unknown"][0]["taken"] is True
    assert not (tree / "bg.txt").exists()
    listing = call_cli(monkeypatch, ["list", "--task", S], cwd=tree).text
    assert "end of turn" in listing and " unknown " in listing.splitlines()[-3] + " "
    shown = json.loads(call_cli(monkeypatch, ["list", "--task", S, "--json"], cwd=tree).out)
    assert [c["actor"] for c in shown["checkpoints"]][-3:] == ["unknown", "agent", None]
    text = call_cli(monkeypatch, ["show", ":/end of turn"], cwd=tree).text
    assert "actor:    unknown (changes while the agent's background calls may still run: toolu_1)" in text


@pytest.mark.parametrize(("answer", "taken"), [("y", True), ("n", False)])
def test_on_a_terminal_revert_asks_before_taking_unknown(tree: Path, answer: str, taken: bool):
    _unknown_session(tree)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "snapstore", "revert", "--task", S, "--actor", "agent"],
        cwd=tree, stdin=slave, stdout=slave, stderr=slave, env=subprocess_env(), close_fds=True,
    )
    os.close(slave)
    seen = b""
    while b"Take them back too?" not in seen:
        chunk = os.read(master, 4096)
        assert chunk, seen
        seen += chunk
    assert b"bg.txt" in seen
    os.write(master, answer.encode() + b"\n")
    assert proc.wait(timeout=60) == 0
    os.close(master)
    assert (tree / "bg.txt").exists() is not taken and not (tree / "agent.txt").exists()


def test_copilot_windows_stay_open_until_every_async_shell_could_have_finished(tree: Path):
    """Copilot's notification does not say which shell finished: with two running, one
    notification closes neither window."""
    def cop(**doc: Any) -> None:
        send(tree, "copilot", session_id=S, cwd=str(tree), **doc)

    for cmd in ("npm test", "npm run build"):
        shell = {"tool_name": "bash", "tool_input": {"command": cmd, "mode": "async"}}
        cop(hook_event_name="PreToolUse", **shell)
        cop(hook_event_name="PostToolUse", **shell, tool_result={"result_type": "success", "text_result_for_llm": ""})
    done = {"hook_event_name": "Notification", "message": "done", "notification_type": "shell_completed"}
    cop(**done)
    (tree / "one.txt").write_text("?\n")
    cop(hook_event_name="UserPromptSubmit", prompt="after one")
    cop(**done)
    (tree / "two.txt").write_text("?\n")
    cop(hook_event_name="UserPromptSubmit", prompt="after both")
    assert labels(tree)[-2:] == [("after one", "unknown"), ("after both", "user")]


def test_a_completion_notification_without_a_session_is_still_unknown(tree: Path):
    (tree / "late.txt").write_text("what the command wrote before it ended\n")
    send(tree, "copilot", cwd=str(tree), hook_event_name="Notification", message="done", notification_type="shell_completed")
    with Store.open(tree) as store:
        cp = store.checkpoints()[0]
    assert (cp.message, cp.actor) == ("background command finished", "unknown")


def _log_session(tree: Path) -> None:
    """A backgrounded server writes its log: the log appears inside a later tool call's window
    (so that call's checkpoint adds it, as the agent's), then grows outside any window."""
    claude(tree, hook_event_name="UserPromptSubmit", prompt="start the server, then edit")
    pre, post = bash(tree, "toolu_srv", "./serve > log.txt &")
    claude(tree, **pre)
    claude(tree, **post)
    e_pre = {"hook_event_name": "PreToolUse", "tool_name": "Edit", "tool_use_id": "toolu_e",
             "tool_input": {"file_path": str(tree / "agent.txt")}}
    claude(tree, **e_pre)
    (tree / "log.txt").write_text("listening\n")  # the server, while the Edit runs
    (tree / "agent.txt").write_text("by the agent's Edit\n")
    claude(tree, **{**e_pre, "hook_event_name": "PostToolUse"})
    (tree / "log.txt").write_text("listening\nGET /\n")  # the server again, between calls
    claude(tree, hook_event_name="Stop")


def test_a_file_the_agent_added_then_an_unknown_change_grew_is_kept_and_listed(tree: Path):
    """A revert of the agent does not refuse over a file that a change of unknown origin changed
    after the agent's call added it: the file is left as it is (the unknown change is not taken
    back, and the agent's part of it cannot be told apart) and listed with the unknown changes;
    the rest of the agent's work is taken back."""
    _log_session(tree)
    with Store.open(tree) as store:
        assert ("end of turn", "unknown") in labels(tree)
        report = store.revert(task=S, actor="agent")
    assert not (tree / "agent.txt").exists()
    assert (tree / "log.txt").read_text() == "listening\nGET /\n"
    assert b"log.txt" in {p for u in report.unknown for p in u.paths}
    [log] = [o for o in report.outcomes if o.path == b"log.txt"]
    assert log.status == "untouched" and "unknown" in log.note, log
    assert "--ours" not in log.note


def test_an_explicit_theirs_still_takes_such_a_file_back(tree: Path):
    _log_session(tree)
    with Store.open(tree) as store:
        store.revert(task=S, actor="agent", conflicts="theirs")
    assert not (tree / "log.txt").exists() and not (tree / "agent.txt").exists()
