"""The ``snapstore`` command line: a thin layer over :class:`snapstore.Store`.

``app`` holds the group, the shared options and the error-to-exit-code mapping; ``lean`` the
click-free ``snapshot`` an agent runs after every tool call and the one table of global options.
The commands live in ``commands_record`` (init, snapshot, list, show, log, cat),
``commands_change`` (diff, restore, undo, oplog), ``commands_revert`` (revert),
``commands_upkeep`` (verify, upgrade, prune, delete, gc, stats, config, relocate, recover),
``commands_agent`` (hook, integrate, mcp, edit), ``commands_service`` (serve),
``commands_remote`` (remote, push, fetch, pull, clone) and ``commands_ui`` (ui).  Each command parses, calls one Store method and renders with
:mod:`snapstore.render`.  Heavy modules are imported inside commands so start-up stays cheap.

``cli`` and ``main`` are loaded on first use: importing this package (for
:mod:`snapstore.cli.lean`, the click-free ``snapshot``) must not import click.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from snapstore.cli.app import cli, main

__all__ = ["cli", "main"]


def __getattr__(name: str) -> Any:
    if name not in ("cli", "main"):
        raise AttributeError(f"module 'snapstore.cli' has no attribute {name!r}")
    from snapstore.cli import (  # noqa: F401 - importing them registers the commands
        app,
        commands_agent,
        commands_change,
        commands_record,
        commands_remote,
        commands_remote_keys,
        commands_revert,
        commands_service,
        commands_ui,
        commands_upkeep,
    )

    globals().update(cli=app.cli, main=app.main)
    return getattr(app, name)
