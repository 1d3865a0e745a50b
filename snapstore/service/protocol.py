"""The wire protocol between the thin client and the service (standard library only).

A request is one frame: a dict ``{"v": VERSION, "argv": [...], "cwd": ..., "env": {...},
"store": DIR, "id": HEX}`` in :mod:`marshal` format (built in: the client imports neither json
nor re; the service accepts it only from a peer with its own uid, checked with SO_PEERCRED).
The service answers ``a`` (accepted, with its pid) or ``n`` ("not served here": the client runs
the command itself); after ``a`` the client sends ``g`` and only then does the service run the
command (a client that gave up waiting closes without ``g``, so a command is never run both
here and there).  Then frames ``(channel, payload)``: ``o`` stdout bytes, ``e`` stderr bytes,
``h`` a heartbeat (empty: the command still runs), ``x`` the exit code.  A frame is a 1-byte
channel, a 4-byte big-endian length and the payload.  A client that receives no frame for
:data:`SILENCE` seconds takes the service for stopped (service.server.heartbeat).
"""

from __future__ import annotations

import _socket
import marshal
import os

from snapstore.platform import unix

TYPE_CHECKING = False  # no `typing` at run time: the client's start-up
if TYPE_CHECKING:
    from typing import Any

#: Client and service of different versions never talk: the service answers ``n`` and the
#: client runs in-process.  The package path is part of it, so two installations never mix.
PROTOCOL = 5
SOCKET_NAME = "service.sock"
LOCK_NAME = "service.lock"
#: Commands that change nothing: a client that lost their answer runs them again itself.
#: (``verify --repair`` writes, but is idempotent: run again, it finds only what is left.)
READ_ONLY_COMMANDS = frozenset({"list", "show", "log", "cat", "diff", "oplog", "verify", "stats"})
#: Commands whose recorded checkpoint is their whole effect: that row alone says they finished.
SELF_RECORDING_COMMANDS = frozenset({"snapshot", "hook"})
#: Environment variables forwarded with a request (those the CLI and the store read, the
#: agents' project variables, which name a hook's project, and the terminal's width).
FORWARDED_ENV_PREFIXES = ("SNAPSTORE_", "TZ", "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR", "COLUMNS")

#: Seconds between heartbeat frames while a command prints nothing, and how long a client waits
#: for the next frame before it takes the service for stopped (cclient/snapstore.c: SILENCE_MS).
HEARTBEAT = 1.0
SILENCE = 5.0

_HEADER_SIZE = 5  # 1-byte channel, 4-byte big-endian length
MAX_FRAME = 1 << 26
#: The most of a hook's stdin a client keeps (integrations.bounded_json.MAX_PAYLOAD_BYTES: an event
#: past it is refused by the hook all the same, so an endless stdin is never read to its end).
MAX_STDIN = 128 << 20


_TAG: list[str] = []  # (computed once: the service compares it on every request; no functools: the client's start-up)


def version_tag() -> str:
    """What must be equal on both sides: the package version, protocol and install path."""
    if not _TAG:
        from snapstore import __version__

        _TAG.append(f"{__version__}/{PROTOCOL}/{os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}")
    return _TAG[0]


def encode_request(request: dict[str, Any]) -> bytes:
    return marshal.dumps(request)


#: The fields a request may carry, and their types (``argv`` a list of str, ``env`` a dict of
#: str to str); any other field, or another type, makes it no request.
_STR_FIELDS = frozenset({"v", "id", "client", "command", "cwd", "store", "encoding", "errors", "stdin", "op"})


def decode_request(data: bytes) -> dict[str, Any]:
    """The request dict; ValueError for anything else (truncated or hostile bytes included:
    a client of the same user may still send garbage, and the service must outlive it)."""
    try:
        value = marshal.loads(data)
    except Exception as exc:  # marshal raises EOFError, TypeError, ValueError on bad data
        raise ValueError(f"not a request: {type(exc).__name__}") from None
    if not isinstance(value, dict):
        raise ValueError("a request is a dict")
    for key, field in value.items():
        if key in _STR_FIELDS:
            ok = isinstance(field, str)
        elif key == "argv":
            ok = isinstance(field, list) and all(isinstance(a, str) for a in field)
        elif key == "env":
            ok = isinstance(field, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in field.items())
        else:
            ok = False
        if not ok:
            raise ValueError(f"a request's {key!r} is not what it must be")
    return value


def send_frame(sock: Any, channel: bytes, payload: bytes) -> None:
    sock.sendall(channel + len(payload).to_bytes(4, "big") + payload)


def recv_exact(sock: Any, n: int) -> bytes | None:
    """``n`` bytes, or None when the peer closed the connection first."""
    parts = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def recv_frame(sock: Any) -> tuple[bytes, bytes] | None:
    header = recv_exact(sock, _HEADER_SIZE)
    if header is None:
        return None
    channel, length = header[:1], int.from_bytes(header[1:], "big")
    if length > MAX_FRAME:
        raise ValueError("frame too large")
    payload = recv_exact(sock, length) if length else b""
    if payload is None:
        return None
    return channel, payload


def find_store_dir(start: str, explicit: str | None) -> str | None:
    """The store a command run in ``start`` would use: ``explicit`` (``--store``), else the
    nearest store at or above ``start`` that discovery may use (None when there is none, or it
    is refused: the command then runs in-process and says why)."""
    if explicit:
        return os.path.abspath(os.path.join(start, explicit))
    from snapstore.storage.discovery import search

    return search(start)[0]


def owned_socket(store_dir: str) -> str | None:
    """The store's socket path if it exists, is a socket and belongs to this user."""
    import stat

    path = os.path.join(store_dir, SOCKET_NAME)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return None
    return path


class Connection:
    """A connected socket that closes with ``with`` (``_socket.socket`` itself does not)."""

    def __init__(self, sock: Any):
        self.sock = sock

    def __enter__(self) -> Any:
        return self.sock

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def connect(path: str, timeout: float) -> Connection:
    """Connect to a service socket; a long store path is reached through its directory.

    The C-level ``_socket`` is used: the ``socket`` module imports enum and selectors, which
    cost a client more than the round trip does.
    """
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        unix.connect(sock, path)
    except BaseException:
        sock.close()
        raise
    return Connection(sock)
