"""What an agent's tool event costs the resident service (issue 37, requirement 6), checked by
counts, not by time: a no-change hook event commits nothing to the store (no fsynced request
row), the session's state file is rewritten without a truncation, the service answers a hook
without click's parsing (with the same bytes), and a lost hook answer with no row exits 0."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from platform_marks import needs_inotify

from snapstore.cli.commands_agent import plain_hook
from snapstore.integrations import hook_state
from snapstore.service.client import lost
from snapstore.storage import lmdb_backend
from snapstore.store import Store
from snapstore.testing import build_tree


def event(tree: Path, name: str, call: str = "t1") -> str:
    return json.dumps({"session_id": "s", "transcript_path": "/nonexistent", "cwd": str(tree), "hook_event_name": name,
                       "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": call})


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from snapstore.service.server import Service

    tree = tmp_path / "t"
    build_tree(tree, {"a.txt": b"alpha\n", "src/b.py": b"x = 1\n"})
    with Store.init(tree) as s:
        s.snapshot("base")
    monkeypatch.setenv("CLAUDE_PROJECT_DIR", str(tree))
    svc = Service(str(tree / ".snapstore"))
    yield svc, tree
    svc.store.close()
    os.close(svc._dir_fd)


def invoke(svc, tree: Path, body: str, argv=("hook", "claude-code")) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = svc._invoke(list(argv), str(tree), {}, body, out, err, "hook", os.urandom(16))
    assert err.getvalue() == ""
    return code, out.getvalue()


@needs_inotify
def test_a_no_change_hook_event_commits_nothing(service, monkeypatch):
    svc, tree = service
    invoke(svc, tree, event(tree, "PreToolUse"))  # (the first event of a session may set up)
    invoke(svc, tree, event(tree, "PostToolUse"))
    commits: list[int] = []
    real = lmdb_backend.LmdbBackend._apply
    monkeypatch.setattr(lmdb_backend.LmdbBackend, "_apply", lambda self, batch: (commits.append(1), real(self, batch))[1])
    for i in range(3):
        assert invoke(svc, tree, event(tree, "PreToolUse", f"c{i}")) == (0, "")
        assert invoke(svc, tree, event(tree, "PostToolUse", f"c{i}")) == (0, "")
    assert commits == []
    (tree / "a.txt").write_bytes(b"changed by the tool\n")
    invoke(svc, tree, event(tree, "PostToolUse", "c9"))
    assert commits, "a change is recorded"
    assert [c.message for c in svc.store.checkpoints()][0].startswith("after Bash")


def test_the_service_answers_a_hook_without_click_and_with_the_same_bytes(service, monkeypatch):
    svc, tree = service
    from snapstore import cli

    bodies = ["not json", event(tree, "PreToolUse"), json.dumps({"hook_event_name": "Stop", "session_id": "s"})]
    clicked = [invoke(svc, tree, body) for body in bodies]
    monkeypatch.setattr(cli, "main", lambda *a, **k: pytest.fail("click parsed a plain hook event"))
    assert [invoke(svc, tree, body) for body in bodies] == clicked
    for argv in (["hook", "claude-code", "--no-service"], ["hook", "gemini"]):
        assert plain_hook(argv, opener=svc._provide) is not None or argv == []
    for odd in (["hook"], ["hook", "--help"], ["hook", "claude-code", "--store", "x"], ["hook", "a", "b"]):
        assert plain_hook(odd, opener=svc._provide) is None  # (click parses, and says what is wrong)


def test_the_session_state_is_rewritten_without_a_truncation(tmp_path: Path, monkeypatch):
    store_dir = str(tmp_path)
    with hook_state.session(store_dir, "s") as calls:
        calls.running.update({"toolu_aaaaaaaaaaaa", "toolu_bbbbbbbbbbbb"})
    monkeypatch.setattr(hook_state.os, "ftruncate", lambda fd, n: pytest.fail("truncated"))
    with hook_state.session(store_dir, "s") as calls:
        calls.running.discard("toolu_aaaaaaaaaaaa")  # (shorter: padded, not truncated)
    with hook_state.session(store_dir, "s") as calls:
        assert calls.readable and calls.running == {"toolu_bbbbbbbbbbbb"}
        calls.running.clear()
    with hook_state.session(store_dir, "s") as calls:
        assert calls.readable and not calls.running


def test_a_lost_hook_answer_with_nothing_recorded_exits_0(tmp_path: Path, capsys):
    tree = tmp_path / "t"
    build_tree(tree, {"a.txt": b"alpha\n"})
    Store.init(tree).close()
    assert lost.report(str(tree / ".snapstore"), os.urandom(16).hex(), "hook", b"0") == 0
    assert "recorded no checkpoint" in capsys.readouterr().err
    assert lost.report(str(tree / ".snapstore"), os.urandom(16).hex(), "snapshot", b"0") == 12
