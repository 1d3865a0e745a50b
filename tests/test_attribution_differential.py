"""The attribution differential test (issue 37 req 7): the promise, for every agent.

For each of the nine agents a scripted session is played from its documented payloads
(:mod:`agent_sessions`) through the real hook handler on a real store: prompts, file edits, shell
calls (some failing), background shell calls that write later (by the agent's own flag, or by a
command line ending in ``&``, run by a real ``sh``), the user's edits between tool calls and
while background commands run, turn ends, and the agent's word that a background command
finished where it has one.  Timings are random (seeded): background commands sleep a random
while, so their writes land at random points of the event stream.

The oracle, after ``revert --task S --actor agent``:

- every file the user touched holds exactly what the user left (or is gone if the user deleted
  it): the user's changes are never taken back;
- every file the agent's foreground tools wrote is as it was before the session;
- a file a background command wrote is either gone (it landed in a tool call's window: the
  agent's) or still there and *listed* among the revert's ``unknown`` changes;
- nothing else differs.

So the tree is "the base plus exactly the user's changes", plus only what is listed as unknown.
``SNAPSTORE_ATTRIBUTION_REPLAYS`` sets the replays per agent (the slow variant runs 5x as many);
the events go to the hook handler in-process (what ``snapstore hook AGENT`` calls), and in a
slow variant through a real ``snapstore hook AGENT --no-service`` process each.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_sessions import Profile, Shell, profile
from helpers import subprocess_env

from snapstore.integrations import agents
from snapstore.store import Store

REPLAYS = int(os.environ.get("SNAPSTORE_ATTRIBUTION_REPLAYS", "16"))
AGENT_FILES = [f"agent_{i}.txt" for i in range(3)]
USER_FILES = [f"user_{i}.txt" for i in range(3)]
BASE = {name: f"{name} as it was\n" for name in AGENT_FILES + USER_FILES}


class Replay:
    """One session of one agent, played with the user at the keyboard."""

    def __init__(self, agent: str, tree: Path, rng: random.Random, processes: bool = False):
        self.agent, self.tree, self.rng, self.processes = agent, tree, rng, processes
        self.p: Profile = profile(agent, tree)
        self.n = 0
        self.user: dict[str, str | None] = {}  # path -> the user's last content (None: deleted)
        self.pending: list[tuple[str, Path, subprocess.Popen[bytes] | None]] = []

    def send(self, payload: dict[str, object]) -> None:
        if self.processes:
            env = {k: v for k, v in subprocess_env().items() if not k.startswith(("CLAUDE_", "GEMINI_"))}
            done = subprocess.run(
                [sys.executable, "-m", "snapstore", "hook", self.agent, "--no-service"], input=json.dumps(payload),
                cwd=self.tree, env=env, capture_output=True, text=True, timeout=120,
            )
            assert done.returncode == 0, done.stderr
            out = done.stdout
        else:
            out = agents.hook(self.agent, json.dumps(payload), lambda project: lambda: Store.open(project), start_service=False)
        assert not any(k in out for k in ("systemMessage", "errorMessage", "user_message")), out

    def pause(self, longest: float = 0.004) -> None:
        time.sleep(self.rng.uniform(0, longest))

    def next_id(self) -> str:
        self.n += 1
        return f"c{self.n:03d}"

    # -- the user ----------------------------------------------------------------------------

    def user_edit(self) -> None:
        name = self.rng.choice(USER_FILES + ["user_new.txt"])
        path = self.tree / name
        if path.exists() and self.rng.random() < 0.2:
            path.unlink()
            self.user[name] = None
        else:
            text = f"the user's {self.next_id()}\n"
            path.write_text(text)
            self.user[name] = text

    def maybe_user(self, chance: float) -> None:
        if self.rng.random() < chance:
            self.pause()
            self.user_edit()

    # -- the agent's tools ---------------------------------------------------------------------

    def edit(self) -> None:
        call, path = self.next_id(), self.tree / self.rng.choice(AGENT_FILES)
        text = f"the agent's edit {call}\n"
        self.send(self.p.edit("pre", call, path, text))
        self.pause(0.012)  # the tool runs a while: a background command may write meanwhile
        path.write_text(text)
        self.send(self.p.edit("post", call, path, text))

    def shell(self, failed: bool) -> None:
        call = self.next_id()
        target = self.rng.choice(AGENT_FILES)
        s = Shell(call, f"printf 'by {call}\\n' > {target}" + ("; exit 3" if failed else ""), failed=failed)
        self.send(self.p.shell("pre", s))
        done = subprocess.run(["sh", "-c", s.command], cwd=self.tree, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        assert done.returncode == (3 if failed else 0)
        self.pause(0.012)
        self.send(self.p.shell("post", s))

    def background(self) -> None:
        call = self.next_id()
        out = self.tree / f"bg_{call}.txt"
        delay = f"{self.rng.uniform(0, 0.05):.3f}"
        write = f"sleep {delay}; printf 'in the background\\n' > {out.name}"
        if self.p.has_flag and self.rng.random() < 0.5:  # the agent's own flag: the agent runs it on
            s = Shell(call, write, flagged=True)
            self.send(self.p.shell("pre", s))
            proc = subprocess.Popen(["sh", "-c", write], cwd=self.tree, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            self.send(self.p.shell("post", s))
            self.pending.append((call, out, proc))
            return
        s = Shell(call, f"({write}) &")  # the command line backgrounds: sh returns at once
        self.send(self.p.shell("pre", s))
        subprocess.run(["sh", "-c", s.command], cwd=self.tree, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        self.send(self.p.shell("post", s))
        self.pending.append((call, out, None))

    def wait_background(self) -> None:
        """Every background command has written; then the agent says so, where it can."""
        deadline = time.monotonic() + 30
        for _, out, proc in self.pending:
            if proc is not None:
                proc.wait(timeout=30)
            while not out.exists():
                assert time.monotonic() < deadline, f"{out} never written"
                time.sleep(0.005)
        if self.p.done is not None:
            for _ in self.pending:
                self.send(self.p.done())
        if self.pending and self.agent == "claude-code":
            self.send(self.p.stop([]))  # a Stop with no background task left
        self.pending.clear()

    # -- the session ---------------------------------------------------------------------------

    def turn(self) -> None:
        self.maybe_user(0.6)  # between turns
        self.send(self.p.prompt(f"do step {self.next_id()}"))
        for _ in range(self.rng.randint(1, 4)):
            kind = self.rng.choice(["edit", "shell", "failing", "background"])
            if kind == "edit":
                self.edit()
            elif kind == "background":
                self.background()
            else:
                self.shell(failed=kind == "failing")
            self.maybe_user(0.35)  # between tool calls, or while a background command runs
            self.pause()
        self.send(self.p.stop([c for c, _, _ in self.pending]))
        self.maybe_user(0.5)  # after the turn, background commands maybe still running

    def play(self, turns: int) -> None:
        if self.p.spawn is not None:
            self.send(self.p.spawn())
        for _ in range(turns):
            self.turn()
        self.wait_background()
        self.maybe_user(0.7)
        self.send(self.p.prompt("last"))  # records the user's last edits
        self.send(self.p.stop([]))


def replay_once(
    agent: str, tree: Path, seed: int, monkeypatch: pytest.MonkeyPatch, processes: bool = False
) -> tuple[int, int]:
    """One replay and its check; (unknown changes listed, background files taken back)."""
    tree.mkdir()
    monkeypatch.chdir(tree)  # Windsurf and Kiro name the project by the hook's working directory
    for name, text in BASE.items():
        (tree / name).write_text(text)
    with Store.init(tree) as store:
        store.snapshot("base")
    session = Replay(agent, tree, random.Random(seed), processes)
    session.play(turns=session.rng.randint(2, 3))
    with Store.open(tree) as store:
        tasks = {c.task for c in store.checkpoints() if c.task and c.task.startswith(session.p.session)}
        assert len(tasks) == 1, tasks  # (one session: Kiro's is named at its agentSpawn)
        report = store.revert(task=tasks.pop(), actor="agent")
    listed = {p.decode() for u in report.unknown for p in u.paths}
    assert not any(u.taken for u in report.unknown)
    files = {p.name: p.read_text() for p in tree.iterdir() if p.is_file()}
    expected = {k: v for k, v in {**BASE, **session.user}.items() if v is not None}
    where = f"{agent} seed {seed}"
    for name in USER_FILES + ["user_new.txt"]:
        assert files.get(name) == expected.get(name), f"{where}: the user's {name}"
    for name in AGENT_FILES:
        assert files.get(name) == BASE[name], f"{where}: the agent's {name} not taken back"
    extra = set(files) - set(expected)
    assert all(n.startswith("bg_") for n in extra), f"{where}: unexpected files {extra}"
    assert extra <= listed, f"{where}: background files kept but not listed as unknown: {extra - listed}"
    return len(report.unknown), len([p for p in report.paths("reverted") if p.startswith(b"bg_")])


AGENTS = ("claude-code", "gemini", "codex", "copilot", "cursor", "cline", "windsurf", "kiro", "opencode")


def _run(
    agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replays: int, offset: int, processes: bool = False
) -> None:
    for name in ("CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR"):
        monkeypatch.delenv(name, raising=False)
    listed = taken = 0
    for seed in range(offset, offset + replays):
        n_listed, n_taken = replay_once(agent, tmp_path / f"s{seed}", seed, monkeypatch, processes)
        listed += n_listed
        taken += n_taken
    # Not vacuous: background writes were left as unknown (and, by chance, some landed in a tool
    # call's window and were taken back as the agent's: `taken`).
    assert listed > 0, f"{agent}: no unknown change listed in {replays} replays ({taken} background files taken back)"


@pytest.mark.parametrize("agent", AGENTS)
def test_revert_of_the_agent_leaves_the_base_plus_exactly_the_users_changes(agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _run(agent, tmp_path, monkeypatch, REPLAYS, 0)


@pytest.mark.slow
@pytest.mark.parametrize("agent", AGENTS)
def test_the_same_with_many_more_replays(agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _run(agent, tmp_path, monkeypatch, REPLAYS * 5, 1000)


@pytest.mark.slow
@pytest.mark.parametrize("agent", AGENTS)
def test_the_same_through_hook_processes(agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    _run(agent, tmp_path, monkeypatch, 3, 2000, processes=True)
