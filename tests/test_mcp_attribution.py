"""MCP-only attribution (issue 23 req 2): with no hooks, edit_file records its own change as the
agent's (a checkpoint after the write), checkpoint_create records what changed since the
previous checkpoint as "unknown" unless told who, so checkpoint_revert(actor="agent") takes back
exactly what the agent's tools did and keeps the user's edits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from helpers import mcp_params  # noqa: E402
from mcp import ClientSession, stdio_client  # noqa: E402

from snapstore.store import Store  # noqa: E402


def _project(tmp_path: Path) -> Path:
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.py").write_text("x = 1\n")
    return tree


def _play(tree: Path, script: Callable[[ClientSession], Awaitable[None]]) -> None:
    """Run ``script`` against a real ``snapstore mcp`` server for ``tree``."""

    async def main() -> None:
        async with stdio_client(mcp_params(tree)) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            await script(s)

    anyio.run(main)


def test_reverting_the_agent_over_mcp_keeps_the_users_edits(tmp_path: Path):
    tree = _project(tmp_path)
    (tree / "notes.txt").write_text("v0\n")
    results: list[Any] = []

    async def script(s: ClientSession) -> None:
        results.append(await s.call_tool("checkpoint_create", {"message": "start", "task": "s"}))
        (tree / "notes.txt").write_text("v1 by the user\n")
        results.append(await s.call_tool("edit_file", {"path": "a.py", "old_text": "x = 1", "new_text": "x = 2", "task": "s"}))
        (tree / "notes.txt").write_text("v2 by the user\n")
        results.append(await s.call_tool("checkpoint_create", {"message": "later", "task": "s"}))
        results.append(await s.call_tool("checkpoint_create", {"message": "mine", "task": "s", "actor": "user"}))
        results.append(await s.call_tool("checkpoint_revert", {"task": "s", "actor": "agent", "dry_run": False}))

    _play(tree, script)
    assert not any(r.is_error for r in results), [r.content for r in results if r.is_error]
    with Store.open(tree) as store:
        labels = [(c.message, c.metadata.get("actor")) for c in reversed(store.checkpoints(task="s"))]
    assert ("before edit: a.py", "unknown") in labels and ("after edit_file: a.py", "agent") in labels
    assert ("later", "unknown") in labels
    assert (tree / "a.py").read_text() == "x = 1\n"  # the agent's edit is taken back
    assert (tree / "notes.txt").read_text() == "v2 by the user\n"  # the user's stays


def test_mcp_revert_of_the_agent_lists_unknown_and_takes_it_only_when_asked(tmp_path: Path):
    tree = _project(tmp_path)
    results: list[Any] = []

    async def script(s: ClientSession) -> None:
        await s.call_tool("checkpoint_create", {"message": "start", "task": "s"})
        await s.call_tool("edit_file", {"path": "a.py", "old_text": "x = 1", "new_text": "x = 2", "task": "s"})
        (tree / "who.txt").write_text("nobody says\n")
        await s.call_tool("checkpoint_create", {"message": "later", "task": "s"})  # actor unknown
        results.append(await s.call_tool("checkpoint_revert", {"task": "s", "actor": "agent", "dry_run": False}))
        await s.call_tool("undo", {})
        results.append(await s.call_tool("checkpoint_revert", {"task": "s", "actor": "agent", "dry_run": False, "include_unknown": True}))

    _play(tree, script)
    assert not any(r.is_error for r in results), [r.content for r in results if r.is_error]
    left, taken = (r.structured_content["unknown"] for r in results)
    assert [(u["message"], u["paths"], u["taken"]) for u in left] == [("later", ["who.txt"], False)]
    assert [(u["paths"], u["taken"]) for u in taken] == [(["who.txt"], True)]
    assert not (tree / "who.txt").exists() and (tree / "a.py").read_text() == "x = 1\n"


def test_restore_results_carry_real_line_counts(tmp_path: Path):
    tree = tmp_path / "proj"
    tree.mkdir()
    (tree / "a.py").write_text("one\ntwo\nthree\n")
    with Store.init(tree) as store:
        store.snapshot("v1")
    (tree / "a.py").write_text("one\nTWO\nthree\nfour\n")
    params = mcp_params(tree)
    out: list[Any] = []

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out.append(await s.call_tool("checkpoint_restore", {"ref": "latest"}))
            out.append(await s.call_tool("checkpoint_restore", {"ref": "latest", "dry_run": False}))

    anyio.run(main)
    for result in out:
        assert not result.is_error, result.content
        change = result.structured_content["changes"][0]
        assert (change["path"], change["added"], change["removed"]) == ("a.py", 1, 2), change
