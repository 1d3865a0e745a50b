"""The UI's guards, as one ASGI middleware in front of every route.

* **Host.** The ``Host`` header must name the address served (``127.0.0.1``, ``localhost`` or
  ``[::1]`` with the port, or the ``--host`` given): a page of another site whose name was made to
  resolve to 127.0.0.1 (DNS rebinding) sends its own name and is refused.
* **Token.** ``snapstore ui`` prints a URL with a random token.  A GET carrying the right token
  gets a cookie (HttpOnly, SameSite=Strict, named after the port since cookies ignore ports) and
  a page that moves on to the same URL without the token; every other request must carry the
  cookie.  Anything else gets 403.
* **Methods.** Only GET, HEAD and POST; a POST must carry an ``Origin`` equal to the origin
  served (no cross-site form posts).  Every route that changes something is POST-only.
* **Headers.** Every response forbids framing, sniffing, referrers to other sites, caching, and
  any script or style that is not one of the UI's own files (Content-Security-Policy).
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import secrets
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    # Not "no-referrer": with it a browser sends "Origin: null" on the page's own form posts.
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` header values accepted for a server bound to ``host``:``port``."""
    names = {"127.0.0.1", "localhost", "[::1]"}
    bare = host.strip("[]")
    if bare in ("0.0.0.0", "::"):
        # Every address of the machine is served: accept its names (not any name at all).
        names |= {socket.gethostname(), socket.getfqdn()}
    elif ":" in bare:
        names.add(f"[{bare}]")
    else:
        names.add(bare)
    out = {f"{n.lower()}:{port}" for n in names}
    if port == 80:
        out |= {n.lower() for n in names}
    return frozenset(out)


def _plain(status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    return status, headers + (extra or []), body


class Guard:
    """Wraps the UI application: refuses what the module docstring says, adds the headers."""

    def __init__(self, app: ASGIApp, *, token: str, hosts: frozenset[str], port: int):
        self.app = app
        self.token = token
        self.hosts = hosts
        self.cookie = f"snapstore_ui_{port}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets: closing without accepting refuses them
        refusal = self.check(scope)
        if refusal is not None:
            status, headers, body = refusal
            await send({"type": "http.response.start", "status": status, "headers": headers + HEADERS})
            await send({"type": "http.response.body", "body": body})
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def check(self, scope: Scope) -> tuple[int, list[tuple[bytes, bytes]], bytes] | None:
        """The refusal for this request (status, headers, body), or None to let it through."""
        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.lower(), value)
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if host not in self.hosts:
            return _plain(403, "refused: this page is served only under its own address (Host header)")
        method = scope.get("method", "")
        if method not in ("GET", "HEAD", "POST"):
            return _plain(405, "method not allowed", [(b"allow", b"GET, HEAD, POST")])
        if method == "POST":
            origin = headers.get(b"origin", b"").decode("latin-1").lower()
            if origin != f"http://{host}":
                return _plain(403, "refused: a change must come from this page itself (Origin header)")
        query = scope.get("query_string", b"").decode("latin-1")
        pairs = parse_qsl(query, keep_blank_values=True)
        given = [v for k, v in pairs if k == "token"]
        if given and method == "GET":
            if not hmac.compare_digest(given[-1].encode(), self.token.encode()):
                return _plain(403, "refused: wrong token (open the URL that 'snapstore ui' printed)")
            rest = urlencode([(k, v) for k, v in pairs if k != "token"])
            target = scope.get("path", "/") + ("?" + rest if rest else "")
            return self._welcome(target)
        if not hmac.compare_digest(self._cookie(headers).encode(), self.token.encode()):
            return _plain(403, "refused: open the URL with the token that 'snapstore ui' printed")
        return None

    def _cookie(self, headers: dict[bytes, bytes]) -> str:
        for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie:
                return value
        return ""

    def _welcome(self, target: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        # A page, not a redirect: a redirect chain that a link elsewhere started would count as
        # cross-site and the SameSite=Strict cookie would not be sent on its last hop.
        safe = html.escape(target, quote=True)
        body = (
            f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={safe}">'
            f'<title>snapstore</title><p><a href="{safe}">Continue to the checkpoint browser</a></p>'
        ).encode()
        cookie = f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/"
        return 200, [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"set-cookie", cookie.encode()),
        ], body
