"""``snapstore mcp`` before the SDK is loaded: the first answer at once, then the SDK's server.

Importing the ``mcp`` SDK takes most of a second (its protocol models are pydantic classes of
every protocol version), and a client waits for the answer to ``initialize`` before anything
else.  That answer depends on nothing but the SDK's and snapstore's versions and the protocol
version asked for, so the front answers it from a copy of the SDK's own answer, kept in the
user's cache directory, while the SDK loads; the SDK is then handed the same request, and its
answer to it (the same text) is kept out of the stream.  Without a copy (the first start after
an install or an upgrade) the SDK answers, and its answer is kept for the next start.

Two pumps sit between the client and the SDK: stdin's replaces text JSON cannot carry
(:func:`clean_line`), stdout's drops the SDK's second answer to ``initialize``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

#: The largest cached answer read back (the real one is a few KiB: the server's instructions).
MAX_CACHED_BYTES = 64 << 10


class Front:
    """The pumps and what they share: the first request, and whether it was answered early."""

    def __init__(self, client_out: IO[bytes]):
        self.client_out = client_out
        self.lock = threading.Lock()
        self.first_id: Any = None
        self.cache_path: str | None = None
        self.answered_early = False
        self.first_seen = threading.Event()

    def send(self, data: bytes) -> None:
        with self.lock:
            self.client_out.write(data)
            self.client_out.flush()

    def take_first(self, line: bytes) -> None:
        """Note the client's first request; answer it now when it is ``initialize`` and a copy
        of the SDK's answer is kept."""
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):  # the SDK answers a malformed request itself
            doc = None
        if isinstance(doc, dict) and doc.get("method") == "initialize" and "id" in doc:
            self.first_id = doc["id"]
            params = doc.get("params")
            version = params.get("protocolVersion") if isinstance(params, dict) else None
            self.cache_path = cache_path(str(version))
            result = read_cached(self.cache_path) if self.cache_path else None
            if result is not None:
                self.answered_early = True
                self.send(_line({"jsonrpc": "2.0", "id": self.first_id, "result": result}))
        self.first_seen.set()

    def pass_answer(self, line: bytes) -> bool:
        """Whether the SDK's line goes to the client (not its answer to an ``initialize`` that
        was answered early); its first answer to ``initialize`` is kept for the next start."""
        if self.first_id is None or not line.startswith(b"{"):
            return True
        try:
            doc = json.loads(line)
        except ValueError:
            return True
        if not isinstance(doc, dict) or doc.get("id") != self.first_id or "result" not in doc:
            return True
        self.first_id = None  # only the first answer to that id
        if self.cache_path is not None and not self.answered_early:
            write_cached(self.cache_path, doc["result"])
        return not self.answered_early


def serve(root: str, anywhere: bool = False, named: bool = True) -> None:
    """Run the MCP server for ``root`` on stdin/stdout until the client closes it."""
    client_in = os.fdopen(os.dup(0), "rb")
    client_out = os.fdopen(os.dup(1), "wb")
    front = Front(client_out)
    sdk_in = _pipe_onto(0)
    sdk_out = _pipe_onto(1, reading=True)
    threading.Thread(target=_pump_in, args=(client_in, sdk_in, front), name="mcp-stdin", daemon=True).start()
    out = threading.Thread(target=_pump_out, args=(sdk_out, front), name="mcp-stdout", daemon=True)
    out.start()
    try:
        from snapstore.integrations import mcp_server

        mcp_server.build_server(root, anywhere, named).run()
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # the pipe's last writer gone: the pump ends after the last answer
        os.close(devnull)
        out.join(10)


def _pipe_onto(fd: int, reading: bool = False) -> Any:
    """A pipe whose one end becomes ``fd``; the other end as a file (ours)."""
    read_end, write_end = os.pipe()
    if reading:  # the SDK writes to fd, the pump reads
        os.dup2(write_end, fd)
        os.close(write_end)
        return os.fdopen(read_end, "rb")
    os.dup2(read_end, fd)
    os.close(read_end)
    return os.fdopen(write_end, "wb", buffering=0)


def _pump_in(client_in: IO[bytes], sdk_in: IO[bytes], front: Front) -> None:
    with client_in, sdk_in:
        try:
            for n, line in enumerate(client_in):
                if n == 0:
                    front.take_first(line)
                sdk_in.write(clean_line(line))
        except OSError:  # the server went away: nothing more to pass on
            pass
        finally:
            front.first_seen.set()


def _pump_out(sdk_out: IO[bytes], front: Front) -> None:
    with sdk_out:
        try:
            for line in sdk_out:
                front.first_seen.wait()
                if front.pass_answer(line):
                    front.send(line)
        except OSError:  # the client went away
            pass


def _line(doc: Any) -> bytes:
    return (json.dumps(doc, separators=(",", ":")) + "\n").encode()


def clean_line(line: bytes) -> bytes:
    """``line`` with text JSON cannot carry on to Python replaced.

    A request whose strings hold a lone surrogate escape (``"\\ud83d"``: half of an emoji an
    agent cut) fails the SDK's validation and gets no answer at all, so the agent's call hangs.
    Such a line is decoded, its bad characters replaced by U+FFFD (as the store does with any
    such text) and encoded again; every other line passes through untouched.
    """
    if b"\\ud" not in line.lower():
        return line
    from snapstore.records.schema import clean_text

    try:
        doc = json.loads(line.decode("utf-8", "replace"))  # (the SDK decodes with "replace" too)
    except (ValueError, RecursionError):
        return line  # the SDK answers a malformed request itself
    doc, changed = clean_text(doc)
    return _line(doc) if changed else line


def cache_path(protocol_version: str, home: Callable[[str], str] = os.path.expanduser) -> str | None:
    """Where the SDK's answer to ``initialize`` for ``protocol_version`` is kept: named by a
    hash of snapstore's version, the SDK's installed files (their place and time) and the
    protocol version, so another SDK or snapstore never reads a stale answer."""
    import importlib.util

    from snapstore import __version__

    try:
        spec = importlib.util.find_spec("mcp")
        origin = spec.origin if spec is not None else None
        if origin is None:
            return None
        folder = os.path.dirname(origin)
        key = f"{__version__}\0{folder}\0{os.stat(folder).st_mtime_ns}\0{os.stat(origin).st_mtime_ns}\0{protocol_version}"
    except (OSError, ImportError, ValueError):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or home("~/.cache")
    return os.path.join(base, "snapstore", f"mcp-initialize-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json")


def read_cached(path: str) -> dict[str, Any] | None:
    """The kept answer: only a regular file of this user's, never through a symlink, bounded."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > MAX_CACHED_BYTES:
            return None
        doc = json.loads(os.read(fd, MAX_CACHED_BYTES + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return doc if isinstance(doc, dict) and isinstance(doc.get("protocolVersion"), str) else None


def write_cached(path: str, result: Any) -> None:
    """Keep the SDK's answer for the next start (owner-only, atomically; a failure costs only
    the speed of the next start)."""
    from snapstore.errors import SnapstoreError
    from snapstore.tree.atomic import write_file_atomic

    with contextlib.suppress(OSError, ValueError, TypeError, SnapstoreError):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_file_atomic(path, json.dumps(result).encode(), 0o600)
