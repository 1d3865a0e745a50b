"""The MCP tool surface (issue 23 req 6): every parameter described, enums for the closed sets,
Markdown (not reStructuredText) in the descriptions, as the SDK's own client lists them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from helpers import mcp_params  # noqa: E402
from mcp import ClientSession, stdio_client  # noqa: E402


def list_tools(tree: Path) -> list[Any]:
    params = mcp_params(tree)
    out: list[Any] = []

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            out.extend((await s.list_tools()).tools)

    anyio.run(main)
    return out


def test_every_parameter_is_described_and_closed_sets_are_enums(tmp_path: Path):
    tools = {t.name: t for t in list_tools(tmp_path)}
    assert len(tools) == 10
    for tool in tools.values():
        assert "``" not in (tool.description or ""), tool.name  # Markdown, not reStructuredText
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"

    def enum_of(tool: str, param: str) -> set[str]:
        schema = tools[tool].input_schema["properties"][param]
        options = schema.get("anyOf", [schema])
        return {v for o in options for v in o.get("enum", [])}

    assert enum_of("checkpoint_revert", "conflicts") == {"refuse", "markers", "ours", "theirs"}
    assert enum_of("checkpoint_revert", "actor") == {"agent", "user", "unknown"}
    assert enum_of("checkpoint_create", "actor") == {"agent", "user"}
    assert ":/text" in tools["checkpoint_show"].input_schema["properties"]["ref"]["description"]
