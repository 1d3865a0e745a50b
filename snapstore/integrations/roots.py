"""Where an agent's tools may create a store (issue 23: a safe project root).

MCP hosts start stdio servers in odd places: Cline in ``/``, others in ``$HOME``.  A write tool
there would create a store in that directory and snapshot all of it (a token file under
``.config`` included).  So the server's root comes from what names the project (``--root``/``-C``,
an agent's project variable), and a store is never *created* at ``/``, at ``$HOME``, or in a
directory holding files of other users, unless explicitly allowed; an existing store is used
wherever it is (it was made on purpose).
"""

from __future__ import annotations

import os
from typing import Any

#: Agents' project variables, in the order they are trusted (Claude Code, Gemini CLI).
PROJECT_VARIABLES = ("CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")


def project_root(given: str | None, cwd: str) -> str:
    """``given`` (``--root``/``-C``), else an agent's project variable, else ``cwd``."""
    if given:
        return os.path.abspath(given)
    for name in PROJECT_VARIABLES:
        value = os.environ.get(name)
        if value and os.path.isabs(value) and os.path.isdir(value):
            return value
    return os.path.abspath(cwd)


def why_not_create(root: str) -> str | None:
    """Why a store must not be created at ``root`` without being asked, or None."""
    real = os.path.realpath(root)
    if real == os.path.realpath(os.sep):
        return "it is the file system's root"
    home = os.path.expanduser("~")
    if home and real == os.path.realpath(home):
        return "it is the home directory"
    me = os.geteuid()
    try:
        with os.scandir(real) as entries:
            for i, entry in enumerate(entries):
                if i >= 1000:
                    break  # a project of that size is rare; the owners seen so far decide
                try:
                    owner = entry.stat(follow_symlinks=False).st_uid
                except OSError:
                    continue
                if owner != me:
                    return f"it holds files of another user ({entry.name})"
    except OSError as exc:
        return f"it cannot be listed ({exc.strerror})"
    return None


def from_client(ctx: Any) -> str | None:
    """The first ``file://`` workspace root the MCP client declares (``roots/list``), when it
    declares the roots capability and that root is a directory here; else None.

    Called from a tool's worker thread: the request goes out on the server's event loop.  The
    capability is deprecated in the protocol's 2026-07-28 revision; clients that still send it
    (most editors) name their workspace with it, others are simply not asked.
    """
    import warnings
    from urllib.parse import unquote, urlparse

    import anyio.from_thread

    session = ctx.session
    caps = session.client_capabilities
    if caps is None or getattr(caps, "roots", None) is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = anyio.from_thread.run(session.list_roots)
    except Exception:  # noqa: BLE001 - a client that cannot answer leaves the root as it was
        return None
    for root in result.roots:
        uri = urlparse(str(root.uri))
        path = unquote(uri.path)
        if uri.scheme == "file" and os.path.isabs(path) and os.path.isdir(path):
            return path
    return None
