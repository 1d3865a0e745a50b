"""The ``snapstore`` command line: a thin layer over :class:`snapstore.Store`.

``app`` holds the group, the shared options and the error-to-exit-code mapping; the commands
live in ``commands_record`` (init, snapshot, list, show, log, cat), ``commands_change`` (diff,
restore, undo, oplog) and ``commands_upkeep`` (verify, prune, delete, gc, stats, config,
relocate, recover).  Each command parses, calls one Store method and renders with
:mod:`snapstore.render`.  Heavy modules are imported inside commands so start-up stays cheap.
"""

from __future__ import annotations

from snapstore.cli import (  # noqa: F401 - importing them registers the commands
    commands_agent,
    commands_change,
    commands_record,
    commands_revert,
    commands_service,
    commands_ui,
    commands_upkeep,
)
from snapstore.cli.app import cli, main

__all__ = ["cli", "main"]
