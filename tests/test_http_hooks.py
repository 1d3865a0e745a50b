"""Claude Code's http hooks answered by the service (issue 23 req 5): `integrate claude-code
--http` writes the tool events as http hooks (in the unshared, 0600 settings.local.json) and
keeps command hooks for the rest; the service records an event POSTed with the token, exactly as
the command hook would; a wrong token, a wrong Host, another path, an oversized body and
another local user's connection get no work; a command hook that finds the service down labels
what it records `unknown` (tool events sent to it may have been lost)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import SNAPSTORE_SCRIPT, second_user, subprocess_env

from snapstore.integrations import settings
from snapstore.service import daemon, http_hooks
from snapstore.store import Store

SESSION = "h-1"
# --http is refused where another user runs processes (a desktop: system daemons run as their
# own users; see test_http_hooks_other_user.py for the refusal itself).
pytestmark = pytest.mark.skipif(http_hooks.refusal() is not None, reason=f"--http is refused on this machine: {http_hooks.refusal()}")


def post(port: int, body: Any, *, token: str, host: str | None = None, path: str = "/snapstore/hook/claude-code") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    if host is not None:
        headers["Host"] = host
    conn.request("POST", path, body=data, headers=headers)
    answer = conn.getresponse()
    return answer.status, answer.read().decode()


def event(name: str, tree: Path, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": name, "session_id": SESSION, "transcript_path": "", "cwd": str(tree), **fields}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, int, str]]:
    """A project integrated with --http, its service running: ``(tree, port, token)``."""
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    Store.init(tree).close()
    settings.integrate_claude_code(str(tree), http=True, home=str(tmp_path / "home"))
    store_dir = str(tree / ".snapstore")
    found = http_hooks.load(store_dir)
    assert found is not None
    daemon.start_detached(store_dir, 60)
    try:
        yield tree, found[0], found[1]
    finally:
        daemon.stop(store_dir)


def test_integrate_writes_http_tool_hooks_in_the_private_local_settings(tmp_path: Path):
    tree = tmp_path / "proj"
    tree.mkdir()
    Store.init(tree).close()
    lines = settings.integrate_claude_code(str(tree), http=True, home=str(tmp_path / "home"))
    path = tree / ".claude" / "settings.local.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and not (tree / ".claude" / "settings.json").exists()
    assert stat.S_IMODE((tree / ".snapstore" / http_hooks.CONFIG_NAME).stat().st_mode) == 0o600
    port, token = http_hooks.load(str(tree / ".snapstore")) or (0, "")
    hooks = json.loads(path.read_text())["hooks"]
    for name in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        assert hooks[name][0]["hooks"] == [{"type": "http", "url": f"http://127.0.0.1:{port}/snapstore/hook/claude-code",
                                            "headers": {"Authorization": f"Bearer {token}"}, "timeout": 20}]
    for name in ("UserPromptSubmit", "Stop", "SubagentStop", "PreCompact"):
        assert hooks[name][0]["hooks"][0]["command"] == f"{SNAPSTORE_SCRIPT} hook claude-code"
    assert not any(token in line for line in lines)  # the credential is never printed
    assert settings.integrate_claude_code(str(tree), http=True, home=str(tmp_path / "home")) == []
    # Back to command hooks: the http entries are replaced, not kept beside them.
    settings.integrate_claude_code(str(tree), scope="local", home=str(tmp_path / "home"))
    assert "http" not in path.read_text()
    settings.integrate_claude_code(str(tree), scope="local", remove=True, home=str(tmp_path / "home"))
    assert "snapstore" not in path.read_text()


def test_the_service_records_http_events_like_the_command_hook(served: tuple[Path, int, str]):
    tree, port, token = served
    edit = {"tool_name": "Edit", "tool_use_id": "toolu_1", "tool_input": {"file_path": str(tree / "a.py")}}
    (tree / "mine.txt").write_text("the user's\n")
    assert post(port, event("PreToolUse", tree, **edit), token=token) == (200, "{}")
    (tree / "a.py").write_text("x = 2\n")
    assert post(port, event("PostToolUse", tree, **edit), token=token) == (200, "{}")
    with Store.open(tree) as store:
        rows = [(c.message, c.metadata["actor"]) for c in reversed(store.checkpoints(task=SESSION))]
    assert rows == [("before Edit: a.py", "user"), ("after Edit: a.py", "agent")]


def test_requests_without_the_credential_or_from_elsewhere_do_no_work(served: tuple[Path, int, str]):
    tree, port, token = served
    (tree / "mine.txt").write_text("changed\n")
    pre = event("PreToolUse", tree, tool_name="Bash", tool_use_id="t", tool_input={"command": "ls"})
    assert post(port, pre, token="x" * 43)[0] == 401
    assert post(port, pre, token=token, host="evil.example:80")[0] == 403  # DNS rebinding
    assert post(port, pre, token=token, path="/snapstore/hook/vim")[0] == 404
    big = socket.create_connection(("127.0.0.1", port), timeout=30)  # a body too large: refused unread
    big.sendall(f"POST /snapstore/hook/claude-code HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
                f"Content-Length: {http_hooks.MAX_BODY + 1}\r\n\r\n{{".encode())
    assert big.recv(100).startswith(b"HTTP/1.0 413")
    big.close()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/snapstore/hook/claude-code", headers={"Authorization": f"Bearer {token}"})
    assert conn.getresponse().status == 405
    with Store.open(tree) as store:
        assert store.checkpoints(task=SESSION) == []


OTHER_POST = r"""
import http.client, json, sys
port, token = int(sys.argv[1]), sys.argv[2]
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
body = json.dumps({"hook_event_name": "PreToolUse", "session_id": "h-1", "tool_name": "Bash", "tool_use_id": "t", "tool_input": {"command": "ls"}})
conn.request("POST", "/snapstore/hook/claude-code", body=body, headers={"Authorization": "Bearer " + token})
print(conn.getresponse().status)
"""


def test_another_local_user_with_the_token_is_refused(served: tuple[Path, int, str]):
    tree, port, token = served
    (tree / "mine.txt").write_text("changed\n")
    with second_user("snaphttp") as (_name, uid, gid):
        done = subprocess.run(["/usr/bin/python3", "-I", "-c", OTHER_POST, str(port), token], user=uid, group=gid,
                              extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "403", (done.stdout, done.stderr)
    with Store.open(tree) as store:
        assert store.checkpoints(task=SESSION) == []


def test_a_command_hook_that_finds_the_service_down_cannot_vouch(tmp_path: Path):
    tree = tmp_path / "proj"
    tree.mkdir()
    Store.init(tree).close()
    settings.integrate_claude_code(str(tree), http=True, home=str(tmp_path / "home"))
    env = {k: v for k, v in subprocess_env().items() if not k.startswith(("CLAUDE_", "SNAPSTORE_"))}
    store_dir = str(tree / ".snapstore")

    def command_hook(doc: dict[str, Any]) -> None:
        done = subprocess.run([sys.executable, "-m", "snapstore", "hook", "claude-code"], input=json.dumps(doc),
                              cwd=tree, env={**env, "CLAUDE_PROJECT_DIR": str(tree)}, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done

    try:
        command_hook(event("UserPromptSubmit", tree, prompt="go"))  # the session's first event
        daemon.stop(store_dir)  # the service dies mid-turn: http tool events would be lost
        (tree / "made.txt").write_text("by a tool call whose http hook failed\n")
        command_hook(event("Stop", tree))
    finally:
        daemon.stop(store_dir)
    with Store.open(tree) as store:
        rows = [(c.message, c.metadata["actor"]) for c in reversed(store.checkpoints(task=SESSION))]
    assert rows == [("go", "user"), ("end of turn", "unknown")], rows
    assert os.path.exists(store_dir)
