"""Options shared by the commands that talk to a remote (``--retry-budget``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def _set_budget(_ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    from snapstore.remote.retry import set_budget

    if value is None:  # (click calls back for an option not given too: an earlier run's in-process value goes)
        set_budget(None)
        return
    set_budget(value)  # (UsageError, exit 2, for a value that is not 0 to 600 seconds)


def retry_budget_option(f: F) -> F:
    """``--retry-budget SECONDS``: how long an outage of the remote is ridden out (retries with
    backoff) before the command fails with exit 13; wins over SNAPSTORE_RETRY_BUDGET and the
    store's ``remote.retry-budget`` (docs/remote.md, "Outages")."""
    return click.option(
        "--retry-budget", metavar="SECONDS", expose_value=False, callback=_set_budget,
        help="Retry transient failures of the remote for up to SECONDS (default 60; 0: no retries).",
    )(f)
