"""The official MCP Inspector CLI against `snapstore mcp` (issue 23 req 6): its strict schema
check (tool-schema portability problems are an exit 6) passes, and it can call a tool.  The
Inspector is installed under .venv by `make inspector` when npm is there; else this skips."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, subprocess_env

pytest.importorskip("mcp")

INSPECTOR = REPO / ".venv" / "npm" / "node_modules" / ".bin" / "mcp-inspector"
pytestmark = pytest.mark.skipif(
    not INSPECTOR.exists(), reason=f"the MCP Inspector CLI is not installed ({INSPECTOR}; `make inspector` needs npm)"
)


def inspect(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(INSPECTOR), "--cli", sys.executable, "-m", "snapstore", "mcp", "--root", str(tree), *args],
        cwd=tree, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )


def test_the_strict_schema_check_passes_and_every_tool_is_listed(tmp_path: Path):
    done = inspect(tmp_path, "--strict", "--method", "tools/list")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    names = {tool["name"] for tool in json.loads(done.stdout)["tools"]}
    assert names == {
        "checkpoint_create", "edit_file", "checkpoint_list", "checkpoint_show", "checkpoint_diff", "file_at",
        "file_history", "checkpoint_restore", "checkpoint_revert", "undo",
    }
    for tool in json.loads(done.stdout)["tools"]:
        for name, schema in tool["inputSchema"].get("properties", {}).items():
            assert schema.get("description"), f"{tool['name']}.{name} has no description"


def test_the_inspector_calls_a_tool(tmp_path: Path):
    (tmp_path / "a.py").write_text("x = 1\n")
    done = inspect(tmp_path, "--method", "tools/call", "--tool-name", "checkpoint_create", "--tool-arg", "message=from the inspector")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result.get("isError") is not True and "from the inspector" in json.dumps(result)
    assert (tmp_path / ".snapstore").is_dir()
