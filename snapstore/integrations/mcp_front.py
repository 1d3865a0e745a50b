"""``snapstore mcp`` before the SDK is loaded: the first answers at once, then the SDK's server.

Importing the ``mcp`` SDK takes most of a second (its protocol models are pydantic classes of
every protocol version), and a client waits for the answers to ``initialize`` and ``tools/list``
before it calls a tool.  Those answers depend on nothing but the request, the SDK and the
tools' code, so the front answers them from copies of the SDK's own answers, kept in the user's
cache directory, while the SDK loads; the SDK is then handed the same requests, and its answers
to them (the same text) are kept out of the stream.  Without a copy (the first start after an
install, an upgrade or an edit of the tools) the SDK answers, and its answer is kept.

Two pumps sit between the client and the SDK: stdin's replaces text JSON cannot carry
(:func:`clean_line`), stdout's drops the SDK's answers to the requests answered already.
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

#: The largest kept answer read back (the tools' list is ~20 KiB).
MAX_CACHED_BYTES = 1 << 20


#: The requests whose answers depend only on the versions and their parameters (kept per
#: protocol version), and what a kept answer must hold to be used.
CACHED = {"initialize": "protocolVersion", "tools/list": "tools"}


class Front:
    """The pumps and what they share: the requests answered from kept copies (whose answers
    from the SDK are kept out of the stream) and those whose answers are to be kept."""

    def __init__(self, client_out: IO[bytes]):
        self.client_out = client_out
        self.lock = threading.Lock()
        #: Request id -> (where its answer is kept, whether it was answered already).
        self.pending: dict[Any, tuple[str | None, bool]] = {}
        self.protocol = "?"

    def send(self, data: bytes) -> None:
        with self.lock:
            self.client_out.write(data)
            self.client_out.flush()

    def take(self, line: bytes) -> None:
        """Look at a client's request before the SDK gets it: answer ``initialize`` and
        ``tools/list`` now when a copy of the SDK's answer is kept, else note where to keep it."""
        if not any(b'"' + m.encode() + b'"' in line for m in CACHED):
            return
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):  # the SDK answers a malformed request itself
            return
        method = doc.get("method") if isinstance(doc, dict) else None
        if method not in CACHED or "id" not in doc or isinstance(doc["id"], (dict, list)):
            return
        params = doc.get("params")
        if method == "initialize":
            version = params.get("protocolVersion") if isinstance(params, dict) else None
            self.protocol = str(version)
        path = cache_path(f"{method}\0{self.protocol}\0{json.dumps(params, sort_keys=True)}")
        result = read_cached(path, CACHED[method]) if path else None
        if result is not None:
            self.send(_line({"jsonrpc": "2.0", "id": doc["id"], "result": result}))
        with self.lock:
            self.pending[doc["id"]] = (path, result is not None)

    def pass_answer(self, line: bytes) -> bool:
        """Whether the SDK's line goes to the client (not its answer to a request answered
        already); its answer to a request noted by :meth:`take` is kept for the next start."""
        if not self.pending or not line.startswith(b"{"):
            return True
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError):
            return True
        if not isinstance(doc, dict) or not ("result" in doc or "error" in doc) or isinstance(doc.get("id"), (dict, list)):
            return True
        with self.lock:
            noted = self.pending.pop(doc.get("id"), None)
        if noted is None:
            return True
        path, answered = noted
        if path is not None and not answered and "result" in doc:
            write_cached(path, doc["result"])
        return not answered  # (an error the SDK gives a request answered already is not sent either)


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
            for line in client_in:
                front.take(line)
                sdk_in.write(clean_line(line))
        except OSError:  # the server went away: nothing more to pass on
            pass


def _pump_out(sdk_out: IO[bytes], front: Front) -> None:
    with sdk_out:
        try:
            for line in sdk_out:
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


def cache_path(request: str, home: Callable[[str], str] = os.path.expanduser) -> str | None:
    """Where the SDK's answer to ``request`` (method, protocol version, parameters) is kept:
    named by a hash of it, snapstore's version and the files that make the answer (the SDK's
    package, the tools' modules: their place and time), so that no other SDK or snapstore, nor
    an edited tool, ever reads a stale answer."""
    import importlib.util

    from snapstore import __version__

    try:
        spec = importlib.util.find_spec("mcp")
        origin = spec.origin if spec is not None else None
        if origin is None:
            return None
        here = os.path.dirname(os.path.abspath(__file__))
        made_by = [os.path.dirname(origin), origin, *(os.path.join(here, f) for f in ("mcp_server.py", "mcp_types.py"))]
        stamps = "\0".join(f"{p}:{os.stat(p).st_mtime_ns}" for p in made_by)
    except (OSError, ImportError, ValueError):
        return None
    key = f"{__version__}\0{stamps}\0{request}"
    base = os.environ.get("XDG_CACHE_HOME") or home("~/.cache")
    return os.path.join(base, "snapstore", f"mcp-answer-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json")


def read_cached(path: str, holds: str) -> dict[str, Any] | None:
    """The kept answer, a JSON object holding ``holds``: only a regular file of this user's,
    never through a symlink, bounded."""
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
    return doc if isinstance(doc, dict) and holds in doc else None


def write_cached(path: str, result: Any) -> None:
    """Keep the SDK's answer for the next start (owner-only, atomically; a failure costs only
    the speed of the next start)."""
    from snapstore.errors import SnapstoreError
    from snapstore.tree.atomic import write_file_atomic

    with contextlib.suppress(OSError, ValueError, TypeError, SnapstoreError):
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        write_file_atomic(path, json.dumps(result).encode(), 0o600)
