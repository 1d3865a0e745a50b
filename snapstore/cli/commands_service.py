"""``snapstore serve``: the resident service of a store."""

from __future__ import annotations

import click

from snapstore.cli.app import Ctx, command, echo_json
from snapstore.errors import UsageError


@command(example="snapstore serve --detach   # then every command goes through it\nsnapstore serve --status\nsnapstore serve --stop")
@click.option("--detach", is_flag=True, help="Start in the background; return once it answers.")
@click.option("--stop", "stop_it", is_flag=True, help="Stop the running service.")
@click.option("--status", "show_status", is_flag=True, help="Print the running service's status as JSON.")
@click.option("--idle-timeout", type=float, default=None, metavar="SECONDS", help="Exit after this long without a request (default: config service.idle-timeout).")
@click.pass_obj
def serve(obj: Ctx, detach: bool, stop_it: bool, show_status: bool, idle_timeout: float | None) -> None:
    """Keep the store open in a service process that answers every command for this tree.

    Commands find a running service by themselves and fall back to running in-process when
    there is none (same output, same exit codes). The service exits when idle for a while, when
    stopped, or when its tree disappears.
    """
    from snapstore.service import daemon
    from snapstore.store import Store

    if sum((detach, stop_it, show_status)) > 1:
        raise UsageError("choose one of --detach, --stop, --status")
    store_dir = Store.locate(obj.directory, store=obj.store_dir)
    if show_status:
        echo_json(daemon.full_status(store_dir))
        return
    if stop_it:
        click.echo("stopped" if daemon.stop(store_dir) else "no service was running")
        return
    if idle_timeout is None:
        with Store.open(store=store_dir) as store:
            idle_timeout = float(store.config_get("service.idle-timeout"))
    if detach:
        info = daemon.start_detached(store_dir, idle_timeout)
        click.echo(f"serving {info['store']} for {info['tree']} (pid {info['pid']})")
        other = daemon.other_version(info)
        if other:
            click.echo(f"snapstore: warning: {other}", err=True)
        refused = (info.get("http") or {}).get("refused")
        if refused:  # (Claude Code's next prompt is blocked until this is settled: service.http_hooks)
            click.echo(f"snapstore: warning: not answering Claude Code's http hooks: {refused}", err=True)
        return
    daemon.run_foreground(store_dir, idle_timeout)
