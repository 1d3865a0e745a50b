"""``snapstore remote key add/list/remove``: the keys of an encrypted remote (docs/remote.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from snapstore.cli.app import CONTEXT, Ctx, echo_json, global_options, json_option
from snapstore.cli.commands_remote import remote


@remote.group(context_settings=CONTEXT, epilog="\b\nExample:\n  snapstore remote key list origin")
def key() -> None:
    """The keys of an encrypted remote: each opens its one master key (add one per person or
    machine; losing every key loses the data)."""


def _sub(example: str, name: str | None = None) -> Callable[[Callable[..., Any]], Any]:
    def decorate(f: Callable[..., Any]) -> Any:
        return key.command(name, context_settings=CONTEXT, epilog=f"\b\nExample:\n  {example}")(global_options(f))

    return decorate


@_sub("snapstore remote key list origin --json", name="list")
@click.argument("name", default="origin")
@json_option
@click.pass_obj
def list_(obj: Ctx, name: str, as_json: bool) -> None:
    """List the remote's keys (the current one is the one that opened it)."""
    import time

    with obj.open(reading=True) as store:
        rows = store.remote_keys(name)
    if as_json:
        echo_json([r.to_json() for r in rows])
        return
    for r in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.created / 1e9)) if r.created else "?"
        click.echo(f"{'*' if r.current else ' '} {r.id}  {when}")


@_sub("SNAPSTORE_NEW_PASSPHRASE=... snapstore remote key add origin")
@click.argument("name", default="origin")
@click.option("--new-key-file", metavar="FILE", type=click.Path(dir_okay=False),
              help="The new key's secret (else SNAPSTORE_NEW_PASSPHRASE, else asked twice).")
@click.pass_obj
def add(obj: Ctx, name: str, new_key_file: str | None) -> None:
    """Add a key to the remote (opened with your current passphrase or key file)."""
    with obj.open() as store:
        key_id = store.remote_key_add(name, key_file=new_key_file)
    click.echo(f"added key {key_id} to remote {name}")


@_sub("snapstore remote key remove origin 1f2e3d4c5b6a7980")
@click.argument("name")
@click.argument("key_id", metavar="ID")
@click.pass_obj
def remove(obj: Ctx, name: str, key_id: str) -> None:
    """Remove a key (never the one opening the remote now: use another key for that)."""
    with obj.open() as store:
        store.remote_key_remove(key_id, name)
    click.echo(f"removed key {key_id} of remote {name}")
