"""Concurrent first events (issue 38, class 10): agents run tool calls in parallel, so several
hook processes may find a project with no store at the same moment.  Each creates it or opens the
one another made; none loses its checkpoint, and no private init directory is left in the tree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from helpers import subprocess_env

from snapstore.service import daemon
from snapstore.store import Store

#: A hook process that has imported everything, then waits for the common start time, so the
#: processes race on the store's creation itself (not on the interpreter's start).
HOOK = r"""
import io, os, sys, time
from snapstore.cli import main
from snapstore.integrations import claude_code, settings  # noqa: F401 - imported before the start
start = float(sys.argv[1])
sys.stdin = io.StringIO(sys.argv[2])
while time.time() < start:
    pass
sys.exit(main(["hook", "claude-code"]))
"""

PROCESSES = 3
ROUNDS = 6


def race_once(tree: Path) -> list[subprocess.CompletedProcess[str]]:
    env = {k: v for k, v in subprocess_env().items() if not k.startswith(("CLAUDE_", "SNAPSTORE_"))}
    env.update(CLAUDE_PROJECT_DIR=str(tree), SNAPSTORE_NO_SERVICE="1")
    start = time.time() + 1.5  # after every interpreter has imported snapstore
    procs = []
    for i in range(PROCESSES):
        event = {"hook_event_name": "UserPromptSubmit", "session_id": f"s{i}", "prompt": f"prompt {i}", "cwd": str(tree)}
        procs.append(subprocess.Popen([sys.executable, "-c", HOOK, str(start), json.dumps(event)], cwd=tree, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def test_concurrent_first_events_each_keep_their_checkpoint(tmp_path: Path):
    for round_ in range(ROUNDS):
        tree = tmp_path / f"proj{round_}"
        tree.mkdir()
        (tree / "a.py").write_text("x = 1\n")
        try:
            done = race_once(tree)
        finally:
            daemon.stop(str(tree / ".snapstore"))
        for result in done:
            assert result.returncode == 0 and result.stdout.strip() in ("", "{}"), (result.stdout, result.stderr)
        with Store.open(tree) as store:
            prompts = sorted(c.message for c in store.checkpoints())
            log = tree / ".snapstore" / "hook.log"
            why = log.read_text() if log.exists() else ""
        assert prompts == [f"prompt {i}" for i in range(PROCESSES)], (round_, prompts, why)
        assert [n for n in os.listdir(tree) if n.startswith(".snapstore-init-")] == []


def test_an_init_removes_a_killed_inits_directory_but_not_a_live_one(tmp_path: Path):
    import fcntl

    killed, live = tmp_path / ".snapstore-init-killed", tmp_path / ".snapstore-init-live"
    for d in (killed, live):
        d.mkdir()
        (d / "data.mdb").write_bytes(b"x")
    held = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_SH)  # as a running init holds it
        Store.init(tmp_path).close()
        assert not killed.exists() and (live / "data.mdb").exists()
    finally:
        os.close(held)
