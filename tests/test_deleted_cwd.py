"""A working directory deleted under the shell (issue 22 class 12): one line and exit 8, never
a traceback; ``-C /abs`` and a hook's ``$CLAUDE_PROJECT_DIR`` still work from there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, SNAPSTORE_SCRIPT, subprocess_env

from snapstore.errors import TreeIOError
from snapstore.store import Store


def _in_deleted_dir(tmp_path: Path, args: list[str], *, script: bool, stdin: bytes = b"", **env: str) -> subprocess.CompletedProcess[bytes]:
    gone = tmp_path / "gone"

    def enter_and_delete() -> None:
        gone.mkdir(exist_ok=True)
        os.chdir(gone)
        os.rmdir(gone)

    cmd = [str(SNAPSTORE_SCRIPT)] if script else [sys.executable, "-m", "snapstore"]
    # No empty PYTHONPATH entry: it stands for the working directory, which Python itself
    # cannot resolve once it is gone.
    environ = subprocess_env(**env)
    environ["PYTHONPATH"] = str(REPO)
    return subprocess.run(cmd + args, input=stdin, capture_output=True, env=environ, preexec_fn=enter_and_delete, timeout=60)


@pytest.mark.parametrize("script", [True, False], ids=["console-script", "python-m"])
@pytest.mark.parametrize("args", [["list"], ["snapshot", "-m", "x"], ["diff"], ["restore", "latest"]])
def test_every_command_says_so_in_one_line(tmp_path: Path, script: bool, args: list[str]):
    done = _in_deleted_dir(tmp_path, args, script=script)
    assert done.returncode == TreeIOError.exit_code, done.stderr
    assert b"Traceback" not in done.stderr
    assert done.stderr.count(b"\n") == 1 and b"current directory no longer exists" in done.stderr


def test_an_absolute_dash_c_still_works(tmp_path: Path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    Store.init(tree).close()
    done = _in_deleted_dir(tmp_path, ["-C", str(tree), "snapshot", "-m", "from a deleted dir"], script=True)
    assert done.returncode == 0, done.stderr
    with Store.open(tree) as store:
        assert store.checkpoints()[0].message == "from a deleted dir"


def test_the_hook_records_its_checkpoint_through_the_project_dir(tmp_path: Path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("a\n")
    with Store.init(tree) as store:
        store.snapshot("first")
    (tree / "a.txt").write_text("changed by the tool\n")
    event = {"hook_event_name": "PostToolUse", "session_id": "s1", "tool_name": "Bash", "tool_use_id": "t1",
             "tool_input": {"command": "rm -rf gone"}, "cwd": str(tmp_path / "gone")}
    done = _in_deleted_dir(tmp_path, ["hook", "claude-code", "--no-service"], script=True,
                           stdin=json.dumps(event).encode(), CLAUDE_PROJECT_DIR=str(tree))
    assert done.returncode == 0, done.stderr
    with Store.open(tree) as store:
        latest = store.checkpoints()[0]
        assert latest.message.startswith("after Bash") and latest.task == "s1"
