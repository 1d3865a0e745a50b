"""Commands that record and read checkpoints: init, snapshot, list, show, log, cat."""

from __future__ import annotations

import sys
from typing import Any

import click

from snapstore.cli import lean
from snapstore.cli.app import (
    Ctx,
    command,
    echo_json,
    json_option,
    quiet_option,
    read_json_list,
    warn,
)


@command(example="snapstore init                 # store in ./.snapstore\nsnapstore init --store ~/snaps/proj", own_store_option=True)
@click.option("--store", "init_store", metavar="DIR", help="Keep the store in DIR, outside the tree.")
@click.option("--compression", type=click.IntRange(1, 22), default=3, show_default=True, help="zstd level for new chunks.")
@quiet_option
@click.pass_obj
def init(obj: Ctx, init_store: str | None, compression: int, quiet: bool) -> None:
    """Create a store for the tree in the current directory (in ./.snapstore by default)."""
    from snapstore.store import Store

    with Store.init(obj.directory, store=init_store or obj.store_dir, compression_level=compression) as store:
        if not quiet:
            click.echo(f"initialised an empty store in {store.store_dir} for {store.root}")


def _read_conversation(source: str | None) -> list[Any] | None:
    if source is None:
        return None
    return read_json_list(source, "the conversation", "messages")


@command(example='snapstore snapshot -m "before refactor" --task fix-login --meta tool=bash')
@click.option("-m", "--message", default="", help="What this checkpoint is.")
@click.option("--tag", "tags", multiple=True, metavar="NAME", help="Name it (repeatable); a tag moves to the newest checkpoint that takes it.")
@click.option("--task", metavar="NAME", help="The agent task or session it belongs to.")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE", help="Free metadata, e.g. the tool call (repeatable).")
@click.option("--conversation", "conversation_src", metavar="FILE|-", help="A JSON list of messages to keep with it.")
@click.option("--skip-unchanged", is_flag=True, help="Record nothing (and print the parent) when nothing changed.")
@quiet_option
@json_option
@click.pass_obj
def snapshot(
    obj: Ctx,
    message: str,
    tags: tuple[str, ...],
    task: str | None,
    meta: tuple[str, ...],
    conversation_src: str | None,
    skip_unchanged: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Record the tree as a new checkpoint and print its id and what changed."""
    # The body is shared with the click-free path the console script takes (snapstore.cli.lean).
    warnings, text = lean.snapshot_output(
        obj.open,
        message=message,
        tags=tags,
        task=task,
        metadata=lean.parse_meta(meta),
        messages=_read_conversation(conversation_src),
        skip_unchanged=skip_unchanged,
        quiet=quiet,
        as_json=as_json,
        may_start_service=not obj.in_service,  # (in the service: it is running)
    )
    for w in warnings:
        warn(w)
    if text is not None:
        click.echo(text)


@command(name="list", example="snapstore list -n 10\nsnapstore list --task fix-login --json")
@click.option("--task", metavar="NAME", help="Only the checkpoints of this task.")
@click.option("--all", "include_all", is_flag=True, help="Include the safety checkpoints that restores record.")
@click.option("-n", "--limit", type=click.IntRange(min=1), help="Show at most N rows.")
@json_option
@click.option("--remote", metavar="NAME", help="Read remote NAME (read through a local cache: only what the command needs, by range) instead of this store.")
@click.option("--ref", metavar="REF", help="With --remote: only the checkpoints of this remote ref's history.")
@click.pass_obj
def list_(obj: Ctx, task: str | None, include_all: bool, limit: int | None, as_json: bool, remote: str | None,
          ref: str | None) -> None:
    """List checkpoints, newest first; #N in the first column is a reference that never moves.

    The +/~/- counts are paths of every kind (files, directories, symlinks) added, changed
    and removed against the parent checkpoint.  With --remote, every checkpoint of every
    ref's published history (--ref: one ref's).
    """
    from snapstore.render import checkpoint_rows, table

    if ref is not None and remote is None:
        from snapstore.errors import UsageError

        raise UsageError("--ref names a remote ref: give --remote NAME too")
    with obj.open(reading=True, remote=remote) as store:
        if ref is not None and remote is not None:
            numbered = store.numbered_in_ref(remote, ref, task=task, include_safety=include_all, limit=limit)
        else:
            numbered = store.numbered_checkpoints(task=task, include_safety=include_all, limit=limit)
    if as_json:
        echo_json({"checkpoints": [{**c.to_json(), "index": n} for n, c in numbered]})
        return
    if not numbered:
        click.echo("no checkpoints yet")
        return
    click.echo(table(checkpoint_rows(numbered)))


@command(example="snapstore show latest~1\nsnapstore show :/refactor --conversation")
@click.argument("ref", default="latest")
@click.option("--conversation", "show_conversation", is_flag=True, help="Print the conversation stored with it.")
@click.option("--task", metavar="NAME", help="Resolve REF among this task's checkpoints.")
@click.option("-M", "--find-renames", "renames", is_flag=True, help="Show a removed and an added file as a rename (R).")
@json_option
@click.option("--remote", metavar="NAME", help="Read remote NAME (read through a local cache: only what the command needs, by range) instead of this store.")
@click.pass_obj
def show(
    obj: Ctx, ref: str, show_conversation: bool, task: str | None, renames: bool, as_json: bool, remote: str | None
) -> None:
    """Show a checkpoint: its record, the files it changed against its parent (lines +/-),
    and its conversation (message count, last user and assistant messages)."""
    from snapstore.render import dump_json, summary_lines

    with obj.open(reading=True, remote=remote) as store:
        if show_conversation:
            rewind = store.rewind(ref, files=False, conversation=True, task=task)
            click.echo(dump_json(rewind.conversation))
            return
        info = store.summary(ref, task=task, renames=renames)
    if as_json:
        echo_json(info)
        return
    click.echo("\n".join(summary_lines(info)))


@command(name="log", example="snapstore log src/app.py\nsnapstore restore <id> -- src/app.py   # bring a version back")
@click.argument("path")
@click.option("--task", metavar="NAME", help="Only this task's checkpoints.")
@click.option("-n", "--limit", type=click.IntRange(min=1), metavar="N", help="Only the newest N versions (reads history only that far back).")
@json_option
@click.option("--remote", metavar="NAME", help="Read remote NAME (read through a local cache: only what the command needs, by range) instead of this store.")
@click.pass_obj
def log_(obj: Ctx, path: str, task: str | None, limit: int | None, as_json: bool, remote: str | None) -> None:
    """List the checkpoints in which PATH changed, oldest version first, with lines +/-."""
    from snapstore.render import history_rows, table

    with obj.open(reading=True, remote=remote) as store:
        versions = store.history(path, task=task, limit=limit)
    if as_json:
        echo_json({"path": path, "versions": [v.to_json() for v in versions]})
        return
    if not versions:
        click.echo(f"{path} did not change in any checkpoint")
        return
    click.echo(table(history_rows(versions)))


@command(example="snapstore cat latest~1 src/app.py > /tmp/app.py\nsnapstore cat latest src/app.py --json   # size and content hash")
@click.argument("ref")
@click.argument("path")
@click.option("--json", "as_json", is_flag=True, help="Print what the checkpoint records (kind, mode, size, content hash) instead of the bytes.")
@click.option("--remote", metavar="NAME", help="Read remote NAME (read through a local cache: only what the command needs, by range) instead of this store.")
@click.pass_obj
def cat(obj: Ctx, ref: str, path: str, as_json: bool, remote: str | None) -> None:
    """Write the exact bytes of PATH (relative to the tree root) in checkpoint REF to stdout."""
    if as_json:
        with obj.open(reading=True, remote=remote) as store:
            echo_json(store.file_info(ref, path))
        return
    out = sys.stdout.buffer
    with obj.open(reading=True, remote=remote) as store:
        for data in store.iter_bytes(ref, path):
            out.write(data)
    out.flush()
