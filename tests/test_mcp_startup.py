"""``snapstore mcp`` answers its first request before loading the MCP SDK (issue 37 req 5).

Measured without a clock: the server runs under ``python -X importtime`` with stderr and
stdout on one pipe, so every import that finished before the answer to ``initialize`` is
written before it.  The timing itself is ``python -m benchmarks.mcp_startup``."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import subprocess_env

pytest.importorskip("mcp")

from snapstore.integrations import mcp_front  # noqa: E402

#: Modules that must not be loaded before the first answer (each costs tens to hundreds of ms).
HEAVY = ("mcp", "mcp_types", "pydantic", "anyio", "snapstore.store", "snapstore.integrations.mcp_server")
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


class Server:
    def __init__(self, tree: Path, cache: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "snapstore", "mcp", "--root", str(tree)], cwd=tree,
            env=subprocess_env(XDG_CACHE_HOME=str(cache)), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.imported: list[str] = []
        self.answers: list[dict[str, Any]] = []

    def send(self, doc: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(doc).encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self, want: int) -> tuple[dict[str, Any], list[str]]:
        """The answer to request ``want``, and the modules imported before it was written."""
        assert self.proc.stdout is not None
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], 60)
            assert ready, f"no answer to request {want}"
            line = self.proc.stdout.readline().decode()
            assert line, "the server ended"
            if line.startswith("import time:"):
                self.imported.append(line.rsplit("|", 1)[1].strip())
            elif line.startswith("{"):
                doc = json.loads(line)
                self.answers.append(doc)
                if doc.get("id") == want:
                    return doc, list(self.imported)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def _first_answer(tree: Path, cache: Path) -> tuple[dict[str, Any], list[str], list[dict[str, Any]]]:
    server = Server(tree, cache)
    try:
        server.send(INITIALIZE)
        answer, before = server.answer(1)
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools, _ = server.answer(2)
        assert len(tools["result"]["tools"]) == 10
        return answer, before, server.answers
    finally:
        server.close()


def test_the_first_answer_comes_before_the_sdk_is_imported(tmp_path: Path):
    cache = tmp_path / "cache"
    # First start after an install: no copy of the answer yet, so the SDK answers (and is loaded).
    sdk_answer, before, _ = _first_answer(tmp_path, cache)
    assert "mcp" in before and sdk_answer["result"]["serverInfo"]["name"] == "snapstore"
    kept = list((cache / "snapstore").iterdir())
    assert len(kept) == 2 and all(k.stat().st_mode & 0o777 == 0o600 for k in kept)  # initialize, tools/list
    # Every later start: the same answer, written before any heavy module is loaded, and once.
    early, before, answers = _first_answer(tmp_path, cache)
    assert early == sdk_answer
    assert not [m for m in before if m in HEAVY], before
    assert [a.get("id") for a in answers] == [1, 2]  # each answered once


def test_the_tools_list_is_answered_before_the_sdk_is_loaded_and_is_the_sdks(tmp_path: Path):
    cache = tmp_path / "cache"
    _first_answer(tmp_path, cache)  # keeps the SDK's answers
    server = Server(tmp_path, cache)
    try:
        server.send(INITIALIZE)
        server.answer(1)
        server.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        server.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        listed, before = server.answer(2)
        assert not [m for m in before if m in HEAVY], before
        server.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "checkpoint_list", "arguments": {}}})
        called, _ = server.answer(3)
        assert called["result"]["isError"] is True  # (no store here: a tool error, from the SDK)
        assert [a.get("id") for a in server.answers] == [1, 2, 3]
    finally:
        server.close()
    sdk = Server(tmp_path, tmp_path / "other-cache")  # no copies: the SDK's own list
    try:
        sdk.send(INITIALIZE)
        sdk.answer(1)
        sdk.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        sdk.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert sdk.answer(2)[0] == listed
    finally:
        sdk.close()


def test_a_kept_answer_of_another_user_or_a_symlink_is_not_used(tmp_path: Path):
    path = mcp_front.cache_path("initialize")
    assert path is not None
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"protocolVersion": "2025-06-18"}))
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert mcp_front.read_cached(str(link), "protocolVersion") is None
    assert mcp_front.read_cached(str(target), "protocolVersion") == {"protocolVersion": "2025-06-18"}
    assert mcp_front.read_cached(str(target), "tools") is None  # not the answer it is used as
    (tmp_path / "big.json").write_text(json.dumps({"protocolVersion": "x", "pad": "x" * mcp_front.MAX_CACHED_BYTES}))
    assert mcp_front.read_cached(str(tmp_path / "big.json"), "protocolVersion") is None
    if os.getuid() == 0:
        os.chown(target, 12345, 12345)
        assert mcp_front.read_cached(str(target), "protocolVersion") is None


def test_the_kept_answer_is_named_by_the_request_and_the_tools_code(tmp_path: Path):
    assert mcp_front.cache_path("initialize\x002025-06-18") != mcp_front.cache_path("initialize\x002025-11-25")
    before = mcp_front.cache_path("tools/list")
    tools = Path(mcp_front.__file__).with_name("mcp_server.py")
    stamp = tools.stat()
    try:
        os.utime(tools, ns=(stamp.st_atime_ns, stamp.st_mtime_ns + 1))  # an edit of the tools
        assert mcp_front.cache_path("tools/list") != before
    finally:
        os.utime(tools, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))


@pytest.mark.parametrize("first", [b"[" * 100_000 + b"]" * 100_000, b'{"a": "\\ud83d", "b": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
def test_a_request_nested_100000_deep_is_answered_and_the_server_goes_on(tmp_path: Path, first: bytes):
    """The pumps in front of the SDK decode what they look at: a deep line must not stop them."""
    server = Server(tmp_path, tmp_path / "cache")
    try:
        assert server.proc.stdin is not None
        server.proc.stdin.write(first + b"\n")
        server.proc.stdin.flush()
        server.send(INITIALIZE)
        answer, _ = server.answer(1)
        assert answer["result"]["serverInfo"]["name"] == "snapstore"
    finally:
        server.close()
