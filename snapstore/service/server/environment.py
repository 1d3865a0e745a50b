"""A request's directory and forwarded environment, switched in for its command and back after.

The service runs every client's command in its one process, so the client's working directory and the
variables it forwards (``protocol.FORWARDED_ENV_PREFIXES``: ``SNAPSTORE_*``, ``TZ``, the agents'
project variables, ``COLUMNS``) are set for the command and the service's own put back after it.
This is on every request's path: the names alone are scanned, and ``tzset`` runs only when
``TZ`` changes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, MutableMapping

from snapstore.service import protocol

_PREFIXES = protocol.FORWARDED_ENV_PREFIXES


def forwarded(environ: MutableMapping[str, str]) -> dict[str, str]:
    """The forwarded variables set in ``environ`` now."""
    return {k: environ[k] for k in [k for k in environ if k.startswith(_PREFIXES)]}


@contextlib.contextmanager
def client_context(cwd: str, env: dict[str, str]) -> Iterator[None]:
    """Run the block in ``cwd`` with the forwarded variables of ``env`` (any other name in
    ``env`` is ignored) in place of this process's own, which are back after it, whatever the
    block set meanwhile."""
    here = os.getcwd()
    environ = os.environ
    saved = forwarded(environ)
    wanted = {k: str(v) for k, v in env.items() if k.startswith(_PREFIXES)}
    try:  # (a value the environment refuses, a NUL in it, still leaves the service's own back)
        for key in saved:
            del environ[key]
        environ.update(wanted)
        if wanted.get("TZ") != saved.get("TZ"):
            time.tzset()
        os.chdir(cwd)
        yield
    finally:
        os.chdir(here)
        tz = environ.get("TZ")
        for key in forwarded(environ):
            del environ[key]
        environ.update(saved)
        if tz != saved.get("TZ"):
            time.tzset()
