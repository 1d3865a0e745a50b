"""``snapstore ui``: the checkpoint browser, a local web page (needs the ``ui`` extra)."""

from __future__ import annotations

import click

from snapstore.cli.app import Ctx, command, warn
from snapstore.errors import UsageError


@command(example="snapstore ui                          # prints the URL; opens a browser if there is one\nsnapstore ui --port 8765 --no-browser\nsnapstore ui --remote origin              # a remote's checkpoints, read-only")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default="a free port", help="The port to listen on.")
@click.option("--host", metavar="ADDR", default=None, show_default="a random 127.x.y.z", help="The address to listen on; anything but loopback lets other machines reach the page (a warning says so).")
@click.option("--no-browser", is_flag=True, help="Only print the URL (no browser is opened under CI or without a display anyway).")
@click.option("--remote", metavar="NAME", help="Browse remote NAME instead, read-only (read through a local cache: only what the command needs, by range).")
@click.pass_obj
def ui(obj: Ctx, port: int, host: str | None, no_browser: bool, remote: str | None) -> None:
    """Browse checkpoints in a local web page: timeline, diffs, file history, compare, and
    restore / undo / tag with a preview first.

    The page is served on a random loopback address (127.x.y.z), to your own user only, in the
    browser that opens the printed URL first (its token works once; the next one is printed when
    it is used); Ctrl-C stops it.

    With --remote NAME it shows the checkpoints of that remote instead (docs/remote.md),
    read-only: no working tree, no restore, undo, revert or tag.
    """
    from snapstore.ui.server import missing_dependencies, serve

    missing = missing_dependencies()
    if missing:
        raise UsageError(f"snapstore ui needs {', '.join(missing)}: pip install 'snapstore[ui]'")
    with obj.open(remote=remote) as store:
        serve(store, host=host, port=port, open_browser=not no_browser, echo=click.echo, warn=warn, remote=remote)
