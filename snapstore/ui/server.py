"""Running the UI: bind the socket, print the URL with its token, serve with uvicorn.

The socket is bound here (not by uvicorn) so the port is known, and the Host check set up,
before anything is served; ``--port 0`` (the default) takes a free port.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from snapstore.errors import UsageError
from snapstore.ui.security import is_loopback, new_token

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
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def browser_available() -> bool:
    """Whether opening a browser makes sense: a desktop session, not CI, not switched off."""
    if os.environ.get("CI") or os.environ.get("SNAPSTORE_NO_BROWSER"):
        return False
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def url_for(host: str, port: int, token: str) -> str:
    """The URL to print: a wildcard address is shown as 127.0.0.1."""
    bare = host.strip("[]")
    if bare in ("0.0.0.0", ""):
        bare = "127.0.0.1"
    elif bare == "::":
        bare = "::1"
    shown = f"[{bare}]" if ":" in bare else bare
    return f"http://{shown}:{port}/?token={token}"


class Running(NamedTuple):
    """A UI being served: the URL to open (with its token), the port and the token."""

    url: str
    port: int
    token: str


def _prepare(store: Store, host: str, port: int, ready: threading.Event) -> tuple[Any, socket.socket, Running]:
    import uvicorn

    from snapstore.ui.app import create_app

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            ready.set()

    sock = bind(host, port)
    port = sock.getsockname()[1]
    token = new_token()
    app = create_app(store, token=token, host=host, port=port)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False, server_header=False)
    return Server(config), sock, Running(url_for(host, port, token), port, token)


def serve(
    store: Store,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    open_browser: bool = True,
    echo: Callable[[str], None] = print,
    warn: Callable[[str], None] = print,
) -> None:
    """Serve the UI for ``store`` until interrupted (Ctrl-C)."""
    if not is_loopback(host):
        warn(
            f"listening on {host}: other machines that reach this address can load the page "
            "(they still need the token, and the traffic is not encrypted)"
        )
    ready = threading.Event()
    server, sock, running = _prepare(store, host, port, ready)
    echo(f"snapstore ui for {store.root}\nopen {running.url}\n(Ctrl-C stops it)")
    if open_browser and browser_available():
        threading.Thread(target=_open_when_ready, args=(ready, running.url), daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


@contextmanager
def background(store: Store, *, host: str = "127.0.0.1", port: int = 0) -> Iterator[Running]:
    """Serve the UI in a thread of this process for the ``with`` block (tests, demos)."""
    ready = threading.Event()
    server, sock, running = _prepare(store, host, port, ready)
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


def _open_when_ready(ready: threading.Event, url: str) -> None:
    import webbrowser

    if ready.wait(30):
        webbrowser.open(url)
