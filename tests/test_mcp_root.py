"""A safe project root for the MCP server (issue 23 req 3): hosts start stdio servers in / or
$HOME, and a write tool must not create a store there (snapshotting all of it); --root / -C and
an agent's project variable name the project; --create-anywhere is the explicit way round."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from helpers import mcp_params  # noqa: E402
from mcp import ClientSession, stdio_client  # noqa: E402

from snapstore.integrations import roots  # noqa: E402


def call_create(cwd: Path, *args: str, **env_extra: str) -> Any:
    params = mcp_params(cwd, *args, **env_extra)
    out: list[Any] = []

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            out.append(await session.call_tool("checkpoint_create", {"message": "x"}))

    anyio.run(main)
    return out[0]


def test_no_store_is_created_in_the_home_directory(tmp_path: Path):
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    (home / ".config" / "token").write_text("secret\n")
    result = call_create(home, HOME=str(home))
    assert result.is_error and "home directory" in result.content[0].text and "--root" in result.content[0].text
    assert not (home / ".snapstore").exists()


def test_root_names_the_project_and_create_anywhere_allows_it(tmp_path: Path):
    home, project = tmp_path / "home", tmp_path / "home" / "proj"
    project.mkdir(parents=True)
    (project / "a.py").write_text("x = 1\n")
    result = call_create(home, "--root", str(project), HOME=str(home))
    assert not result.is_error, result.content
    assert (project / ".snapstore").is_dir() and not (home / ".snapstore").exists()
    result = call_create(home, "--create-anywhere", HOME=str(home))
    assert not result.is_error and (home / ".snapstore").is_dir()


def test_the_agents_project_variable_names_the_project(tmp_path: Path):
    home, project = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    project.mkdir()
    result = call_create(home, HOME=str(home), CLAUDE_PROJECT_DIR=str(project))
    assert not result.is_error and (project / ".snapstore").is_dir()


def test_why_not_create(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    assert "root" in (roots.why_not_create("/") or "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert "home" in (roots.why_not_create(str(tmp_path)) or "")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "a").write_text("a")
    assert roots.why_not_create(str(mine)) is None
    if os.geteuid() == 0:
        os.chown(mine / "a", 54321, 54321)  # a file of another user (no account needed)
        assert "another user" in (roots.why_not_create(str(mine)) or "")


def call_with_roots(cwd: Path, roots_given: list[str], *args: str, **env_extra: str) -> Any:
    """checkpoint_create through a client that declares workspace roots (MCP ``roots/list``)."""
    from mcp import types

    params = mcp_params(cwd, *args, **env_extra)
    out: list[Any] = []
    asked: list[int] = []

    async def list_roots(context: Any) -> types.ListRootsResult:
        asked.append(1)
        return types.ListRootsResult(roots=[types.Root(uri=f"file://{r}", name="ws") for r in roots_given])  # type: ignore[arg-type]

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write, list_roots_callback=list_roots) as session:
            await session.initialize()
            out.append(await session.call_tool("checkpoint_create", {"message": "x"}))
            out.append(await session.call_tool("checkpoint_list", {}))

    anyio.run(main)
    return out, len(asked)


def test_the_clients_workspace_root_names_the_project(tmp_path: Path):
    home, project = tmp_path / "home", tmp_path / "my project"
    home.mkdir()
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    (results, asked) = call_with_roots(home, [str(project)], HOME=str(home))
    assert not results[0].is_error, results[0].content
    assert (project / ".snapstore").is_dir() and not (home / ".snapstore").exists()
    assert asked == 1  # once, not at every call
    assert '"x"' in results[1].content[0].text or "x" in str(results[1].structuredContent)


def test_a_named_root_is_not_overridden_by_the_clients(tmp_path: Path):
    home, project, other = tmp_path / "home", tmp_path / "proj", tmp_path / "other"
    for d in (home, project, other):
        d.mkdir()
    (results, asked) = call_with_roots(home, [str(other)], "--root", str(project), HOME=str(home))
    assert not results[0].is_error and asked == 0
    assert (project / ".snapstore").is_dir() and not (other / ".snapstore").exists()
