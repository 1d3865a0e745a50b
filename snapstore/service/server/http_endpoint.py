"""The service's HTTP hook endpoint off its command loop (see :mod:`snapstore.service.http_hooks`
for what is served and to whom).

Loopback is shared by every local user, and a peer can send a request as slowly as it likes.  So
the endpoint lives in threads of its own: one accepts, and checks the connecting socket's owner
before reading a byte (another user's connection is answered 403 and closed unread); one per
connection of the service's own user reads the request under a total deadline
(:data:`REQUEST_DEADLINE`, however the bytes trickle), at most :data:`MAX_CONNECTIONS` at once.
Only a complete, authorised event reaches the service's loop, as a job through a queue and a
wake-up pipe in its ``select``: the loop runs the hook (commands run one at a time there) and the
connection's thread writes the answer.  The loop never reads HTTP, so no peer can stall the
commands of the Unix socket or the owner's other events.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from snapstore.platform import files
from snapstore.service import http_hooks

log = logging.getLogger("snapstore.service")

#: Seconds a connection has to deliver its whole request (Claude Code sends it at once).
REQUEST_DEADLINE = 5.0
#: Seconds a complete request waits for the service's loop to run it (a long command may be
#: running there); then it is answered 503 and not run.
RUN_WAIT = 60.0
#: Connections of the owner read at once; more are answered 503 unread.
MAX_CONNECTIONS = 16


class _DeadlineReader(io.RawIOBase):
    """A socket's bytes, until a point in time: each read waits at most what is left."""

    def __init__(self, conn: socket.socket, deadline: float):
        self._conn, self._deadline = conn, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took too long to arrive")
        self._conn.settimeout(left)
        return self._conn.recv_into(buffer)


class Job:
    """One authorised hook event, waiting for the service's loop to run it."""

    def __init__(self, agent: str, body: str):
        self.agent, self.body = agent, body
        self.answer: str | None = None
        self.done = threading.Event()
        self.abandoned = False  # (its connection stopped waiting: not run)


class Endpoint:
    """Accept and read HTTP hook requests in threads; hand the service complete events."""

    def __init__(self, sock: socket.socket, port: int, token: str, agents: tuple[str, ...]):
        self.sock, self.port, self.token, self.agents = sock, port, token, agents
        self.jobs: queue.Queue[Job] = queue.Queue()
        self.wake_r, self._wake_w = files.nonblocking_pipe()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._stop = False
        self._thread = threading.Thread(target=self._accept_loop, name="http-accept", daemon=True)

    def start(self) -> None:
        self.sock.setblocking(False)
        self._thread.start()

    def close(self) -> None:
        """Stop accepting; the jobs not run are answered 503."""
        self._stop = True
        self._thread.join(2.0)
        self.sock.close()
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            job.done.set()
        os.close(self.wake_r)
        os.close(self._wake_w)

    def run_pending(self, run_hook: Callable[[str, str], str]) -> int:
        """Run the queued events (on the service's loop); how many ran."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_r, 4096)
        ran = 0
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return ran
            if job.abandoned:
                continue
            try:
                job.answer = run_hook(job.agent, job.body)
            finally:
                job.done.set()
            ran += 1

    # -- threads ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        closing: dict[socket.socket, float] = {}  # refused connections, closed once drained
        while not self._stop:
            try:
                ready, _, _ = select.select([self.sock, *closing], [], [], 0.25)
            except (OSError, ValueError):
                if self._stop:
                    return
                ready = []
            for conn in [c for c in closing if c in ready or closing[c] < time.monotonic()]:
                _drain_or_close(conn, closing)
            if self.sock in ready:
                self._accept(closing)
        for conn in closing:
            conn.close()

    def _accept(self, closing: dict[socket.socket, float]) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            time.sleep(0.05)  # (out of descriptors, say: try again)
            return
        uid = http_hooks.peer_uid(conn)
        if uid != os.getuid():  # before reading anything: another user's, or unknown
            log.warning("http hooks: refused a connection of uid %s", uid)
            _refuse(conn, 403, '{"error": "another user\'s connection"}', closing)
            return
        if not self._slots.acquire(blocking=False):
            _refuse(conn, 503, '{"error": "busy"}', closing)
            return
        threading.Thread(target=self._serve, args=(conn,), name="http-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._serve_one(conn)
        except OSError:
            pass  # (the peer went away)
        finally:
            self._slots.release()

    def _serve_one(self, conn: socket.socket) -> None:
        handler = http_hooks.Handler.for_connection(
            conn, io.BufferedReader(_DeadlineReader(conn, time.monotonic() + REQUEST_DEADLINE)),
            self.port, self.token, self.agents,
        )
        handler.handle_one_request()
        if handler.event is None:  # refused, or incomplete: already answered (or timed out)
            handler.finish_answer()
            return
        job = Job(*handler.event)
        self.jobs.put(job)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if not job.done.wait(RUN_WAIT):
            job.abandoned = True
        conn.settimeout(REQUEST_DEADLINE)
        if job.answer is None:
            handler.answer(503, {"error": "the service did not run the event"})
        else:
            handler.answer(200, job.answer or "{}")
        handler.finish_answer()


#: Refused connections drained (their bytes discarded, unread) before they are closed, at most.
MAX_CLOSING = 64
#: Seconds a refused connection may stay open for the peer to read the answer.
CLOSING_GRACE = 1.0


def _refuse(conn: socket.socket, status: int, body: str, closing: dict[socket.socket, float]) -> None:
    """Answer without reading the request, then close once the peer has it: a socket closed with
    unread bytes is reset, and a reset can destroy the answer before the peer reads it."""
    data = body.encode()
    head = f"HTTP/1.0 {status} {'Forbidden' if status == 403 else 'Service Unavailable'}\r\n"
    head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    try:
        conn.setblocking(False)
        conn.send(head.encode() + data)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        conn.close()
        return
    if len(closing) >= MAX_CLOSING:
        conn.close()
        return
    closing[conn] = time.monotonic() + CLOSING_GRACE


def _drain_or_close(conn: socket.socket, closing: dict[socket.socket, float]) -> None:
    """Discard what a refused peer sent; close when it closed, or its grace is over."""
    try:
        if conn.recv(1 << 16) and closing[conn] >= time.monotonic():
            return
    except BlockingIOError:
        if closing[conn] >= time.monotonic():
            return
    except OSError:
        pass
    del closing[conn]
    conn.close()
