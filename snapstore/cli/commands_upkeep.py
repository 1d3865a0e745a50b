"""Commands that keep a store healthy: verify, upgrade, prune, delete, gc, maintain, stats, config,
relocate, recover."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from snapstore.cli.app import Ctx, Exit, command, echo_json, json_option, quiet_option
from snapstore.errors import CorruptError, UsageError

T = TypeVar("T")


def counted(label: str, enabled: bool, run: Callable[..., T]) -> T:
    """``run(progress=...)`` with a progress line of counted items on stderr (when enabled)."""
    from snapstore.render import Progress

    progress = Progress(label, enabled=enabled, unit_bytes=False)
    try:
        return run(progress=progress)
    finally:
        progress.close()


@command(example="snapstore verify --json")
@quiet_option
@json_option
@click.option("--repair", is_flag=True, help="Store again the damaged chunks the working tree still holds, then verify again.")
@click.pass_obj
def verify(obj: Ctx, quiet: bool, as_json: bool, repair: bool) -> None:
    """Re-read and re-hash every chunk, check every record and reference; exit 6 if anything is wrong."""
    from snapstore.render import repair_line, verify_line

    if repair:
        with obj.open() as store:
            repaired = counted("verify", not quiet and not as_json, store.repair)
        report = repaired.after or repaired.before
    else:
        with obj.open(reading=True) as store:
            report = counted("verify", not quiet and not as_json, store.verify)
    if as_json:
        echo_json(repaired.to_json() if repair else report.to_json())
    else:
        for p in report.problems:
            click.echo(f"problem: {p}")
        if repair and repaired.damaged:
            click.echo(repair_line(repaired))
        if not quiet:
            click.echo(verify_line(report))
    if not report.ok:
        raise Exit(CorruptError.exit_code)


@command(example="snapstore prune --keep-last 50 --keep-tagged --dry-run")
@click.option("--keep-last", type=int, metavar="N", help="Keep the N newest checkpoints (safety ones not counted).")
@click.option("--keep-within", metavar="DURATION", help="Keep every checkpoint younger than DURATION (30m, 12h, 7d, 2w).")
@click.option("--keep-tagged", is_flag=True, help="Keep every checkpoint a tag names.")
@click.option("--task", metavar="NAME", help="Only consider (and count) the checkpoints of this task.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@json_option
@quiet_option
@click.pass_obj
def prune(
    obj: Ctx,
    keep_last: int | None,
    keep_within: str | None,
    keep_tagged: bool,
    task: str | None,
    dry_run: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Remove the checkpoints no --keep rule keeps (run `snapstore gc` to free their data).

    Checkpoints that `undo` can still reach (the newest 10 operations) and those of a pending
    restore are always kept.
    """
    from snapstore.render import prune_lines

    with obj.open() as store:
        report = store.prune(
            keep_last=keep_last, keep_within=keep_within, keep_tagged=keep_tagged, task=task, dry_run=dry_run
        )
    if as_json:
        echo_json(report.to_json())
    elif not quiet:
        click.echo("\n".join(prune_lines(report)))


@command(example="snapstore delete latest~4 && snapstore gc")
@click.argument("ref")
@quiet_option
@click.pass_obj
def delete(obj: Ctx, ref: str, quiet: bool) -> None:
    """Remove checkpoint REF: its record, its log entry and the tags naming it.

    Its data stays until `snapstore gc`. Checkpoints that `undo` can still reach are refused.
    """
    with obj.open() as store:
        cp = store.delete(ref)
    if not quiet:
        click.echo(f"deleted {cp.short_id}; run 'snapstore gc' to free its space")


@command(example="snapstore gc --dry-run\nsnapstore gc --compact\nsnapstore gc --repack --level 9 --compact")
@click.option("--compact", is_flag=True, help="Also rewrite the store file so the disk space comes back.")
@click.option("--repack", is_flag=True, help="Rewrite every pack (recompress the whole store at --level).")
@click.option("--level", type=click.IntRange(1, 22), default=9, show_default=True, help="zstd level for --repack.")
@click.option("-n", "--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@json_option
@quiet_option
@click.pass_obj
def gc(
    obj: Ctx, compact: bool, repack: bool, level: int, dry_run: bool, as_json: bool, quiet: bool
) -> None:
    """Remove the data no checkpoint reaches (holds the writer lock while it runs).

    When checkpoints have written packs since the last gc, their live chunks are gathered into
    consolidated packs first, versions of a file side by side (about 5 s for a 250 MB tree):
    `snapstore config gc.consolidate loose` gathers only the new packs, `off` skips it.
    """
    from snapstore.render import gc_lines

    with obj.open() as store:
        report = store.gc(compact=compact, dry_run=dry_run, repack_level=level if repack else None)
    if as_json:
        echo_json(report.to_json())
    elif not quiet:
        click.echo("\n".join(gc_lines(report)))


@command(example="snapstore maintain")
@json_option
@quiet_option
@click.option("--background", is_flag=True, hidden=True, help="The detached pass a snapshot starts.")
@click.pass_obj
def maintain(obj: Ctx, as_json: bool, quiet: bool, background: bool) -> None:
    """Run the maintenance passes that are due, now, until none is (what the idle service does).

    Small loose packs are gathered, and a small store whose packs grew by a quarter is
    rewritten whole at level 19 (the full pass). Snapshots and an idle service start this in
    the background when a pass is due (config maintenance.detach). Checkpoints go on meanwhile:
    each step holds the writer lock only for its write. Removes nothing (gc does). One at a
    time per store (exit 5 if another runs).
    """
    from snapstore.errors import LockedError
    from snapstore.render import maintain_line

    if background:
        from snapstore.ops.background import yield_cpu

        yield_cpu()
    try:
        with obj.open() as store:
            reports = store.maintain_all()
    except LockedError:
        if background:
            return  # another pass already does the work
        raise
    if as_json:
        echo_json([r.to_json() for r in reports])
    elif not quiet and not background:
        click.echo(maintain_line(reports))


@command(example="snapstore upgrade")
@json_option
@quiet_option
@click.pass_obj
def upgrade(obj: Ctx, as_json: bool, quiet: bool) -> None:
    """Convert a format-1 store to format 2 (packs): crash-safe, verified as it goes.

    Every chunk is read back from its new pack before its old value is replaced; a crash leaves
    a store that works, and running upgrade again carries on. Ends with a compaction.
    """
    from snapstore.render import upgrade_line

    with obj.open(upgrading=True) as store:
        report = counted("upgrade", not quiet and not as_json, store.upgrade)
    if as_json:
        echo_json(report.to_json())
    elif not quiet:
        click.echo(upgrade_line(report))


@command(example="snapstore stats --json")
@json_option
@click.pass_obj
def stats(obj: Ctx, as_json: bool) -> None:
    """Checkpoints, tasks, sizes, dedup and compression ratios, size on disk.

    File counts and bytes are of regular files; the +/~/- of `list` count paths of every kind.
    """
    from snapstore.render import stats_lines

    with obj.open(reading=True) as store:
        st = store.stats()
    if as_json:
        echo_json(st.to_json())
    else:
        click.echo("\n".join(stats_lines(st)))


@command(example="snapstore config retention.keep-last 100\nsnapstore config --unset retention.keep-last")
@click.argument("key", required=False)
@click.argument("value", required=False)
@click.option("--unset", is_flag=True, help="Reset KEY to its default.")
@click.pass_obj
def config(obj: Ctx, key: str | None, value: str | None, unset: bool) -> None:
    """Print all settings, print KEY, or set KEY to VALUE (e.g. retention.keep-last 100).

    Printing all settings lists every key with its value (docs/cli.md says what each means:
    retention.*, gc.*, maintenance.*, storage.*, service.*, remote.*).
    """
    with obj.open() as store:
        if key is None:
            if unset:
                raise UsageError("--unset needs a KEY")
            values = store.config()
        elif unset or value is not None:
            values = {key: store.config_set(key, None if unset else value)}
        else:
            click.echo(store.config_get(key))
            return
    for k, v in values.items():
        click.echo(f"{k} = {v}")


@command(example="mv ~/proj ~/work/proj\nsnapstore --store ~/snaps/proj relocate ~/work/proj")
@click.argument("new_root", type=click.Path(file_okay=False))
@click.pass_obj
def relocate(obj: Ctx, new_root: str) -> None:
    """Re-point a store kept outside its tree (init --store) at the tree's new place.

    Use it after moving or copying a tree: commands refuse to work on a tree that is not the
    store's, so a copied store never reads or rewrites the original tree.
    """
    from snapstore.store import Store

    if not obj.store_dir:
        raise UsageError(
            "relocate is for a store kept outside its tree: name it with --store DIR "
            "(a .snapstore inside the tree moves with the tree)"
        )
    with Store.open(store=obj.store_dir, lock_timeout=obj.lock_timeout) as store:
        old = store.relocate(new_root)
        click.echo(f"the store {store.store_dir} now belongs to {store.root} (was {old})")


@command(example="snapstore recover --dry-run\nsnapstore recover            # finish it\nsnapstore recover --back     # or roll it back")
@click.option("--back", "mode", flag_value="back", help="Roll the interrupted restore back instead of finishing it.")
@click.option("--abandon", "mode", flag_value="abandon", help="Keep the tree as it is (recorded first) and drop the journal.")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be done; change nothing.")
@json_option
@click.pass_obj
def recover(obj: Ctx, mode: str | None, dry_run: bool, as_json: bool) -> None:
    """Finish (or roll back) a restore that was interrupted (a crash, a full disk, a kill).

    Writers (snapshot, restore, undo, gc, prune) finish it by themselves; read-only commands
    only warn. A journaled path that was changed since the crash is never overwritten: recover
    refuses (exit 9) and names it; move your version aside (or --abandon), then run it again.
    """
    from snapstore.render import recover_line

    with obj.open() as store:
        report = store.recover(mode=mode or "forward", dry_run=dry_run)
    if as_json:
        echo_json(report.to_json())
    else:
        click.echo(recover_line(report))
