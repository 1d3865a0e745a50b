"""Remote commands: remote add/list/remove/ls/log/verify/doctor/gc/forget/ref, push, fetch, pull, clone.

Thin: each parses, calls one Store method, prints lines or ``--json``.  Credentials are never
options (they would land in shell history and ``ps``): AWS environment variables or a profile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from snapstore.cli.app import (
    CONTEXT,
    Ctx,
    Exit,
    cli,
    command,
    echo_json,
    global_options,
    json_option,
    quiet_option,
)
from snapstore.cli.remote_options import retry_budget_option
from snapstore.errors import ConflictError, CorruptError, RemoteError
from snapstore.render import printable, size

T = TypeVar("T")

_REMOTE_OPTION = click.option(
    "--remote", "remote", default="origin", show_default=True, metavar="NAME", help="The remote to use."
)


def _with_progress(label: str, enabled: bool, run: Callable[..., T], unit_bytes: bool = False, then: str = "") -> T:
    from snapstore.render import Progress

    progress = Progress(label, enabled=enabled, unit_bytes=unit_bytes, then=then)
    try:
        return run(progress=progress)
    finally:
        progress.close()


@global_options
@click.group(context_settings=CONTEXT, epilog="\b\nExample:\n  snapstore remote add origin s3://bucket/team/project")
def remote() -> None:
    """Manage remotes (S3-compatible object storage): add, list, remove, ls, log, verify, gc, forget, ref, doctor.

    Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) or
    an AWS profile; they are never stored.  See docs/remote.md.
    """


cli.add_command(remote)


def _sub(example: str, name: str | None = None) -> Callable[[Callable[..., Any]], Any]:
    def decorate(f: Callable[..., Any]) -> Any:
        lines = "\n".join(f"  {line}" for line in example.strip().splitlines())
        return remote.command(name, context_settings=CONTEXT, epilog=f"\b\nExample:\n{lines}")(global_options(f))

    return decorate


def _encrypt_options(f: Callable[..., None]) -> Callable[..., None]:
    f = click.option("--key-file", metavar="FILE", type=click.Path(dir_okay=False),
                     help="Encrypt, with the secret this file holds as the passphrase (implies --encrypt).")(f)
    return click.option("--encrypt", is_flag=True, help=(
        "Encrypt everything put on the remote (passphrase from SNAPSTORE_PASSPHRASE or asked for; "
        "losing it loses the data). See docs/remote.md."))(f)


@_sub("snapstore remote add origin s3://bucket/team/project\n"
      "snapstore remote add local s3://snap/dev --endpoint http://127.0.0.1:8333\n"
      "snapstore remote add safe s3://bucket/team/project --encrypt --key-file ~/.config/snapstore/team.key")
@click.argument("name")
@click.argument("url")
@click.option("--endpoint", metavar="URL", help="The S3 endpoint of a non-AWS engine (https; http only when written so).")
@click.option("--region", metavar="REGION", help="The bucket's region (default us-east-1).")
@click.option("--profile", metavar="NAME", help="The AWS profile whose keys to use (its name is stored, never the keys).")
@_encrypt_options
@click.pass_obj
def add(obj: Ctx, name: str, url: str, endpoint: str | None, region: str | None, profile: str | None,
        encrypt: bool, key_file: str | None) -> None:
    """Record a remote (no request is made; nothing secret is stored)."""
    with obj.open() as store:
        cfg = store.remote_add(name, url, endpoint=endpoint, region=region, profile=profile, encrypt=encrypt,
                               key_file=key_file)
    click.echo(f"added remote {cfg.name} {cfg.url}" + (f" at {cfg.endpoint}" if cfg.endpoint else "")
               + (" (encrypted)" if cfg.crypt is not None else ""))


@_sub("snapstore remote list --json", name="list")
@json_option
@click.pass_obj
def list_(obj: Ctx, as_json: bool) -> None:
    """List the remotes and their refs as last seen (no request is made)."""
    with obj.open(reading=True) as store:
        rows = [(cfg, store.remote_refs_seen(cfg.name)) for cfg in store.remote_list()]
    if as_json:
        echo_json([dict(cfg.to_json(), refs=seen) for cfg, seen in rows])
        return
    for cfg, seen in rows:
        where = f" at {cfg.endpoint}" if cfg.endpoint else ""
        click.echo(f"{cfg.name}\t{cfg.url}{where}" + (" (encrypted)" if cfg.crypt is not None else ""))
        for ref, cid in sorted(seen.items()):
            click.echo(f"  {ref}\t{cid[:12]}")


@_sub("snapstore remote remove origin")
@click.argument("name")
@click.pass_obj
def remove(obj: Ctx, name: str) -> None:
    """Forget a remote and what this store knew of it (nothing on the remote changes)."""
    with obj.open() as store:
        store.remote_remove(name)
    click.echo(f"removed remote {name}")


@_sub("snapstore remote ls origin --json")
@click.argument("name", default="origin")
@json_option
@click.pass_obj
def ls(obj: Ctx, name: str, as_json: bool) -> None:
    """List the refs on the remote (one listing, one read per ref)."""
    problems: list[str] = []
    with obj.open(reading=True) as store:
        rows = store.remote_ls(name, problems=problems)
    if as_json:
        echo_json(rows)
    else:
        for row in rows:
            click.echo(printable(f"{row['ref']}\t{row['checkpoint'][:12]}\t{row['bundle']}"))
    _fail_on(problems)


def _fail_on(problems: list[str]) -> None:
    """One error line per damaged ref (the sound ones were served), then exit 6."""
    for line in problems:
        click.echo(f"snapstore: error: {printable(' '.join(line.split()))}", err=True)
    if problems:
        raise Exit(CorruptError.exit_code)


@_sub("snapstore remote verify origin")
@click.argument("name", default="origin")
@json_option
@quiet_option
@click.pass_obj
def verify(obj: Ctx, name: str, as_json: bool, quiet: bool) -> None:
    """Read and check every object published on the remote; exit 6 naming each damaged one."""
    with obj.open(reading=True) as store:
        report = _with_progress("remote verify", not quiet and not as_json, lambda progress: store.remote_verify(name, progress))
    if as_json:
        echo_json(report.to_json())
    else:
        for p in report.problems:
            click.echo(printable(f"problem: {p['object']}: {p['problem']}"))
        if not quiet:
            click.echo(
                f"{report.bundles} bundles, {report.checkpoints} checkpoints, {report.refs} refs, "
                f"{size(report.bytes_read)} read: " + ("ok" if report.ok else f"{len(report.problems)} problems")
                + (f"; {report.unreferenced_packs} unreferenced packs" if report.unreferenced_packs else "")
            )
    if not report.ok:
        raise Exit(CorruptError.exit_code)


@_sub("snapstore remote doctor origin")
@click.argument("name", default="origin")
@json_option
@click.pass_obj
def doctor(obj: Ctx, name: str, as_json: bool) -> None:
    """Probe the engine's conditional writes; exit 13 (and no shared-ref moves) if it ignores them."""
    with obj.open() as store:
        report = store.remote_doctor(name)
    if as_json:
        echo_json(report.to_json())
    else:
        for check, ok in report.checks.items():
            click.echo(f"{'ok  ' if ok else 'FAIL'} {check}")
        click.echo(f"{'ok  ' if report.listing_current else 'lags'} a listing shows a key just written")
        for note in report.notes:
            click.echo(f"note: {note}")
    if not report.ok:
        raise RemoteError(
            f"the remote {name} ignores conditional writes: pushes publish their bundles but move no shared ref"
        )


# -- push, fetch, pull, clone -------------------------------------------------------------------


@command(example="snapstore push\nsnapstore push --task fix-login\nsnapstore push latest~1 latest --to review")
@click.argument("refs", nargs=-1)
@_REMOTE_OPTION
@click.option("--task", metavar="NAME", help="Push every checkpoint of this task (and move the ref named after it).")
@click.option("--to", metavar="REF", help="The remote ref to move (default: the task, else 'default').")
@click.option("--force", is_flag=True, help="Move the ref even when that is not a fast-forward.")
@retry_budget_option
@json_option
@quiet_option
@click.pass_obj
def push(obj: Ctx, refs: tuple[str, ...], remote: str, task: str | None, to: str | None, force: bool,
         as_json: bool, quiet: bool) -> None:
    """Publish checkpoints on a remote, wholly or not at all (default: the latest one).

    Only the chunks those checkpoints reach and the remote lacks are uploaded.  The remote ref
    moves by compare-and-swap; when it is not a fast-forward it stays (exit 9), the pushed
    checkpoints stay published, and --force moves it.
    """
    with obj.open(reading=True) as store:
        report = _with_progress(
            "push", not quiet and not as_json,
            lambda progress: store.push(refs, remote=remote, task=task, to=to, force=force, progress=progress),
            unit_bytes=True,
        )
    if as_json:
        echo_json(report.to_json())
    elif not quiet:
        how = "inline" if report.inline else f"{report.packs} packs"
        click.echo(
            f"pushed {len(report.checkpoints)} checkpoint(s) to {remote}: {report.chunks_new} new chunks "
            f"({size(report.bytes_new)}, {size(report.bytes_sent)} sent, {how}), {report.requests} requests"
        )
        click.echo(f"ref {report.ref}: {report.ref_outcome}" + (
            f" (the remote has {report.ref_checkpoint[:12]})" if report.ref_outcome == "diverged" and report.ref_checkpoint else ""))
    if report.ref_outcome == "diverged":
        if not as_json:
            click.echo(
                f"snapstore: error: the remote ref {report.ref} was not moved: it names a checkpoint that is not "
                "an ancestor of yours (your checkpoints are published; --force moves the ref)", err=True)
        raise Exit(ConflictError.exit_code)
    if report.ref_outcome == "refused":
        raise RemoteError(f"the remote {remote} ignores conditional writes: the checkpoints are published, the ref was not moved")


@command(example="snapstore fetch\nsnapstore fetch default --remote origin")
@click.argument("refs", nargs=-1)
@_REMOTE_OPTION
@retry_budget_option
@json_option
@quiet_option
@click.pass_obj
def fetch(obj: Ctx, refs: tuple[str, ...], remote: str, as_json: bool, quiet: bool) -> None:
    """Bring the checkpoints remote refs name (default: all) into the store; the tree is untouched."""
    with obj.open() as store:
        report = _with_progress(
            "fetch", not quiet and not as_json,
            lambda progress: store.fetch(refs, remote=remote, progress=progress, keep_going=True),
            unit_bytes=True,
        )
    _fetch_lines(report.to_json(), as_json, quiet)
    _fail_on(report.problems)


def _fetch_lines(doc: dict[str, Any], as_json: bool, quiet: bool) -> None:
    if as_json:
        echo_json(doc)
        return
    if quiet:
        return
    for r in doc["refs"]:
        click.echo(printable(f"{r['name']}\t{r['checkpoint'][:12]}\t{len(r['new_checkpoints'])} new checkpoint(s), "
                             f"{r['objects_read']} objects, {size(r['bytes_read'])}"))
    click.echo(f"{doc['requests']} requests")


@command(example="snapstore pull\nsnapstore pull fix-login")
@click.argument("ref", required=False)
@_REMOTE_OPTION
@retry_budget_option
@json_option
@quiet_option
@click.pass_obj
def pull(obj: Ctx, ref: str | None, remote: str, as_json: bool, quiet: bool) -> None:
    """Fetch a remote ref (default: 'default', or the only one) and restore the tree to it
    (journaled; 'snapstore undo' puts the tree back)."""
    with obj.open() as store:
        report = _with_progress("pull", not quiet and not as_json, lambda progress: store.pull(ref, remote=remote, progress=progress),
                                unit_bytes=True, then="checking and restoring the tree")
    _fetch_lines(report.to_json(), as_json, quiet)
    if report.restore is not None and not as_json and not quiet:
        click.echo(f"restored {report.refs[0].checkpoint[:12]}: {len(report.restore.changes)} paths changed")
        for w in report.restore.warnings:
            click.echo(f"snapstore: warning: {w}", err=True)


@command(example="snapstore clone s3://bucket/team/project work --endpoint http://127.0.0.1:8333", own_store_option=True)
@click.argument("url")
@click.argument("target", metavar="DIRECTORY", type=click.Path(file_okay=False))
@click.option("--ref", metavar="REF", help="The remote ref to clone (default: 'default', or the only one).")
@click.option("--at", metavar="CHECKPOINT", help="Clone this checkpoint of the ref's history (an id or a prefix of 4+ hex digits) instead of its latest.")
@click.option("--endpoint", metavar="URL", help="The S3 endpoint of a non-AWS engine.")
@click.option("--region", metavar="REGION", help="The bucket's region.")
@click.option("--profile", metavar="NAME", help="The AWS profile whose keys to use.")
@_encrypt_options
@retry_budget_option
@json_option
@quiet_option
def clone(url: str, target: str, ref: str | None, at: str | None, endpoint: str | None, region: str | None,
          profile: str | None, encrypt: bool, key_file: str | None, as_json: bool, quiet: bool) -> None:
    """Make DIRECTORY (absent or empty) a tree with a store, holding a remote ref's checkpoint.

    Reads only what that checkpoint needs.  The remote is recorded as 'origin'.  On failure,
    what the clone made is removed (nothing else).
    """
    from snapstore.store import Store

    report = _with_progress("clone", not quiet and not as_json, lambda progress: Store.clone(
        url, target, ref=ref, endpoint=endpoint, region=region, profile=profile, progress=progress,
        encrypt=encrypt, key_file=key_file, at=at), unit_bytes=True, then="checking and restoring the tree")
    _fetch_lines(report.to_json(), as_json, quiet)
    if not as_json and not quiet:
        click.echo(f"cloned {report.refs[0].checkpoint[:12]} into {report.directory}")


@_sub("snapstore remote gc origin --dry-run")
@click.argument("name", default="origin")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be condemned and deleted; change nothing.")
@click.option("--grace", "grace_hours", type=click.FloatRange(min=12), default=24, show_default=True,
              help="Hours a pack no bundle names must have existed (by the engine's clock) before it is condemned.")
@json_option
@click.pass_obj
def gc(obj: Ctx, name: str, dry_run: bool, grace_hours: float, as_json: bool) -> None:
    """Remove what no live push names (packs of killed pushes, pushes 'remote forget' or 'remote
    ref delete' took out of a history, and what only they held), in two phases: condemned by one
    run, deleted by a later one 8 h on if still unreferenced."""
    with obj.open() as store:
        report = store.remote_gc(name, dry_run=dry_run, grace_s=grace_hours * 3600)
    if as_json:
        echo_json(report.to_json())
        return
    verb = "would delete" if dry_run else "deleted"
    click.echo(
        f"{report.bundles} bundles ({report.forgotten} forgotten), {report.packs} packs ({report.live_packs} live): {verb} "
        f"{len(report.deleted)} ({size(report.bytes_deleted)}), condemned {len(report.condemned)}, "
        f"{report.waiting} waiting, {len(report.rescued)} rescued"
    )


@_sub("snapstore remote log origin\nsnapstore remote log origin --ref fix-login --json", name="log")
@click.argument("name", default="origin")
@click.option("--ref", metavar="REF", help="Only the pushes of this ref's history.")
@json_option
@click.pass_obj
def log_(obj: Ctx, name: str, ref: str | None, as_json: bool) -> None:
    """Who pushed what and when: every push of every ref's history (read through the browsing
    cache: each push is read once)."""
    with obj.open(reading=True, remote=name) as view:
        pushes = view.remote_pushes(name, ref)
    if as_json:
        echo_json([p.to_json() for p in pushes])
        return
    from snapstore.render import local_time

    for p in pushes:
        who = f"{p.user or '?'}@{p.host or '?'}"
        ids = " ".join(c.hex()[:12] for c in p.checkpoints[-3:]) + (" ..." if len(p.checkpoints) > 3 else "")
        click.echo(printable(f"{local_time(p.time_ns)}\t{p.ns}\t{who}\t{len(p.checkpoints)} checkpoint(s)\t{ids}"))


@_sub("snapstore remote forget origin --keep-last 20 --dry-run\n"
      "snapstore remote forget origin --ref fix-login --keep-within 7d")
@click.argument("name", default="origin")
@click.option("--ref", "refs", multiple=True, metavar="REF", help="Only this ref's history (repeatable; default: every ref).")
@click.option("--task", metavar="NAME", help="Forget only checkpoints of this task (the others are kept).")
@click.option("--keep-last", type=click.IntRange(min=1), metavar="N", help="Keep the N newest checkpoints of each ref.")
@click.option("--keep-within", metavar="DURATION", help="Keep the checkpoints less than DURATION (30m, 12h, 7d) older than each ref's newest.")
@click.option("-n", "--dry-run", is_flag=True, help="Say what would be forgotten; write nothing.")
@json_option
@click.pass_obj
def forget(obj: Ctx, name: str, refs: tuple[str, ...], task: str | None, keep_last: int | None,
           keep_within: str | None, dry_run: bool, as_json: bool) -> None:
    """Take old pushes out of each ref's history by keep rules (the ref's checkpoint is always
    kept); 'remote gc' then reclaims what only they held. Nothing is deleted here."""
    from snapstore.ops.retention import parse_duration

    within = parse_duration(keep_within) if keep_within is not None else None
    with obj.open() as store:
        report = store.remote_forget(name, refs, keep_last=keep_last, keep_within_s=within, task=task, dry_run=dry_run)
    _forget_lines(report, as_json, "would forget" if dry_run else "forgot")


def _forget_lines(report: Any, as_json: bool, verb: str) -> None:
    if as_json:
        echo_json(report.to_json())
        return
    for r in report.refs:
        shared = f", {len(r.shared)} kept as they share a push with a kept one" if r.shared else ""
        click.echo(printable(f"{r.ref}: {verb} {len(r.forgotten)} checkpoint(s) in {len(r.bundles)} push(es), "
                             f"kept {len(r.kept)}{shared}"))


@remote.group(name="ref", context_settings=CONTEXT)
def ref_group() -> None:
    """Manage the refs on a remote: delete."""


@ref_group.command(name="delete", context_settings=CONTEXT,
                   epilog="\b\nExample:\n  snapstore remote ref delete fix-login --remote origin")
@global_options
@click.argument("ref")
@_REMOTE_OPTION
@json_option
@click.pass_obj
def ref_delete(obj: Ctx, ref: str, remote: str, as_json: bool) -> None:
    """Delete a remote ref and take its whole history out; 'remote gc' then reclaims what only it held."""
    with obj.open() as store:
        report = store.remote_ref_delete(ref, remote=remote)
    if as_json:
        echo_json(report.to_json())
        return
    r = report.refs[0]
    click.echo(printable(f"deleted ref {r.ref}: {len(r.bundles)} push(es) forgotten"))
