"""The frames of one running command to its client, with a heartbeat.

A client waits at most :data:`~snapstore.service.protocol.SILENCE` seconds for the next frame
(a service can be stopped, wedged or starved, and a client must never hang for good); a command
may rightly print nothing for minutes (a verify of a big store).  So while a command runs, a
thread of its own sends an empty ``h`` frame whenever nothing else went out for
:data:`~snapstore.service.protocol.HEARTBEAT` seconds.  The frames of both threads go through one
lock, so they never interleave.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from snapstore.service import protocol


class Beating:
    """``with Beating(sock) as frames: frames.send(channel, payload)``: the heartbeat runs in
    the ``with`` block."""

    def __init__(self, sock: Any):
        self._sock = sock
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def send(self, channel: bytes, payload: bytes) -> None:
        with self._lock:
            protocol.send_frame(self._sock, channel, payload)
            self._last = time.monotonic()

    def __enter__(self) -> Beating:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(protocol.HEARTBEAT * 2)

    def _beat(self) -> None:
        while not self._done.wait(protocol.HEARTBEAT / 4):
            if time.monotonic() - self._last < protocol.HEARTBEAT:
                continue
            if not self._lock.acquire(timeout=protocol.HEARTBEAT):
                continue  # (the command's own frame is being sent: that is a sign of life too)
            try:
                protocol.send_frame(self._sock, b"h", b"")
                self._last = time.monotonic()
            except OSError:
                return  # the client went away: the command's own frames will say so
            finally:
                self._lock.release()
