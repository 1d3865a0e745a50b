"""Running the UI: bind the socket, print the login URL, open a browser, serve with uvicorn.

The socket is bound here (not by uvicorn) so the address and port are known, and the Host and
peer checks set up, before anything is served.  By default it listens on a random 127.x.y.z
(:mod:`snapstore.ui.peer`) and ``--port 0`` takes a free port.  The login URL goes to the
terminal; the browser gets a private launch page instead (:mod:`snapstore.ui.launch`).
"""

from __future__ import annotations

import errno
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from snapstore.errors import UsageError
from snapstore.ui.launch import LAUNCH_TTL, LaunchPage, open_when_ready
from snapstore.ui.peer import PeerCheck, random_loopback, tables_readable, trusted_uids
from snapstore.ui.security import Credentials, is_loopback

if TYPE_CHECKING:
    from snapstore.store import Store

REQUIRED = ("starlette", "uvicorn", "pygments")


def missing_dependencies() -> list[str]:
    """The packages of the ``ui`` extra that are not installed."""
    from importlib.util import find_spec

    return [name for name in REQUIRED if find_spec(name) is None]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (UsageError when that is not possible)."""
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    # proto named: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto is TCP, and
    # accepted ones inherit it; with Nagle a small page waited for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def browser_available() -> bool:
    """Whether opening a browser makes sense: a desktop session or a ``$BROWSER``, not CI, not switched off."""
    if os.environ.get("CI") or os.environ.get("SNAPSTORE_NO_BROWSER"):
        return False
    if os.environ.get("BROWSER"):
        return True  # named by the user (Python's webbrowser runs it)
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def url_for(host: str, port: int, token: str) -> str:
    """The login URL for ``token``: a wildcard address is shown as 127.0.0.1."""
    bare = host.strip("[]")
    if bare in ("0.0.0.0", ""):
        bare = "127.0.0.1"
    elif bare == "::":
        bare = "::1"
    shown = f"[{bare}]" if ":" in bare else bare
    return f"http://{shown}:{port}/?token={token}"


class Running:
    """A UI being served: where, and its printed login URL (``url``, with its one-time ``token``)."""

    def __init__(self, host: str, port: int, credentials: Credentials, on_use: Callable[[], None] | None = None):
        self.host = host
        self.port = port
        self.credentials = credentials
        self.url = self.login_url(on_use=on_use)
        self.token = self.url.rsplit("=", 1)[1]

    def login_url(self, *, ttl: float | None = None, on_use: Callable[[], None] | None = None) -> str:
        """A new login URL: it works once (and for ``ttl`` seconds when given)."""
        return url_for(self.host, self.port, self.credentials.add_login(ttl=ttl, on_use=on_use))


def bind_ui(host: str | None, port: int, warn: Callable[[str], None]) -> tuple[socket.socket, str]:
    """The listening socket and its address: ``host``, or by default a random 127.x.y.z."""
    if host is not None:
        return bind(host, port), host
    for _ in range(5):
        address = random_loopback()
        try:
            return bind(address, port), address
        except UsageError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno == errno.EADDRINUSE:
                failure = exc
                continue  # that port of that address is taken: try another address
            # Some systems (macOS) answer on 127.0.0.1 only.
            warn(f"{exc.message}: listening on 127.0.0.1, whose cookies the browser also sends to other local servers")
            return bind("127.0.0.1", port), "127.0.0.1"
    raise failure


def peer_check(host: str, warn: Callable[[str], None]) -> PeerCheck | None:
    """Who may connect: the UI's own user (see :mod:`snapstore.ui.peer`), when the system says who connects."""
    if not tables_readable():
        warn("cannot tell which local user connects on this system: anyone holding the page's cookie can use it")
        return None
    return PeerCheck(trusted_uids(), remote_ok=not is_loopback(host))


def _prepare(
    store: Store,
    host: str | None,
    port: int,
    ready: threading.Event,
    *,
    warn: Callable[[str], None] = print,
    on_use: Callable[[], None] | None = None,
    remote: str | None = None,
) -> tuple[Any, socket.socket, Running]:
    import uvicorn

    from snapstore.ui.app import create_app

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            ready.set()

    sock, host = bind_ui(host, port, warn)
    port = sock.getsockname()[1]
    credentials = Credentials()
    app = create_app(
        store, host=host, port=port, credentials=credentials, peer=peer_check(host, warn),
        read_only=remote is not None, remote=remote,
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, server_header=False)
    return Server(config), sock, Running(host, port, credentials, on_use)


def serve(
    store: Store,
    *,
    host: str | None = None,
    port: int = 0,
    open_browser: bool = True,
    echo: Callable[[str], None] = print,
    warn: Callable[[str], None] = print,
    remote: str | None = None,
) -> None:
    """Serve the UI for ``store`` until interrupted (Ctrl-C); ``host`` None: a random 127.x.y.z.

    ``remote``: ``store`` is that remote's cache store (:meth:`snapstore.Store.remote_view`),
    served read-only under a banner naming it."""
    if host is not None and not is_loopback(host):
        warn(
            f"listening on {host}: other machines that reach this address can load the page "
            "(they still need the token, and the traffic is not encrypted)"
        )
    ready = threading.Event()

    def reprint() -> None:
        # Each link logs in once: offer the next one for another browser.
        try:
            echo(f"(that link has been used; to log in another browser, open {running.login_url(on_use=reprint)})")
        except OSError:
            pass  # nobody reads the output any more (a closed pipe): the login itself goes on

    server, sock, running = _prepare(store, host, port, ready, warn=warn, on_use=reprint, remote=remote)
    what = f"the remote {remote} (read-only)" if remote is not None else store.root
    echo(f"snapstore ui for {what}\nopen {running.url}\n(the link works once; Ctrl-C stops it)")
    page = _launch(running, ready, warn) if open_browser and browser_available() else None
    _exit_on_sigterm()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if page is not None:
            page.remove()


def _exit_on_sigterm() -> None:
    """Make SIGTERM unwind this process (so the launch page is removed) instead of killing it.

    uvicorn stops gracefully on SIGTERM and then raises the signal again for the handler that
    was there before it; with the default one the process would die before any ``finally``.
    """
    import signal

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def _launch(running: Running, ready: threading.Event, warn: Callable[[str], None]) -> LaunchPage | None:
    """Open a browser through a private launch page (see :mod:`snapstore.ui.launch`)."""
    page: LaunchPage | None = None
    try:
        page = LaunchPage()
        page.write(running.login_url(ttl=LAUNCH_TTL, on_use=page.remove))
    except OSError as exc:
        if page is not None:
            page.remove()
        warn(f"cannot write the browser's launch page ({exc.strerror or exc}): open the URL above")
        return None
    threading.Thread(target=open_when_ready, args=(ready, page), daemon=True).start()
    timer = threading.Timer(LAUNCH_TTL, page.remove)
    timer.daemon = True
    timer.start()
    return page


@contextmanager
def background(store: Store, *, host: str | None = None, port: int = 0, remote: str | None = None) -> Iterator[Running]:
    """Serve the UI in a thread of this process for the ``with`` block (tests, demos;
    ``remote``: read-only, as :func:`serve`)."""
    ready = threading.Event()
    server, sock, running = _prepare(store, host, port, ready, remote=remote)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        if not ready.wait(30):
            raise UsageError("the UI server did not start within 30 s")
        yield running
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
