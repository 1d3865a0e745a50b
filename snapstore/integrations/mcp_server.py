"""``snapstore mcp``: the store as MCP tools, over stdio, on the ``mcp`` SDK.

The server keeps the store of its tree open for its whole life (a resident store in its own
process).  Tools that only read are annotated read-only; ``checkpoint_restore``,
``checkpoint_revert``, ``undo`` and ``edit_file`` destructive.  ``checkpoint_restore`` is a dry run unless asked otherwise, and a real
one returns the reference that undoes it.  Every snapstore error reaches the model as a
``ToolError`` carrying the CLI's one-line message.  There is deliberately no tool that rewinds
the conversation: that stays with people (CLI and library).

(No ``from __future__ import annotations`` here: the SDK reads the tools' annotations at run
time to build their schemas, and the TypedDicts must be real classes for structured results.)
"""

import base64
import contextlib
import os
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from snapstore.errors import SnapstoreError, StoreExistsError, StoreNotFoundError, UsageError
from snapstore.integrations.mcp_types import (
    _REF_TEXT,
    Actor,
    ChangeInfo,
    CheckpointInfo,
    Conflicts,
    CreateResult,
    DiffResult,
    DryRun,
    EditItem,
    EditMatch,
    EditResult,
    FileContent,
    FileVersion,
    HistoryResult,
    ListResult,
    Path_,
    Paths,
    Ref,
    RestoreResult,
    RevertConflict,
    RevertResult,
    ShowResult,
    Task,
    UnknownChangeItem,
)
from snapstore.ops.edit import content_hash
from snapstore.records.checkpoint import Checkpoint
from snapstore.store import Store

#: The largest file ``file_at`` returns (an agent reads code, not images of disks).
MAX_FILE_AT_BYTES = 16 << 20
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


def _info(cp: Checkpoint, index: int | None = None) -> CheckpointInfo:
    return CheckpointInfo(
        id=cp.id,
        short_id=cp.short_id,
        index=index,
        time=cp.iso_time(),
        message=cp.message,
        task=cp.task,
        kind=cp.kind,
        tags=list(cp.tags),
        metadata=dict(cp.metadata),
        has_conversation=cp.conversation is not None,
    )


def _indexes(store: Store, ids: set[str]) -> dict[str, int]:
    """The ``#N`` of each checkpoint of ``ids``: its log number, as ``checkpoint_list`` shows it
    (:func:`snapstore.records.refs.numbered`); the log is read newest first and no further than
    the oldest of ``ids``."""
    from snapstore.records.history import History

    found: dict[str, int] = {}
    with store.backend.read() as view:
        for cp in History(view).newest():
            if cp.id in ids:
                found[cp.id] = cp.seq
                if len(found) == len(ids):
                    break
    return found


def _revert_diff(store: Store, report: Any, doc: dict[str, Any]) -> str:
    """The unified diff of a revert: planned (a dry run), else what it did to the files (from
    the checkpoint taken before it to the one it recorded)."""
    if report.dry_run or report.target is None or report.safety is None:
        return "".join(doc["diffs"][p] for p in sorted(doc["diffs"]))
    from snapstore.ops.textdiff import unified

    return b"".join(unified(c) for c in store.diff(report.safety.id, report.target.id)).decode("utf-8", "replace")


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    try:
        yield
    except ToolError:
        raise
    except SnapstoreError as exc:
        raise ToolError(" ".join(exc.message.split())) from exc
    except Exception as exc:  # a bug: still one line for the model, not "Error executing tool"
        raise ToolError(f"internal error: {type(exc).__name__}: {exc}") from exc


class Tools:
    """The store behind the tools, opened on first use (created by the tools that write)."""

    def __init__(self, root: str, anywhere: bool = False, named: bool = True):
        self.root = os.path.abspath(root)
        #: Whether a store may be created at / , $HOME or among other users' files.
        self.anywhere = anywhere
        #: Whether ``root`` was named (--root, -C, a project variable): else the client's
        #: workspace roots are asked for once, before the first tool opens a store.
        self.ask_client = not named
        self._store: Store | None = None

    @contextlib.contextmanager
    def call(self, ctx: Context) -> Iterator[None]:
        """One tool call: the client's root adopted first (once), errors as one-line tool errors."""
        if self.ask_client and self._store is None:
            from snapstore.integrations.roots import from_client

            self.ask_client = False
            self.root = from_client(ctx) or self.root
        with _tool_errors():
            yield

    def store(self, create: bool = False) -> Store:
        if self._store is None:
            try:
                self._store = Store.find(self.root)
            except StoreNotFoundError:
                if not create:
                    raise
                from snapstore.integrations.roots import why_not_create

                why = None if self.anywhere else why_not_create(self.root)
                if why is not None:
                    raise UsageError(
                        f"not creating a store in {self.root}: {why}; start the server in the project "
                        "('snapstore mcp --root DIR', or -C DIR), run 'snapstore init' there, or pass "
                        "--create-anywhere"
                    ) from None
                try:
                    self._store = Store.init(self.root)
                except StoreExistsError:
                    self._store = Store.find(self.root)
        return self._store

    def rel(self, path: str) -> str:
        """A tree-relative path from what an agent passes (often absolute)."""
        if os.path.isabs(path):
            rel = os.path.relpath(path, self.store().root)
            if rel.startswith(os.pardir):
                raise ToolError(f"{path} is outside the tree {self.store().root}")
            return rel
        return path

    def changes(self, found: list[Any]) -> list[ChangeInfo]:
        counts = self.store().line_counts(found)
        return [
            ChangeInfo(path=c.to_json()["path"], status=c.status, added=n.added, removed=n.removed, binary=n.binary)
            for c, n in zip(found, counts)
        ]

    def _restore_changes(self, report: Any) -> list[ChangeInfo]:
        """The restore's changes with their real line counts: the tree's side is on disk before a
        dry run and in the safety checkpoint after a real one; the target's is in the store."""
        from snapstore.ops.diff import with_loaders

        ctx = self.store().context
        found = with_loaders(report.changes, ctx.read_disk if report.dry_run else ctx.read_stored, ctx.read_stored)
        try:
            return self.changes(found)
        except (OSError, SnapstoreError):  # a file gone meanwhile: the paths still say what changed
            return [ChangeInfo(path=c.to_json()["path"], status=c.status, added=0, removed=0, binary=False) for c in found]

    def restore_result(self, report: Any) -> RestoreResult:
        return RestoreResult(
            kind=report.kind,
            dry_run=report.dry_run,
            target=report.target.id,
            changes=self._restore_changes(report),
            undo_ref=report.safety.id if report.safety is not None else None,
            operation=report.op_seq,
            warnings=list(report.warnings),
        )


def build_server(root: str, anywhere: bool = False, named: bool = True) -> MCPServer:
    """The MCP server for the tree at `root` (its store is opened on first use; created by a
    write tool only where :mod:`snapstore.integrations.roots` allows, unless `anywhere`)."""
    from snapstore import __version__

    tools = Tools(root, anywhere, named)
    server = MCPServer(
        "snapstore",
        version=__version__,
        instructions=(
            "Checkpoints of this project's files. checkpoint_create before a risky change; "
            "checkpoint_list / checkpoint_show / checkpoint_diff / file_at / file_history to look "
            "back; checkpoint_restore (a dry run unless dry_run=false) and undo to go back; "
            "checkpoint_revert (also a dry run by default) to take back one checkpoint's or one "
            "actor's changes while keeping every later edit; "
            "edit_file for safe text replacement. References: latest, latest~N, #N, a tag, an "
            "id prefix."
        ),
    )
    _add_record_tools(server, tools)
    _add_read_tools(server, tools)
    _add_going_back_tools(server, tools)
    return server


def _add_record_tools(server: MCPServer, tools: Tools) -> None:
    """Register the tools that record: a checkpoint, a safe edit."""

    @server.tool(title="Create a checkpoint", annotations=ADDITIVE)
    def checkpoint_create(
        ctx: Context,
        message: Annotated[str, Field(description="A label for the checkpoint (what is about to happen, or just happened).")],
        task: Task = None,
        actor: Actor = None,
    ) -> CreateResult:
        """Record the project's files now as a checkpoint labelled `message`.  What changed
        since the previous checkpoint is attributed to `actor` when the caller knows who
        made it ("agent" or "user"), else recorded as "unknown" (never guessed)."""
        with tools.call(ctx):
            meta = {"actor": actor or "unknown", "tool_name": "checkpoint_create"}
            store = tools.store(create=True)
            cp = store.snapshot(message, task=task, metadata=meta)
            newest = store.numbered_checkpoints(limit=1)  # its #N, as checkpoint_list shows it
            index = newest[0][0] if newest and newest[0][1].id == cp.id else None
            return CreateResult(checkpoint=_info(cp, index), reused=cp.reused, warnings=list(cp.warnings))

    @server.tool(title="Edit a file safely", annotations=DESTRUCTIVE)
    def edit_file(
        ctx: Context,
        path: Path_,
        edits: Annotated[list[EditItem] | None, Field(description="Replacements applied in order (instead of old_text/new_text).")] = None,
        old_text: Annotated[str | None, Field(description="The text to replace (found exactly, then ignoring whitespace, then by similarity).")] = None,
        new_text: Annotated[str | None, Field(description="What replaces it.")] = None,
        expected: Annotated[str | None, Field(description="The hash file_at returned: refused if the file changed since.")] = None,
        replace_all: Annotated[bool, Field(description="Replace every match (else two matches are an error).")] = False,
        dry_run: Annotated[bool, Field(description="Only return the diff; write nothing.")] = False,
        task: Task = None,
    ) -> EditResult:
        """Replace `old_text` by `new_text` in `path` (or apply `edits` in order):
        exact match first, then ignoring whitespace, then by similarity; a checkpoint is taken
        before writing (what changed before it: actor "unknown") and one after it (this edit:
        actor "agent"), both in `task`.  `expected`: the hash from a previous read (refused
        if it changed)."""
        with tools.call(ctx):
            items = [{"old_text": e["old_text"], "new_text": e["new_text"]} for e in edits or []]
            if old_text is not None or new_text is not None:
                items.append({"old_text": old_text or "", "new_text": new_text or ""})
            store = tools.store(create=True)
            report = store.edit(
                path, items, expected=expected, dry_run=dry_run, replace_all=replace_all, task=task,
                metadata={"tool_name": "edit_file", "actor": "unknown"},
            )
            if report.written:  # the edit itself, recorded as the agent's
                meta = {"tool_name": "edit_file", "path": report.path, "actor": "agent"}
                store.snapshot(f"after edit_file: {report.path}", task=task, metadata=meta, skip_unchanged=True)
            return EditResult(
                path=report.path,
                dry_run=report.dry_run,
                written=report.written,
                matches=[
                    EditMatch(edit=m.edit, level=m.level, start_line=m.start_line, end_line=m.end_line, similarity=round(m.similarity, 4))
                    for m in report.matches
                ],
                diff=report.diff,
                hash=report.new_hash,
                previous_hash=report.old_hash,
                checkpoint=report.checkpoint,
            )


def _add_read_tools(server: MCPServer, tools: Tools) -> None:
    """Register the read-only tools: list, show, diff, file contents and history."""

    @server.tool(title="List checkpoints", annotations=READ_ONLY)
    def checkpoint_list(
        ctx: Context,
        limit: Annotated[int, Field(description="At most this many checkpoints, newest first.")] = 20, task: Task = None
    ) -> ListResult:
        """Checkpoints, newest first (at most `limit`); `#N` (`index`) is a reference."""
        with tools.call(ctx):
            rows = tools.store().numbered_checkpoints(task=task)[: max(1, limit)]
            return ListResult(checkpoints=[_info(cp, n) for n, cp in rows])

    @server.tool(title="Show a checkpoint", annotations=READ_ONLY)
    def checkpoint_show(ctx: Context, ref: Ref) -> ShowResult:
        """One checkpoint: its record and the files it changed against its parent."""
        with tools.call(ctx):
            store = tools.store()
            cp = store.resolve(ref)
            count = None
            if cp.conversation is not None:
                count = len(store.conversation(cp.id) or [])
            return ShowResult(checkpoint=_info(cp, _indexes(store, {cp.id}).get(cp.id)), changes=tools.changes(store.changes(cp.id)), conversation_messages=count)

    @server.tool(title="Diff checkpoints", annotations=READ_ONLY)
    def checkpoint_diff(
        ctx: Context,
        ref: Ref,
        against: Annotated[str | None, Field(description="The other side: a checkpoint as ref (unset: the files as they are now).")] = None,
        paths: Paths = None,
        patch: Annotated[bool, Field(description="Also return the unified diff.")] = False,
    ) -> DiffResult:
        """What changed from checkpoint `ref` to `against` (default: the files now);
        with `patch`, the unified diff too."""
        with tools.call(ctx):
            from snapstore.ops.textdiff import unified

            store = tools.store()
            found = store.diff(ref, against, [tools.rel(p) for p in paths] if paths else None)
            text = b"".join(unified(c) for c in found).decode("utf-8", "replace") if patch else None
            target = store.resolve(against).id if against is not None else "working tree"
            return DiffResult(source=store.resolve(ref).id, target=target, changes=tools.changes(found), patch=text)

    @server.tool(title="Read a file at a checkpoint", annotations=READ_ONLY)
    def file_at(ctx: Context, ref: Ref, path: Path_) -> FileContent:
        """The content of `path` in checkpoint `ref` (text, or base64 when not UTF-8),
        with its `hash` (pass it as `expected` to edit_file)."""
        with tools.call(ctx):
            store = tools.store()
            cp = store.resolve(ref)
            size = store.file_info(cp.id, tools.rel(path)).get("size", 0)
            if size > MAX_FILE_AT_BYTES:  # (base64 in JSON in memory: several times the size)
                raise UsageError(
                    f"{path} is {size >> 20} MiB in checkpoint {cp.short_id}: larger than the "
                    f"{MAX_FILE_AT_BYTES >> 20} MiB file_at returns (use 'snapstore cat' to copy it out)"
                )
            data = store.read_bytes(cp.id, tools.rel(path))
            try:
                content, encoding = data.decode("utf-8"), "utf-8"
            except UnicodeDecodeError:
                content, encoding = base64.b64encode(data).decode("ascii"), "base64"
            return FileContent(path=tools.rel(path), checkpoint=cp.id, encoding=encoding, content=content, size=len(data), hash=content_hash(data))

    @server.tool(title="History of a file", annotations=READ_ONLY)
    def file_history(ctx: Context, path: Path_) -> HistoryResult:
        """The checkpoints in which `path` changed, oldest first, with lines added/removed."""
        with tools.call(ctx):
            store = tools.store()
            versions = store.history(tools.rel(path))
            numbers = _indexes(store, {v.checkpoint.id for v in versions})
            rows = []
            for v in versions:
                doc = v.to_json()
                rows.append(FileVersion(checkpoint=_info(v.checkpoint, numbers.get(v.checkpoint.id)), status=doc["status"], size=doc["size"], added=doc["added"] or 0, removed=doc["removed"] or 0))
            return HistoryResult(path=tools.rel(path), versions=rows)


def _add_going_back_tools(server: MCPServer, tools: Tools) -> None:
    """Register the tools that go back: restore, revert, undo (dry runs unless told otherwise)."""

    @server.tool(title="Restore a checkpoint", annotations=DESTRUCTIVE)
    def checkpoint_restore(ctx: Context, ref: Ref, paths: Paths = None, dry_run: DryRun = True) -> RestoreResult:
        """Make the files (or just `paths`) equal to checkpoint `ref`.  A dry run unless
        `dry_run` is false; the real one first records the files as they are and returns
        `undo_ref` (`undo` puts them back)."""
        with tools.call(ctx):
            rel = [tools.rel(p) for p in paths] if paths else None
            return tools.restore_result(tools.store().restore(ref, rel, dry_run=dry_run))

    @server.tool(title="Revert changes", annotations=DESTRUCTIVE)
    def checkpoint_revert(
        ctx: Context,
        ref: Annotated[str | None, Field(description=_REF_TEXT + " Or a range A..B (what changed from A to B).")] = None,
        task: Task = None,
        actor: Annotated[
            Literal["agent", "user", "unknown"] | None, Field(description="With task: only the changes this actor made.")
        ] = None,
        paths: Paths = None,
        conflicts: Conflicts = "refuse",
        dry_run: DryRun = True,
        include_unknown: Annotated[
            bool, Field(description='With actor: also take back the changes labelled "unknown" (listed in `unknown` either way).')
        ] = False,
    ) -> RevertResult:
        """Take back what checkpoint `ref` changed (or a range `"A..B"`, or every change of
        `task`, only the `actor`'s: "agent" or "user"), keeping every change made since.
        A dry run unless `dry_run` is false (`diff` shows the result).  Conflicting changes
        fail with the list of conflicts unless `conflicts` is "markers", "ours" or "theirs";
        `undo` takes a real revert back.  With `actor`, changes labelled "unknown" (no event
        says who made them) are left alone and listed in `unknown` unless `include_unknown`."""
        with tools.call(ctx):
            from snapstore.ops.revert import split_range

            rel = [tools.rel(p) for p in paths] if paths else None
            ranged = ref is not None and split_range(ref) is not None
            report = tools.store().revert(
                None if ranged else ref, range=ref if ranged else None, task=task, actor=actor,
                paths=rel, conflicts=conflicts, dry_run=dry_run, include_unknown=include_unknown,
            )
            doc = report.to_json()
            return RevertResult(
                dry_run=report.dry_run,
                what=report.what,
                reverted=doc["reverted"],
                merged=doc["merged"],
                conflicted=[RevertConflict(path=c["path"], lines=c["lines"], note=c["note"]) for c in doc["conflicted"]],
                untouched=doc["untouched"],
                diff=_revert_diff(tools.store(), report, doc),
                undo_ref=report.safety.id if report.safety is not None and report.op_seq is not None else None,
                operation=report.op_seq,
                warnings=list(report.warnings),
                unknown=[
                    UnknownChangeItem(checkpoint=u["checkpoint"], message=u["message"], paths=u["paths"], why=u["why"], taken=u["taken"])
                    for u in doc["unknown"]
                ],
            )

    @server.tool(title="Undo the last restore", annotations=DESTRUCTIVE)
    def undo(ctx: Context) -> RestoreResult:
        """Put the files back as they were before the last restore or undo."""
        with tools.call(ctx):
            return tools.restore_result(tools.store().undo())
