"""``snapstore mcp`` driven over stdio by the SDK's own client: every tool, errors included."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

from snapstore import Store  # noqa: E402
from snapstore.ops.edit import content_hash  # noqa: E402

READ_ONLY = {"checkpoint_list", "checkpoint_show", "checkpoint_diff", "file_at", "file_history"}
DESTRUCTIVE = {"checkpoint_restore", "checkpoint_revert", "undo", "edit_file"}


class Call:
    def __init__(self, session: ClientSession):
        self.session = session

    async def ok(self, name: str, **args: Any) -> dict[str, Any]:
        result = await self.session.call_tool(name, args)
        assert not result.is_error, result.content
        assert isinstance(result.structured_content, dict), f"{name} returned no structured result"
        return result.structured_content

    async def error(self, name: str, **args: Any) -> str:
        result = await self.session.call_tool(name, args)
        assert result.is_error, result.structured_content
        text = result.content[0].text  # type: ignore[union-attr]  # a TextContent for errors
        assert text.strip() != f"Error executing tool {name}"  # a ToolError: snapstore's message too
        return text


def drive(tree: Path, scenario: Callable[[Call], Awaitable[None]]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "CLAUDE_", "GEMINI_"))}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", "from snapstore.service.client import run; run()", "mcp"],
        cwd=str(tree),
        env=env,
    )

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await scenario(Call(session))

    anyio.run(main)


def test_every_tool_over_stdio(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("def main():\n    return 1\n")
    (tmp_path / "notes.txt").write_text("keep\n")

    async def scenario(call: Call) -> None:
        tools = (await call.session.list_tools()).tools
        names = {t.name for t in tools}
        assert names == READ_ONLY | DESTRUCTIVE | {"checkpoint_create"}
        for t in tools:
            assert t.annotations is not None
            assert t.annotations.read_only_hint is (t.name in READ_ONLY), t.name
            if t.name in DESTRUCTIVE:
                assert t.annotations.destructive_hint is True
            assert t.output_schema is not None, f"{t.name}: results must be structured (TypedDict)"
            assert t.title and t.title[0].isupper() and "_" not in t.title, f"{t.name}: a title for people"

        # A store is made on first use by the tools that write.
        first = await call.ok("checkpoint_create", message="start", task="t1")
        assert first["checkpoint"]["message"] == "start" and first["checkpoint"]["task"] == "t1"
        assert first["checkpoint"]["metadata"]["actor"] == "unknown"  # not guessed: the caller did not say
        assert first["checkpoint"]["index"] == 1  # "#1": a reference the agent can use

        edited = await call.ok("edit_file", path=str(tmp_path / "app.py"), old_text="return 1", new_text="return 2")
        assert edited["written"] and edited["matches"][0]["level"] == "exact"
        assert "+    return 2" in edited["diff"]
        assert edited["hash"] == content_hash((tmp_path / "app.py").read_bytes())
        dry = await call.ok("edit_file", path="app.py", edits=[{"old_text": "return 2", "new_text": "return 3"}], dry_run=True)
        assert not dry["written"] and (tmp_path / "app.py").read_text().endswith("return 2\n")
        await call.ok("checkpoint_create", message="two")

        listed = await call.ok("checkpoint_list", limit=10)
        # Nothing changed since "start": the edit's checkpoint-before is "start" itself; the
        # edit is then recorded as the agent's (MCP alone has no hook to do it).
        assert edited["checkpoint"] == first["checkpoint"]["id"]
        assert [c["message"] for c in listed["checkpoints"]] == ["two", "after edit_file: app.py", "start"]
        assert [c["index"] for c in listed["checkpoints"]] == [3, 2, 1]  # log numbers: "#1" stays "start"
        assert len((await call.ok("checkpoint_list", task="t1"))["checkpoints"]) == 1

        shown = await call.ok("checkpoint_show", ref="latest~1")
        assert shown["checkpoint"]["message"] == "after edit_file: app.py"
        assert shown["checkpoint"]["metadata"]["actor"] == "agent"
        assert shown["checkpoint"]["index"] == 2  # latest~1 is #2, as checkpoint_list numbers it
        assert [(c["path"], c["status"], c["added"], c["removed"]) for c in shown["changes"]] == [("app.py", "M", 1, 1)]
        assert (await call.ok("checkpoint_show", ref="latest"))["changes"] == []  # "two": nothing since

        diff = await call.ok("checkpoint_diff", ref=first["checkpoint"]["id"], against="latest", patch=True)
        assert [c["path"] for c in diff["changes"]] == ["app.py"] and "-    return 1" in (diff["patch"] or "")
        (tmp_path / "notes.txt").write_text("changed\n")
        (tmp_path / "scratch.txt").write_text("a second change the filter must leave out\n")
        every = await call.ok("checkpoint_diff", ref="latest")
        assert [c["path"] for c in every["changes"]] == ["notes.txt", "scratch.txt"]
        now = await call.ok("checkpoint_diff", ref="latest", paths=[str(tmp_path / "notes.txt")])
        assert now["target"] == "working tree" and [c["path"] for c in now["changes"]] == ["notes.txt"]
        (tmp_path / "scratch.txt").unlink()

        old = await call.ok("file_at", ref=first["checkpoint"]["id"], path="app.py")
        assert old["content"] == "def main():\n    return 1\n" and old["encoding"] == "utf-8"
        assert old["hash"] == content_hash(b"def main():\n    return 1\n")
        history = await call.ok("file_history", path=str(tmp_path / "app.py"))
        assert [v["status"] for v in history["versions"]] == ["A", "M"]
        assert [v["checkpoint"]["index"] for v in history["versions"]] == [1, 2]  # "start", then the edit

        plan = await call.ok("checkpoint_restore", ref=first["checkpoint"]["id"])
        assert plan["dry_run"] and plan["undo_ref"] is None
        assert (tmp_path / "app.py").read_text().endswith("return 2\n")  # a dry run by default
        done = await call.ok("checkpoint_restore", ref=first["checkpoint"]["id"], dry_run=False)
        assert not done["dry_run"] and done["undo_ref"]
        assert (tmp_path / "app.py").read_text().endswith("return 1\n")
        assert (tmp_path / "notes.txt").read_text() == "keep\n"
        undone = await call.ok("undo")
        assert undone["kind"] == "undo"
        assert (tmp_path / "app.py").read_text().endswith("return 2\n")
        assert (tmp_path / "notes.txt").read_text() == "changed\n"

        # Revert what the edit's own checkpoint changed (app.py: return 1 -> 2), keeping the later
        # notes.txt edit.
        two = listed["checkpoints"][1]["id"]
        dry = await call.ok("checkpoint_revert", ref=two)
        assert dry["dry_run"] and dry["reverted"] == ["app.py"] and dry["undo_ref"] is None
        assert "-    return 2\n+    return 1" in dry["diff"]
        assert (tmp_path / "app.py").read_text().endswith("return 2\n")  # a dry run by default
        real = await call.ok("checkpoint_revert", ref=two, dry_run=False)
        assert not real["dry_run"] and real["undo_ref"] and real["operation"]
        assert "-    return 2\n+    return 1" in real["diff"]  # what the revert did, as the dry run said
        assert (tmp_path / "app.py").read_text().endswith("return 1\n")
        assert (tmp_path / "notes.txt").read_text() == "changed\n"
        await call.ok("undo")
        assert (tmp_path / "app.py").read_text().endswith("return 2\n")
        (tmp_path / "app.py").write_text("def main():\n    return 5\n")  # the same line, since
        refused = await call.error("checkpoint_revert", ref=two, dry_run=False)
        assert "app.py: line 2" in refused and "nothing was changed" in refused
        assert (tmp_path / "app.py").read_text().endswith("return 5\n")

    drive(tmp_path, scenario)
    with Store.open(tmp_path) as store:
        assert [c.task for c in store.checkpoints() if c.message == "start"] == ["t1"]


def test_errors_are_tool_errors_with_the_cli_message(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\nalpha\n")
    (tmp_path / "bin.dat").write_bytes(b"\xff\xfe\x00")

    async def scenario(call: Call) -> None:
        assert "no store in" in await call.error("checkpoint_list")  # only create and edit make one
        assert "no store in" in await call.error("undo")
        await call.ok("checkpoint_create", message="one")
        assert "nothing to undo" in await call.error("undo")
        assert "unknown checkpoint 'nope'" in await call.error("checkpoint_show", ref="nope")
        assert "unknown checkpoint" in await call.error("checkpoint_diff", ref="nope")
        assert "unknown checkpoint" in await call.error("checkpoint_restore", ref="nope", dry_run=False)
        assert "missing.txt is not in checkpoint" in await call.error("file_at", ref="latest", path="missing.txt")
        assert "outside the tree" in await call.error("file_at", ref="latest", path="/etc/passwd")
        binary = await call.ok("file_at", ref="latest", path="bin.dat")
        assert binary["encoding"] == "base64"
        assert "matches 2 places" in await call.error("edit_file", path="a.txt", old_text="alpha", new_text="beta")
        assert "closest" in await call.error("edit_file", path="a.txt", old_text="omega zeta", new_text="x")
        assert "changed since it was read" in await call.error("edit_file", path="a.txt", old_text="alpha\nalpha", new_text="b", expected="0" * 64)
        assert "refused" in await call.error("edit_file", path="../x.txt", old_text="a", new_text="b")
        assert "edits must be a non-empty list" in await call.error("edit_file", path="a.txt")
        assert (tmp_path / "a.txt").read_text() == "alpha\nalpha\n"

    drive(tmp_path, scenario)
