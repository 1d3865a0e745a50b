"""A request's directory and forwarded environment, switched in for its command and back after.

The service runs each command in its own process, so the client's working directory and the
variables it forwards (``protocol.FORWARDED_ENV_PREFIXES``: ``SNAPSTORE_*``, ``TZ``, the agents'
project variables, ``COLUMNS``) are set for the command and the service's own put back after it.
This is on every request's path: the forwarded variables are found in the environment's own
store of encoded names (``os.environ`` decodes every name it iterates: a few dozen calls a
request for nothing), and ``tzset`` runs only when ``TZ`` changes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, MutableMapping
from typing import Any

from snapstore.service import protocol

_PREFIXES = protocol.FORWARDED_ENV_PREFIXES
_ENCODED_PREFIXES = tuple(os.fsencode(p) for p in _PREFIXES)


def forwarded(environ: MutableMapping[str, str]) -> dict[str, str]:
    """The forwarded variables set in ``environ`` now (``os.environ``: read from its encoded
    store where it keeps one, without decoding the other names)."""
    data: Any = getattr(environ, "_data", None)
    if os.name == "posix" and type(data) is dict:
        decode: Any = getattr(environ, "decodekey")  # noqa: B009 - os._Environ's own decoders
        value: Any = getattr(environ, "decodevalue")  # noqa: B009
        return {decode(k): value(v) for k, v in data.items() if k.startswith(_ENCODED_PREFIXES)}
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
    for key in saved:
        del environ[key]
    environ.update(wanted)
    if wanted.get("TZ") != saved.get("TZ"):
        time.tzset()
    try:
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
