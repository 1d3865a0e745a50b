"""``snapstore revert``: take back what checkpoints changed, keep what changed since (issue 14)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from snapstore.cli.app import Ctx, Exit, command, echo_json, warn
from snapstore.errors import EXIT_DIFFERENT, UsageError

if TYPE_CHECKING:
    from snapstore.ops.revert_record import RevertReport


@command(
    example="snapstore revert latest~3                 # what latest~3 changed, merged out\n"
    "snapstore revert A..B                     # everything between A and B\n"
    "snapstore revert --task S --actor agent   # every change of the agent in session S\n"
    "snapstore revert latest~3 -n -- src/app.py  # the resulting diff of one file\n"
    "snapstore undo                            # puts the tree back",
    paths_after_dashdash=True,
)
@click.argument("what", required=False, metavar="[REF | A..B]")
@click.option("--task", metavar="S", help="Take back the changes of the checkpoints of task (session) S.")
@click.option("--actor", type=click.Choice(["agent", "user"]), help="With --task: only the checkpoints whose metadata actor is this.")
@click.option(
    "--conflicts",
    type=click.Choice(["refuse", "markers", "ours", "theirs"]),
    default="refuse",
    show_default=True,
    help="refuse: stop (exit 9) and list them, nothing changed; markers: write diff3 markers.",
)
@click.option("--ours", "side", flag_value="ours", help="Conflicting lines keep the tree's version.")
@click.option("--theirs", "side", flag_value="theirs", help="Conflicting lines take the version before the change.")
@click.option("-n", "--dry-run", is_flag=True, help="Print the resulting diff per file and the conflicts; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.pass_context
def revert(
    ctx: click.Context,
    what: str | None,
    task: str | None,
    actor: str | None,
    conflicts: str,
    side: str | None,
    dry_run: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Undo what checkpoint REF changed (against its parent), what the range A..B changed, or
    what the checkpoints of --task S did (--actor agent: only the agent's), merged into the
    tree as it is now: later edits stay.

    Paths after `--` limit the revert.  Conflicting changes stop the revert (exit 9, nothing
    changed) unless --conflicts=markers, --ours or --theirs.  Undo it with `snapstore undo`.
    Exit code 1 when conflict markers were written.
    """
    obj: Ctx = ctx.obj
    paths: list[str] = ctx.meta.get("paths", [])
    if side is not None:
        if conflicts not in ("refuse", side):
            raise UsageError(f"--{side} and --conflicts={conflicts} contradict each other")
        conflicts = side
    ref, range_ = (None, what) if what is not None and ".." in what else (what, None)
    with obj.open() as store:
        report = store.revert(
            ref, range=range_, task=task, actor=actor, paths=paths or None, conflicts=conflicts, dry_run=dry_run
        )
    if as_json:
        echo_json(report.to_json())
    elif not quiet:
        for w in report.warnings:
            warn(w)
        if dry_run:
            out = sys.stdout.buffer
            for path in sorted(report.diffs):
                out.write(report.diffs[path])
            out.flush()
        for line in _summary(report):
            click.echo(line)
    if any(o.final.data is not None for o in report.conflicted):
        raise Exit(EXIT_DIFFERENT)


def _summary(report: RevertReport) -> list[str]:
    from snapstore.tree.paths import display

    lines = []
    for o in report.outcomes:
        text = f"{o.status:<9} {display(o.path)}"
        if o.conflicts and o.status == "conflict":
            ranges = ", ".join(c.describe() for c in o.conflicts)
            text += f": {ranges or 'whole file'}"
        if o.note:
            text += f" ({o.note})"
        lines.append(text)
    if report.dry_run:
        lines.append(f"dry run: revert of {report.what} would change {report.changed} path(s); nothing was changed")
    elif report.op_seq is None:
        lines.append(f"revert of {report.what}: nothing to change")
    else:
        lines.append(f"revert of {report.what}: {report.changed} path(s) changed; 'snapstore undo' puts them back")
    return lines
