"""The frames of one running command to its client, with a heartbeat.

A client waits at most :data:`~snapstore.service.protocol.SILENCE` seconds for the next frame
(a service can be stopped, wedged or starved, and a client must never hang for good); a command
may rightly print nothing for minutes (a verify of a big store).  So while a command runs, a
thread sends an empty ``h`` frame whenever nothing else went out for
:data:`~snapstore.service.protocol.HEARTBEAT` seconds.  The frames of both threads go through one
lock, so they never interleave, and none goes out once the command's block is left.

The thread is the process's one :class:`_Heart`, not one a command: starting a thread and
joining it cost every request a hand-off between threads.  It looks at the command running
every quarter of a heartbeat, and between commands it sleeps without a timeout once none came
for :data:`LINGER` seconds (then the next command wakes it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from snapstore.service import protocol

#: Seconds the heart keeps looking after a command ended (requests come in bursts) before it
#: sleeps until the next one.
LINGER = 10.0


class Beating:
    """``with Beating(sock) as frames: frames.send(channel, payload)``: the heartbeat runs in
    the ``with`` block."""

    def __init__(self, sock: Any):
        self._sock = sock
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._open = False

    def send(self, channel: bytes, payload: bytes) -> None:
        with self._lock:
            protocol.send_frame(self._sock, channel, payload)
            self._last = time.monotonic()

    def __enter__(self) -> Beating:
        self._open = True
        _HEART.attach(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:  # (a beat being sent ends first; none is sent after)
            self._open = False
        _HEART.detach(self)

    def beat(self) -> bool:
        """Send a heartbeat if nothing went out for a heartbeat's time; False when the client
        went away or the block was left."""
        if time.monotonic() - self._last < protocol.HEARTBEAT:
            return True
        if not self._lock.acquire(timeout=protocol.HEARTBEAT):
            return True  # (the command's own frame is being sent: that is a sign of life too)
        try:
            if not self._open:
                return False
            protocol.send_frame(self._sock, b"h", b"")
            self._last = time.monotonic()
            return True
        except OSError:
            return False  # the client went away: the command's own frames will say so
        finally:
            self._lock.release()


class _Heart:
    """The one thread that sends the heartbeats of the command running (started at the first)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._current: Beating | None = None
        self._thread: threading.Thread | None = None
        self._sleeping = False
        self._ended = 0.0  # when the last command ended

    def attach(self, beating: Beating) -> None:
        with self._cond:
            self._current = beating
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
                self._thread.start()
            elif self._sleeping:
                self._cond.notify()

    def detach(self, beating: Beating) -> None:
        with self._cond:
            if self._current is beating:
                self._current = None
                self._ended = time.monotonic()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._current is None and time.monotonic() - self._ended > LINGER:
                    self._sleeping = True
                    self._cond.wait()
                    self._sleeping = False
                else:
                    self._cond.wait(protocol.HEARTBEAT / 4)
                current = self._current
            if current is not None and not current.beat():
                self.detach(current)


_HEART = _Heart()
