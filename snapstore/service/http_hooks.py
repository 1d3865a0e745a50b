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
is at most :data:`MAX_BODY` bytes; and the connecting socket belongs to the service's own user
(looked up in ``/proc/net/tcp`` before a byte is read: service.server.http_endpoint; a socket whose
owner cannot be found is refused).  Anything else gets a status and no work.

A port is not a credential: whoever binds it while the service is down (an idle exit, a reboot)
receives what Claude Code sends there (the token and the whole ``tool_input``) and may answer it
(a PreToolUse "allow").  Claude Code reads its hooks once, at the session's start, so a port
cannot be changed under a running session.  Hence (docs/reliability.md, "other local user"):
``--http`` is refused while another user (not root) runs a process here (:func:`refusal`), and
the service refuses to listen then too; a service answering http hooks does not exit when idle
(holding the port is what keeps it ours); a port it cannot bind is reported, never silently
skipped; and the command hook of ``UserPromptSubmit``, which runs before every turn, blocks the
prompt while the configured port is not held by the store's service (:func:`prompt_guard`), so
no tool event of that turn is sent to a port someone else may hold.
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
from typing import Any

from snapstore.platform import processes, tcp

CONFIG_NAME = "service-http.json"
PATH_PREFIX = "/snapstore/hook/"
MAX_BODY = 16 << 20


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
    """The store's endpoint, made on first use: a free loopback port and a fresh token; made
    again when another process than the store's service holds the port (the token too: it went
    to that process).

    Raises UsageError where http hooks are not safe (:func:`refusal`)."""
    from snapstore.errors import UsageError
    from snapstore.tree.atomic import write_file_atomic

    why = refusal()
    if why is not None:
        raise UsageError(f"--http is refused: {why} (the command hooks, through the service and the native client, are as fast)")
    found = load(store_dir)
    if found is not None and not _taken(store_dir, found[0]):
        return found
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    token = secrets.token_urlsafe(32)
    write_file_atomic(os.path.join(store_dir, CONFIG_NAME), json.dumps({"port": port, "token": token}).encode(), 0o600)
    return port, token


def _taken(store_dir: str, port: int) -> bool:
    """Whether a process other than the store's service listens on ``port``."""
    if port_owner(port) is None:
        return False
    from snapstore.service import daemon

    served = (daemon.status(store_dir) or {}).get("http") or {}
    return not (served.get("listening") and served.get("port") == port)


def url(port: int, agent: str) -> str:
    return f"http://127.0.0.1:{port}{PATH_PREFIX}{agent}"


#: The port each store's service of this process listens on (what :func:`guard` trusts without
#: asking: a hook run by the service itself cannot ask it).
SERVING: dict[str, int] = {}
#: Why each store's service of this process does not answer its http hooks.
NOT_SERVING: dict[str, str] = {}


def listen(store_dir: str) -> tuple[socket.socket, int, str] | str | None:
    """The listening socket, port and token; None when no endpoint is configured; else why the
    service does not listen (logged, shown by ``serve --status``, and the prompt hook refuses
    the turn: see the module's doc)."""
    found = load(store_dir)
    if found is None:
        return None
    port, token = found
    why = refusal()
    if why is not None:
        return f"http hooks refused: {why}"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(16)
    except OSError as exc:
        sock.close()
        owner = port_owner(port)
        held = f" (held by uid {owner})" if owner is not None else ""
        return f"cannot listen on 127.0.0.1:{port}{held}: {exc.strerror}"
    return sock, port, token


def refusal() -> str | None:
    """Why http hooks must not be used on this machine now, or None."""
    import pwd

    if not tcp.tells_owners():
        return "this system does not tell which local user holds a TCP connection, so the hook port's callers cannot be checked"
    others = processes.other_users()
    if others is None:
        return "this system hides other users' processes, so it cannot be told whether another user could take the hook port"
    if not others:
        return None
    names = []
    for uid in others[:3]:
        try:
            names.append(f"{pwd.getpwuid(uid).pw_name} ({uid})")
        except KeyError:
            names.append(str(uid))
    more = f" and {len(others) - 3} more" if len(others) > 3 else ""
    return (f"other local users run processes here ({', '.join(names)}{more}); one of them could take the hook port "
            "while the service is down and receive your tool events")


def port_owner(port: int) -> int | None:
    """The uid of the socket listening on 127.0.0.1 (or any address) at ``port``, if any."""
    return tcp.listener_uid(port)


def guard(store_dir: str) -> str | None:
    """None when the store has no http hooks or its running service answers them; else why the
    agent must not send tool events to their port now."""
    found = load(store_dir)
    if found is None:
        return None
    port, real = found[0], os.path.realpath(store_dir)
    if real in SERVING or real in NOT_SERVING:  # (run by the service itself: it cannot ask itself)
        if SERVING.get(real) == port:
            return None
        why = NOT_SERVING.get(real) or "its service listens on another port"
    else:
        from snapstore.service import daemon

        info = daemon.status(store_dir)
        served = (info or {}).get("http") or {}
        if served.get("port") == port and served.get("listening"):
            return None
        why = "the store's service is not running" if info is None else str(served.get("refused") or "its service does not answer them")
    return (f"snapstore's http hooks (127.0.0.1:{port}) are not answered by this project's service: {why}. Tool events "
            "sent to that port could reach another local user, so this prompt was stopped: run 'snapstore integrate "
            "claude-code' (command hooks) or 'snapstore integrate claude-code --http' again (a new port), and restart Claude Code")


def prompt_guard(event_name: str, store_dir: str | None) -> str:
    """What the ``UserPromptSubmit`` command hook answers: a block decision while the http hooks'
    port is not held by the store's service (:func:`guard`), else nothing."""
    if event_name != "UserPromptSubmit" or store_dir is None:
        return ""
    why = guard(store_dir)
    return "" if why is None else json.dumps({"decision": "block", "reason": why})


def peer_uid(conn: socket.socket) -> int | None:
    """The uid owning the other end of a loopback TCP connection (None when unknown)."""
    return tcp.connection_uid(conn)


class Handler(http.server.BaseHTTPRequestHandler):
    """One request, parsed by the standard library's HTTP handler; a complete, authorised event
    is left in :attr:`event` for the service to run (service.server.http_endpoint)."""

    protocol_version = "HTTP/1.0"
    #: ``(agent, body)`` of a complete, authorised request.
    event: tuple[str, str] | None = None
    port: int
    token: str
    agents: tuple[str, ...]

    @classmethod
    def for_connection(cls, conn: socket.socket, rfile: Any, port: int, token: str, agents: tuple[str, ...]) -> Handler:
        handler = cls.__new__(cls)
        handler.connection = handler.request = conn
        handler.rfile = rfile
        handler.wfile = conn.makefile("wb")
        handler.client_address = ("127.0.0.1", 0)
        handler.close_connection = True
        handler.port, handler.token, handler.agents = port, token, agents
        return handler

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def do_GET(self) -> None:
        self.answer(405, {"error": "POST a hook event"})

    def do_POST(self) -> None:
        refusal = self._refusal()
        if refusal is not None:
            self.answer(*refusal)
            return
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length)
        if len(data) != length:
            self.answer(400, {"error": "the body ended early"})
            return
        self.event = (self.path[len(PATH_PREFIX):], data.decode("utf-8", "surrogateescape"))

    def _refusal(self) -> tuple[int, Any] | None:
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

    def answer(self, status: int, body: Any) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        with contextlib.suppress(OSError):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    def finish_answer(self) -> None:
        with contextlib.suppress(OSError):
            self.wfile.flush()
