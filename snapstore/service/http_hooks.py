"""Agent hooks over HTTP: the service answers Claude Code's ``http`` hooks on loopback, so a
tool event costs no process start.

Claude Code POSTs the hook's JSON to a URL and reads the response body as a command hook's
stdout; a status code cannot block anything.  The service listens on ``127.0.0.1`` at the port
in the store's ``service-http.json`` (owner-only, 0600, with a random token), made by
``snapstore integrate claude-code --http``, which writes the URL and the token into the
project's unshared ``.claude/settings.local.json`` (0600).

Loopback is shared by every local user, so a request is served only when all of these hold: it
is ``POST /snapstore/hook/<agent>``; its ``Host`` is the service's own address (no DNS rebinding
from a web page); its ``Authorization`` carries the token (compared in constant time); its body
is at most :data:`MAX_BODY` bytes; and, where ``/proc/net/tcp`` tells, the connecting socket
belongs to the service's own user.  Anything else gets a status and no work.
"""

from __future__ import annotations

import contextlib
import hmac
import http.server
import json
import os
import secrets
import socket
import stat
from collections.abc import Callable
from typing import Any

CONFIG_NAME = "service-http.json"
PATH_PREFIX = "/snapstore/hook/"
MAX_BODY = 16 << 20
#: Seconds a client has to send its request (the hook's own work is not bounded by this).
READ_TIMEOUT = 10.0


def load(store_dir: str) -> tuple[int, str] | None:
    """``(port, token)`` of the store's HTTP hook endpoint, or None when none is configured
    (or its file is not a 0600 regular file of this user: then it is not trusted)."""
    path = os.path.join(store_dir, CONFIG_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        try:
            doc = json.loads(f.read(4096))
        except ValueError:
            return None
    port, token = doc.get("port") if isinstance(doc, dict) else None, doc.get("token") if isinstance(doc, dict) else None
    if isinstance(port, int) and 0 < port < 65536 and isinstance(token, str) and len(token) >= 32:
        return port, token
    return None


def configure(store_dir: str) -> tuple[int, str]:
    """The store's endpoint, made on first use: a free loopback port and a fresh token."""
    from snapstore.tree.atomic import write_file_atomic

    found = load(store_dir)
    if found is not None:
        return found
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    token = secrets.token_urlsafe(32)
    write_file_atomic(os.path.join(store_dir, CONFIG_NAME), json.dumps({"port": port, "token": token}).encode(), 0o600)
    return port, token


def url(port: int, agent: str) -> str:
    return f"http://127.0.0.1:{port}{PATH_PREFIX}{agent}"


def listen(store_dir: str) -> tuple[socket.socket, int, str] | None:
    """The listening socket, port and token, or None (no endpoint configured, or its port is
    taken: then the hooks fail and the agent shows their errors; the command hooks go on)."""
    found = load(store_dir)
    if found is None:
        return None
    port, token = found
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(16)
    except OSError:
        sock.close()
        return None
    return sock, port, token


def peer_uid(conn: socket.socket) -> int | None:
    """The uid owning the other end of a loopback TCP connection (from ``/proc/net/tcp``)."""
    try:
        host, port = conn.getpeername()[:2]
        with open("/proc/net/tcp", encoding="ascii") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return None
    ip = socket.inet_aton(host)[::-1].hex().upper()
    local = f"{ip}:{port:04X}"
    for row in rows:
        fields = row.split()
        if len(fields) > 7 and fields[1] == local:
            return int(fields[7])
    return None


def serve_one(
    conn: socket.socket, port: int, token: str, run_hook: Callable[[str, str], str], agents: tuple[str, ...]
) -> bool:
    """Answer one connection for the hooks of ``agents``; True when a hook ran (what keeps the
    service alive)."""
    conn.settimeout(READ_TIMEOUT)
    uid = peer_uid(conn)
    handler = _Handler.__new__(_Handler)
    handler.setup_for(conn, port, token, run_hook, uid)
    handler.agents = agents
    handler.handle_one_request()
    with contextlib.suppress(OSError):
        handler.wfile.flush()
    return handler.ran


class _Handler(http.server.BaseHTTPRequestHandler):
    """One request, parsed by the standard library's HTTP handler."""

    protocol_version = "HTTP/1.0"

    def setup_for(self, conn: socket.socket, port: int, token: str, run_hook: Callable[[str, str], str], uid: int | None) -> None:
        self.connection = self.request = conn
        self.rfile = conn.makefile("rb", -1)
        self.wfile = conn.makefile("wb")
        self.client_address = ("127.0.0.1", 0)
        self.close_connection = True
        self.port, self.token, self.run_hook, self.uid = port, token, run_hook, uid
        self.ran = False
        self.agents: tuple[str, ...] = ()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def do_GET(self) -> None:
        self._answer(405, {"error": "POST a hook event"})

    def do_POST(self) -> None:
        refusal = self._refusal()
        if refusal is not None:
            self._answer(*refusal)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "surrogateescape")
        agent = self.path[len(PATH_PREFIX):]
        self.ran = True
        out = self.run_hook(agent, body)
        self._answer(200, out or "{}")

    def _refusal(self) -> tuple[int, Any] | None:
        if self.uid is not None and self.uid != os.getuid():
            return 403, {"error": "another user's connection"}
        if self.headers.get("Host") not in (f"127.0.0.1:{self.port}", f"localhost:{self.port}"):
            return 403, {"error": "wrong Host"}
        given = self.headers.get("Authorization") or ""
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return 401, {"error": "no or wrong credential"}
        if not self.path.startswith(PATH_PREFIX) or self.path[len(PATH_PREFIX):] not in self.agents:
            return 404, {"error": "no such hook"}
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            return 411, {"error": "Content-Length required"}
        if not 0 <= length <= MAX_BODY:
            return 413, {"error": f"at most {MAX_BODY} bytes"}
        return None

    def _answer(self, status: int, body: Any) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        with contextlib.suppress(OSError):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
