"""Opening the browser without putting a credential on any command line.

A process's command line is world-readable (``ps``, ``/proc/PID/cmdline``), so the browser is
not given the login URL: it is given a ``file://`` URL of a page in a private directory (0700,
under ``$XDG_RUNTIME_DIR`` or the temp directory; the page itself 0600) that moves on to the
login URL.  That URL's token works once and only for :data:`LAUNCH_TTL` seconds, and the page is
deleted as soon as it has been used, after that time, or when the UI stops, whichever is first.
"""

from __future__ import annotations

import html
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

#: Seconds the browser has to open the launch page (a cold start of a browser takes a few).
LAUNCH_TTL = 60.0


def _private_base() -> str:
    """``$XDG_RUNTIME_DIR`` when it is this user's private directory, else the temp directory."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime:
        try:
            st = os.stat(runtime)
        except OSError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077:
            return runtime
    return tempfile.gettempdir()


class LaunchPage:
    """A page, readable by this user only, that sends the browser to a login URL."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="snapstore-ui-", dir=_private_base()))  # mode 0700
        self.path = self.dir / "open.html"
        self._lock = threading.Lock()

    def write(self, url: str) -> None:
        """Write the page that moves on to ``url`` (created 0600, never through a planted name)."""
        safe = html.escape(url, quote=True)
        body = (
            f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={safe}">'
            f'<title>snapstore ui</title><p><a href="{safe}">Open the checkpoint browser</a></p>\n'
        ).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(body)

    @property
    def uri(self) -> str:
        """The ``file://`` URL to give the browser (it names the page, it is no credential)."""
        return self.path.as_uri()

    def remove(self) -> None:
        """Delete the page and its directory (again is fine)."""
        with self._lock:
            shutil.rmtree(self.dir, ignore_errors=True)


def open_when_ready(ready: threading.Event, page: LaunchPage) -> None:
    """Open the browser on ``page`` once the server answers (runs in a thread of its own)."""
    import webbrowser

    if ready.wait(30):
        webbrowser.open(page.uri)
