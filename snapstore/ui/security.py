"""The UI's guards, as one ASGI middleware in front of every route.

The credential is built so that it is useless to any other port, process or user
(docs/reliability.md, "The UI's credential"):

* **Peer.** Served on loopback (the default), a request is answered only when the socket at the
  other end of its connection belongs to the user who started the UI (``/proc/net/tcp``, see
  :mod:`snapstore.ui.peer`): another local user who got hold of a cookie or a link is refused
  before anything else is looked at.
* **Host.** The ``Host`` header must name the address served (by default a random
  ``127.x.y.z``, so the browser's cookie for it goes to no other local server; ``localhost`` and
  ``[::1]`` too when ``127.0.0.1`` or ``::1`` is served): a page of another site whose name was
  made to resolve to loopback (DNS rebinding) sends its own name and is refused.
* **Login.** ``snapstore ui`` prints a URL with a one-time login token (and hands the browser
  another one, that also expires in seconds, through a private file).  A GET carrying a live
  token spends it and gets a session cookie (a fresh secret that only this server knows,
  HttpOnly, SameSite=Strict) and a page that moves on to the same URL without the
  token; every other request must carry a session cookie.  Anything else gets 403.
* **Methods.** Only GET, HEAD and POST; a POST must carry an ``Origin`` equal to the origin
  served (no cross-site or cross-port form posts), and a request that the browser says another
  site or port started (``Sec-Fetch-Site``) is refused.  Every route that changes something is
  POST-only.
* **Headers.** Every response forbids framing, sniffing, referrers to other sites, caching, and
  any script or style that is not one of the UI's own files (Content-Security-Policy); a route
  may set a stricter policy or its own caching (static files, images), never drop one.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
#: ``(client, server)`` addresses of a connection -> whether its peer may be served.
AdmitPeer = Callable[[Any, Any], bool]
Refusal = tuple[int, list[tuple[bytes, bytes]], bytes]

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
#: What ``Sec-Fetch-Site`` may say of a request other than a login: the page itself, or the user
#: (address bar, bookmark, reload).  "same-site" is a page of another port of the same address.
FETCH_SITES = (b"same-origin", b"none")


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
    """The ``Host`` header values accepted for a server bound to ``host``:``port``.

    The loopback names (``127.0.0.1``, ``localhost``, ``[::1]``) are accepted only when they
    reach the server, that is when it listens on ``127.0.0.1``, ``::1`` or every address; a
    private ``127.x.y.z`` is accepted under its own name only.
    """
    bare = host.strip("[]").lower()
    names: set[str] = set()
    if bare in ("0.0.0.0", "::"):
        # Every address of the machine is served: accept its names (not any name at all).
        names |= {"127.0.0.1", "localhost", "[::1]", socket.gethostname(), socket.getfqdn()}
    elif bare in ("127.0.0.1", "::1", "localhost"):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    names.add(f"[{bare}]" if ":" in bare else bare)
    out = {f"{n.lower()}:{port}" for n in names}
    if port == 80:
        out |= {n.lower() for n in names}
    return frozenset(out)


def _plain(status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None) -> Refusal:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    return status, headers + (extra or []), body


class Credentials:
    """The UI's secrets: one-time login tokens, and the sessions they open.

    A login token works once (and, given a lifetime, only that long).  Redeeming it opens a
    session: a fresh secret that only this server and the browser's cookie hold (the Guard
    accepts it only under the server's own ``Host``).  Thread-safe: tokens are added from the
    command's thread and redeemed in the server's.
    """

    #: Sessions kept (the oldest is forgotten first): one per login, and logins are few.
    MAX_SESSIONS = 64

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._logins: dict[str, tuple[float | None, Callable[[], None] | None]] = {}
        self._sessions: dict[str, None] = {}  # insertion-ordered: the oldest is forgotten first

    def add_login(self, token: str | None = None, *, ttl: float | None = None, on_use: Callable[[], None] | None = None) -> str:
        """A new login token (``token`` or a random one): valid once, for ``ttl`` seconds when given.

        ``on_use`` is called (in the server's thread) after the token has been spent.
        """
        token = token or new_token()
        deadline = None if ttl is None else self._clock() + ttl
        with self._lock:
            self._logins[token] = (deadline, on_use)
        return token

    def redeem(self, token: str) -> str | None:
        """Spend the login ``token``: a new session secret, or None (unknown, spent or expired)."""
        now = self._clock()
        with self._lock:
            for known, (deadline, _) in list(self._logins.items()):
                if deadline is not None and now > deadline:
                    del self._logins[known]
            found = next((k for k in self._logins if hmac.compare_digest(k.encode(), token.encode())), None)
            if found is None:
                return None
            _, on_use = self._logins.pop(found)
            secret = new_token()
            self._sessions[secret] = None
            while len(self._sessions) > self.MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
        if on_use is not None:
            on_use()
        return secret

    def session_valid(self, secret: str) -> bool:
        """Whether ``secret`` is one of the sessions opened here."""
        if not secret:
            return False
        with self._lock:
            return any(hmac.compare_digest(k.encode(), secret.encode()) for k in self._sessions)


class Guard:
    """Wraps the UI application: refuses what the module docstring says, adds the headers."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        hosts: frozenset[str],
        port: int,
        credentials: Credentials | None = None,
        token: str | None = None,
        peer: AdmitPeer | None = None,
    ):
        self.app = app
        self.credentials = credentials or Credentials()
        if token:
            self.credentials.add_login(token)  # a one-time login token
        self.hosts = hosts
        self.peer = peer
        # Cookies ignore ports: the name keeps two UIs on one address from overwriting each other.
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
                # a response's own caching and policy stand (static files, images); the rest is added
                own = list(message.get("headers", []))
                names = {bytes(k).lower() for k, _ in own}
                message["headers"] = own + [(k, v) for k, v in HEADERS if k not in names]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def check(self, scope: Scope) -> Refusal | None:
        """The refusal for this request (status, headers, body), or None to let it through."""
        if self.peer is not None and not self.peer(scope.get("client"), scope.get("server")):
            return _plain(403, "refused: this page is served only to the user who started 'snapstore ui'")
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
        pairs = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [v for k, v in pairs if k == "token"]
        if given and method == "GET":
            # Any page may send the user to a login link (the launch file is another site):
            # the token itself is the proof, and it is spent here.
            return self._login(given[-1], scope.get("path", "/"), pairs)
        if headers.get(b"sec-fetch-site", b"none") not in FETCH_SITES:
            return _plain(403, "refused: another site or port asked for this page (Sec-Fetch-Site)")
        if not self.credentials.session_valid(self._cookie(headers)):
            return _plain(403, "refused: open the login URL that 'snapstore ui' printed")
        return None

    def _cookie(self, headers: dict[bytes, bytes]) -> str:
        for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
            name, _, value = part.strip().partition("=")
            if name == self.cookie:
                return value
        return ""

    def _login(self, token: str, path: str, pairs: list[tuple[str, str]]) -> Refusal:
        secret = self.credentials.redeem(token)
        if secret is None:
            return _plain(
                403,
                "refused: this login link is wrong, used already or expired (each works once): "
                "open the newest one that 'snapstore ui' printed",
            )
        if not path.startswith("/") or path[1:2] in ("/", "\\"):
            path = "/"  # "//host" would leave for another site
        rest = urlencode([(k, v) for k, v in pairs if k != "token"])
        target = path + ("?" + rest if rest else "")
        # A page, not a redirect: a redirect chain that a link elsewhere started would count as
        # cross-site and the SameSite=Strict cookie would not be sent on its last hop.
        safe = html.escape(target, quote=True)
        body = (
            f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={safe}">'
            f'<title>snapstore</title><p><a href="{safe}">Continue to the checkpoint browser</a></p>'
        ).encode()
        # No Secure (the page is http) and so no __Host- prefix; host-only (no Domain), whole site.
        cookie = f"{self.cookie}={secret}; HttpOnly; SameSite=Strict; Path=/"
        return 200, [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
            (b"set-cookie", cookie.encode()),
        ], body
