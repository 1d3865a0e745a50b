"""``snapstore revert``: take back what checkpoints changed, keep what changed since (issue 14)."""

from __future__ import annotations

import sys

import click

from snapstore.cli.app import Ctx, Exit, command, echo_json, json_option, quiet_option, warn
from snapstore.errors import EXIT_DIFFERENT, UsageError
from snapstore.units import printable_bytes


@command(
    example="snapstore revert latest~3                 # what latest~3 changed, merged out\n"
    "snapstore revert A..B                     # everything between A and B\n"
    "snapstore revert --task S --actor agent   # every change of the agent in session S\n"
    "snapstore revert A..latest --actor agent  # the agent's changes after A, the user's kept\n"
    "snapstore revert latest~3 -n -- src/app.py  # the resulting diff of one file\n"
    "snapstore undo                            # puts the tree back",
    paths_after_dashdash=True,
)
@click.argument("what", required=False, metavar="[REF | A..B]")
@click.option("--task", metavar="S", help="Take back the changes of the checkpoints of task (session) S.")
@click.option("--actor", type=click.Choice(["agent", "user", "unknown"]), help="With --task or A..B: only the checkpoints whose metadata actor is this.")
@click.option(
    "--include-unknown", is_flag=True,
    help="With --actor: take back the task's changes labelled unknown too (else listed and left alone; on a terminal you are asked).",
)
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
@json_option
@quiet_option
@click.pass_context
def revert(
    ctx: click.Context,
    what: str | None,
    task: str | None,
    actor: str | None,
    include_unknown: bool,
    conflicts: str,
    side: str | None,
    dry_run: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Undo what checkpoint REF changed (against its parent), what the range A..B changed, or
    what the checkpoints of --task S did (--actor agent: only the agent's; with A..B, the
    actor's checkpoints after A up to B), merged into the tree as it is now: later edits stay.

    Paths after `--` limit the revert.  Conflicting changes stop the revert (exit 9, nothing
    changed) unless --conflicts=markers, --ours or --theirs.  Undo it with `snapstore undo`.
    With --actor, the task's changes labelled unknown (a backgrounded command's, and yours while
    it may run) are listed and left alone unless --include-unknown (or yes on a terminal).
    Exit code 1 when conflicts remain (markers written, or a binary or type conflict left as it
    is), also for a dry run.
    """
    obj: Ctx = ctx.obj
    paths: list[str] = ctx.meta.get("paths", [])
    if side is not None:
        if conflicts not in ("refuse", side):
            raise UsageError(f"--{side} and --conflicts={conflicts} contradict each other")
        conflicts = side
    from snapstore.ops.revert import split_range
    from snapstore.render import revert_lines

    ref, range_ = (None, what) if what is not None and split_range(what) is not None else (what, None)
    if task and actor in ("agent", "user") and not (include_unknown or dry_run or as_json or quiet) and _interactive():
        include_unknown = _ask_unknown(obj, task, paths)
    with obj.open() as store:
        report = store.revert(
            ref, range=range_, task=task, actor=actor, paths=paths or None, conflicts=conflicts, dry_run=dry_run,
            include_unknown=include_unknown,
        )
    if as_json:
        echo_json(report.to_json())
    elif not quiet:
        for w in report.warnings:
            warn(w)
        if dry_run:
            out = sys.stdout.buffer
            shown = printable_bytes if sys.stdout.isatty() else bytes  # (piped: the exact patch)
            for path in sorted(report.diffs):
                out.write(shown(report.diffs[path]))
            out.flush()
        for line in revert_lines(report):
            click.echo(line)
    # Conflicts remain (markers written, or paths that cannot hold markers left as they are):
    # exit 1, so a script never takes such a revert for a clean one.
    if report.conflicted:
        raise Exit(EXIT_DIFFERENT)


def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _ask_unknown(obj: Ctx, task: str, paths: list[str]) -> bool:
    """On a terminal: list the task's unknown changes and ask whether to take them too (asked
    before the revert starts, so no lock is held while the user thinks)."""
    from snapstore.render import unknown_lines

    with obj.open(reading=True) as store:
        unknown = store.unknown_changes(task, paths or None)
    if not unknown:
        return False
    for line in unknown_lines(unknown)[1:]:
        click.echo(line)
    return click.confirm(
        f"{len(unknown)} checkpoint(s) above are labelled unknown (no event says whether you or the agent made "
        "them). Take them back too?",
        default=False,
    )
