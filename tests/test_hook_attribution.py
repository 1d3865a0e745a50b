"""Attribution without holes (issue 23 req 1): failing, background and parallel tool calls.

A session is played through the real hook handler (``claude_code.run``, one event at a time as
Claude Code sends them) with the agent and the user editing files at the moments they would.
Property: ``revert --task S --actor agent`` leaves exactly the user's edits (the agent's files
back as they were), whatever the interleaving; what a background call wrote is either taken back
or listed as ``unknown`` (issue 37)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from snapstore.integrations import claude_code
from snapstore.store import Store

SESSION = "sess-1"


class Session:
    def __init__(self, tree: Path, rng: random.Random):
        self.tree, self.rng = tree, rng
        self.calls = 0
        self.user: dict[str, str] = {}

    def send(self, **event: object) -> None:
        event.setdefault("session_id", SESSION)
        event.setdefault("cwd", str(self.tree))
        out = claude_code.run(json.dumps(event), str(self.tree), lambda: Store.open(self.tree), start_service=False)
        assert out == "", out

    def agent_writes(self, call: str) -> None:
        name = f"agent_{self.rng.randint(0, 4)}.txt"
        (self.tree / name).write_text(f"agent {call} {self.rng.random()}\n")

    def background_writes(self, call: str) -> None:
        self.calls += 1  # a file of its own each time: what it wrote is either reverted or kept
        (self.tree / f"bg_{self.calls:03d}.txt").write_text(f"background {call}\n")

    def user_writes(self) -> None:
        name = f"user_{self.rng.randint(0, 4)}.txt"
        text = f"user {self.rng.random()}\n"
        (self.tree / name).write_text(text)
        self.user[name] = text

    def call_id(self) -> str:
        self.calls += 1
        return f"toolu_{self.calls:03d}"

    def pre(self, call: str, background: bool = False) -> None:
        self.send(hook_event_name="PreToolUse", tool_name="Bash", tool_use_id=call,
                  tool_input={"command": f"run {call}", "run_in_background": background})

    def post(self, call: str, background: bool = False, failed: bool = False) -> None:
        self.send(hook_event_name="PostToolUseFailure" if failed else "PostToolUse", tool_name="Bash",
                  tool_use_id=call, tool_input={"command": f"run {call}", "run_in_background": background})

    def turn(self) -> None:
        rng = self.rng
        if rng.random() < 0.7:
            self.user_writes()  # between turns: the user's
        self.send(hook_event_name="UserPromptSubmit", prompt="do it")
        pending_background: list[str] = []
        for _ in range(rng.randint(1, 4)):
            kind = rng.choice(["plain", "failing", "parallel", "background"])
            if kind == "parallel":
                a, b = self.call_id(), self.call_id()
                self.pre(a)
                self.pre(b)  # its "before" checkpoint sees what a wrote so far
                self.agent_writes(a)
                self.agent_writes(b)
                self.post(a)
                self.agent_writes(b)
                self.post(b)
            elif kind == "background":
                c = self.call_id()
                self.pre(c, background=True)
                self.post(c, background=True)  # it runs on after its PostToolUse
                self.background_writes(c)
                pending_background.append(c)
            else:
                c = self.call_id()
                self.pre(c)
                self.agent_writes(c)
                self.post(c, failed=kind == "failing")
            if rng.random() < 0.3:
                self.user_writes()  # the user edits while no foreground call of the agent runs
        if pending_background and rng.random() < 0.5:
            self.send(hook_event_name="Stop", background_tasks=[{"id": pending_background[0]}])
            self.background_writes(pending_background[0])  # still running after the turn ended
        self.send(hook_event_name="Stop", background_tasks=[])


@pytest.mark.parametrize("seed", range(10))
def test_revert_of_the_agent_leaves_exactly_the_users_edits(tmp_path: Path, seed: int):
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "agent_0.txt").write_text("agent's file as it was\n")
    (tree / "user_0.txt").write_text("user's file as it was\n")
    with Store.init(tree) as store:
        store.snapshot("start", task=SESSION)
    session = Session(tree, random.Random(seed))
    for _ in range(3):
        session.turn()
    with Store.open(tree) as store:
        report = store.revert(task=SESSION, actor="agent", conflicts="refuse")
    files = {p.name: p.read_text() for p in tree.iterdir() if p.is_file()}
    agent = {k: v for k, v in files.items() if k.startswith("agent_")}
    assert agent == {"agent_0.txt": "agent's file as it was\n"}, seed
    for name, text in session.user.items():
        assert files[name] == text, (seed, name)
    listed = {p.decode() for u in report.unknown for p in u.paths}
    assert {k for k in files if k.startswith("bg_")} <= listed, seed


def test_a_failing_command_is_the_agents_and_powershell_is_matched(tmp_path: Path):
    assert "PowerShell" in claude_code.MATCHER.split("|")
    assert "PostToolUseFailure" in claude_code.EVENTS
    tree = tmp_path / "t"
    tree.mkdir()
    Store.init(tree).close()
    s = Session(tree, random.Random(0))
    s.pre("toolu_1")
    (tree / "made.txt").write_text("by a command that then failed\n")
    s.post("toolu_1", failed=True)
    with Store.open(tree) as store:
        cp = store.checkpoints()[0]
    assert cp.metadata["actor"] == "agent" and cp.message.startswith("after failed Bash")


def test_a_failure_whose_pre_tool_event_was_not_seen_is_still_the_agents(tmp_path: Path):
    """The open call usually makes the failing call's checkpoint the agent's anyway; without
    its PreToolUse (another matcher, a lost state file) the event's own label must say so (the
    review's mutation M6 labelled it the user's and survived every test)."""
    tree = tmp_path / "t"
    tree.mkdir()
    Store.init(tree).close()
    s = Session(tree, random.Random(0))
    (tree / "made.txt").write_text("by a command whose start was not seen\n")
    s.post("toolu_9", failed=True)
    with Store.open(tree) as store:
        cp = store.checkpoints()[0]
    assert cp.message.startswith("after failed Bash") and cp.metadata["actor"] == "agent"


def test_changes_while_a_background_call_may_run_are_unknown(tmp_path: Path):
    """Neither the agent's (the user's edits then would be reverted) nor the user's (the
    command's writes would be kept silently): ``unknown``, until Stop reports no background task."""
    tree = tmp_path / "t"
    tree.mkdir()
    Store.init(tree).close()
    s = Session(tree, random.Random(0))
    s.pre("toolu_bg", background=True)
    s.post("toolu_bg", background=True)
    (tree / "late.txt").write_text("written by the background command\n")
    s.send(hook_event_name="UserPromptSubmit", prompt="next")
    with Store.open(tree) as store:
        cp = store.checkpoints()[0]
    assert cp.metadata["actor"] == "unknown" and "toolu_bg" in cp.metadata["attributed"]
    s.send(hook_event_name="Stop", background_tasks=[])  # the background call is over
    (tree / "mine.txt").write_text("the user's\n")
    s.send(hook_event_name="UserPromptSubmit", prompt="again")
    with Store.open(tree) as store:
        assert store.checkpoints()[0].metadata["actor"] == "user"


def test_an_unreadable_session_state_labels_unknown_not_user(tmp_path: Path):
    from snapstore.integrations import hook_state

    tree = tmp_path / "t"
    tree.mkdir()
    Store.init(tree).close()
    s = Session(tree, random.Random(0))
    s.send(hook_event_name="Stop", background_tasks=[])  # makes the state file
    folder = tree / ".snapstore" / hook_state.DIRNAME
    for f in folder.iterdir():
        f.write_text("{damaged")
    (tree / "x.txt").write_text("who?\n")
    s.send(hook_event_name="UserPromptSubmit", prompt="p")
    with Store.open(tree) as store:
        assert store.checkpoints()[0].metadata["actor"] == "unknown"
