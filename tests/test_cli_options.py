"""Shared options keep one help text each (issue 39): every ``--json`` and ``-q/--quiet`` of the
command tree is cli.app's json_option / quiet_option, but for the two that mean something else
(``cat --json``: the entry, not the bytes; ``diff -q``: the exit code says)."""

from __future__ import annotations

import click

from snapstore.cli import cli  # (the package registers every command; cli.app alone has none)
from snapstore.cli.app import JSON_HELP, QUIET_HELP

#: (command path, option) whose meaning differs, and so their help.
OWN_HELP = {("cat", "--json"), ("diff", "--quiet")}


def _commands(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, path + " ")
    return out


def test_every_json_and_quiet_option_has_the_one_help_text():
    seen = 0
    for path, cmd in _commands(cli):
        for param in cmd.params:
            if not isinstance(param, click.Option):
                continue
            for flag, help_text in (("--json", JSON_HELP), ("--quiet", QUIET_HELP)):
                if flag in param.opts and (path, flag) not in OWN_HELP:
                    seen += 1
                    assert param.help == help_text, (path, flag, param.help)
    assert seen >= 40
