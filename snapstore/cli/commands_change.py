"""Commands that compare and go back: diff, restore, undo, oplog (revert: commands_revert; recover: commands_upkeep)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from snapstore.cli import lean
from snapstore.cli.app import Ctx, Exit, command, echo_json, json_option, quiet_option, warn
from snapstore.errors import EXIT_DIFFERENT, UsageError
from snapstore.units import printable_bytes

if TYPE_CHECKING:
    from snapstore.ops.diff import Change
    from snapstore.ops.restore import RestoreReport
    from snapstore.ops.textdiff import LineCounts


@command(
    example="snapstore diff --stat                 # latest vs the tree\n"
    "snapstore diff latest~3 latest -p -- src/",
    paths_after_dashdash=True,
)
@click.argument("refs", nargs=-1)
@click.option("--stat", "show_stat", is_flag=True, help="Lines added and removed per file.")
@click.option("-M", "--find-renames", "renames", is_flag=True, help="Pair a removed and an added file as a rename (R): same content or >= 50% of lines.")
@click.option("-p", "--patch", is_flag=True, help="A unified diff (binary files are named, not shown).")
@json_option
@click.option("-q", "--quiet", is_flag=True, help="Print nothing; the exit code says (0 same, 1 different).")
@click.option("--remote", metavar="NAME", help="Compare two checkpoints of remote NAME (read through a local cache: only what the command needs, by range).")
@click.pass_context
def diff(
    ctx: click.Context, refs: tuple[str, ...], show_stat: bool, renames: bool, patch: bool, as_json: bool, quiet: bool,
    remote: str | None,
) -> None:
    """Compare checkpoints: none = latest vs the tree, one = REF vs the tree, two = A vs B.

    Paths after `--` limit the comparison (a file, or a directory and all below it).
    Exit code 0 when there is no difference, 1 when there is (like diff(1)).
    """
    obj: Ctx = ctx.obj
    paths: list[str] = ctx.meta.get("paths", [])
    if len(refs) > 2:
        raise UsageError("diff takes at most two checkpoints (put paths after --)")
    if remote is not None and len(refs) != 2:
        raise UsageError("diff --remote compares two checkpoints of the remote: name both")
    a = refs[0] if refs else "latest"
    b = refs[1] if len(refs) == 2 else None
    with obj.open(reading=True, remote=remote) as store:
        changes = store.diff(a, b, paths=paths or None, renames=renames)
        if not quiet:
            _print_changes(store.line_counts(changes) if show_stat else None, changes, patch, as_json)
    if changes:
        raise Exit(EXIT_DIFFERENT)


def _print_changes(counts: list[LineCounts] | None, changes: list[Change], patch: bool, as_json: bool) -> None:
    from snapstore.ops import textdiff
    from snapstore.render import name_status_lines, stat_lines

    if as_json:
        docs: list[dict[str, Any]] = []
        for i, c in enumerate(changes):
            doc = c.to_json()
            if counts is not None:
                doc.update(counts[i].to_json())
            docs.append(doc)
        echo_json({"changes": docs})
        return
    if counts is not None:
        click.echo("\n".join(stat_lines(changes, counts)))
    elif not patch:
        for line in name_status_lines(changes):
            click.echo(line)
    if patch:
        out = sys.stdout.buffer
        shown = printable_bytes if sys.stdout.isatty() else bytes  # (piped: the exact patch)
        for c in changes:
            out.write(shown(textdiff.unified(c)))
        out.flush()


@command(
    example="snapstore restore latest~1                 # the whole tree\n"
    "snapstore restore :/before -- src/app.py     # one file\n"
    "snapstore restore latest --conversation-only -o convo.json",
)
@click.argument("ref")
@click.argument("paths", nargs=-1)
@click.option("--files-only", "mode", flag_value="files", default=True, help="Restore the files (the default).")
@click.option("--conversation-only", "mode", flag_value="conversation", help="Output the conversation; leave the tree untouched.")
@click.option("--both", "mode", flag_value="both", help="Restore the files and output the conversation.")
@click.option("-o", "--output", metavar="FILE|-", help="Write the conversation as JSON to FILE (stdout with -, the default).")
@click.option("--task", metavar="NAME", help="Resolve REF among this task's checkpoints.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would change; change nothing.")
@json_option
@quiet_option
@click.pass_obj
def restore(
    obj: Ctx,
    ref: str,
    paths: tuple[str, ...],
    mode: str,
    output: str | None,
    task: str | None,
    dry_run: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Make the tree equal to checkpoint REF (or only PATHS, given after `--`).

    The tree is first recorded as a safety checkpoint, so `snapstore undo` puts it back.
    Ignored files, .git and the store are never touched; no prompt, ever. With
    --conversation-only or --both, the checkpoint's conversation is written as JSON
    (to -o FILE, or stdout; the report then goes to stderr).
    """
    from snapstore.render import dump_json

    if paths and mode == "conversation":
        raise UsageError("paths go with restoring files, not with --conversation-only")
    with obj.open() as store:
        result = store.rewind(
            ref,
            files=mode in ("files", "both"),
            conversation=mode in ("conversation", "both"),
            paths=list(paths) or None,
            dry_run=dry_run,
            task=task,
        )
        if not obj.in_service and not dry_run:
            lean.start_service(store, quiet=quiet)  # (service.autostart: the next commands use it)
    to_stderr = result.conversation is not None and output in (None, "-")
    if result.conversation is not None:
        text = dump_json(result.conversation) + "\n"
        if output in (None, "-"):
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            from snapstore.tree.atomic import write_file_atomic

            write_file_atomic(output, text.encode("utf-8"))
    if result.report is not None:
        _print_report(result.report, as_json, quiet, err=to_stderr)
    elif not quiet and not to_stderr:
        count = len(result.conversation or [])
        click.echo(f"wrote the conversation of {result.checkpoint.short_id} ({count} messages) to {output}")


@command(example="snapstore undo --dry-run\nsnapstore undo")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would change; change nothing.")
@json_option
@quiet_option
@click.pass_obj
def undo(obj: Ctx, dry_run: bool, as_json: bool, quiet: bool) -> None:
    """Put the tree back as it was before the last restore or undo (undo again to redo)."""
    with obj.open() as store:
        report = store.undo(dry_run=dry_run)
    _print_report(report, as_json, quiet)


def _print_report(report: RestoreReport, as_json: bool, quiet: bool, err: bool = False) -> None:
    from snapstore.render import restore_lines

    if as_json:
        echo_json(report.to_json(), err=err)
    elif not quiet:
        for w in report.warnings:
            warn(w)
        click.echo("\n".join(restore_lines(report)), err=err)
    if report.partial:  # unreadable paths were left as they are: say so in the exit status
        raise Exit(EXIT_DIFFERENT)


@command(example="snapstore oplog --json")
@json_option
@click.pass_obj
def oplog(obj: Ctx, as_json: bool) -> None:
    """List restores and undos, newest first."""
    from snapstore.render import oplog_rows, table

    with obj.open(reading=True) as store:
        ops = store.operations()
    if as_json:
        echo_json({"operations": [op.to_json() for op in ops]})
        return
    click.echo(table(oplog_rows(ops)) if ops else "no restores yet")
