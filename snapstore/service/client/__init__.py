"""The console script's first module: ask a running service, else run the CLI in-process.

It imports only the standard library (no click, lmdb, zstandard or msgpack): when a service
answers, a command costs the interpreter's start plus one round trip.  Any doubt (no socket, a
refused or silent connection, another version, a command that reads stdin, a service that died
before it wrote anything) means the command runs in-process exactly as without a service.
"""

from __future__ import annotations

import gc
import os
import sys

from snapstore.service import protocol

TYPE_CHECKING = False  # no `typing` at run time: the client's start-up
if TYPE_CHECKING:
    from typing import Any

#: How long a service may take to accept and acknowledge a request before the client gives up
#: on it and runs the command itself.
CONNECT_TIMEOUT = 1.0
#: Commands that never go through the service (the remote ones use the caller's AWS
#: credentials and network, never the service's; ``maintain`` compresses for seconds, which
#: would hold the service's one request loop).
LOCAL_COMMANDS = frozenset({
    "serve", "init", "relocate", "mcp", "ui", "integrate", "rewind",
    "remote", "push", "fetch", "pull", "clone", "maintain",
})
#: Commands whose stdin is read whole here and sent with the request (an agent hook's event:
#: Claude Code closes stdin after writing it); the service gives it to the command as stdin.
STDIN_COMMANDS = frozenset({"hook"})
#: stdin already read for the service, replayed to an in-process run when none answered.
_read_stdin: bytes | None = None


def parse_globals(argv: list[str]) -> tuple[str | None, str | None, str | None] | None:
    """``(command, store, directory)`` from the argument list, or None when unsure.

    Global options may stand before or after the command (the CLI accepts both); everything
    after ``--`` is a path.  An argument ``-`` means stdin is read: such commands run locally.
    """
    from snapstore.cli.lean import GLOBAL_OPTIONS

    command = store = directory = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg == "-":
            return None
        name, eq, value = arg.partition("=")
        if name in GLOBAL_OPTIONS and arg.startswith("--") and eq:
            pass
        elif arg in GLOBAL_OPTIONS:
            if i + 1 >= len(argv):
                return None
            name, value = arg, argv[i + 1]
            i += 1
        elif arg.startswith("-C") and len(arg) > 2:
            name, value = "-C", arg[2:]
        else:
            name = ""
            if command is None and not arg.startswith("-"):
                command = arg
            elif command is None and arg in ("-h", "--help", "--version"):
                return None
        if name == "--store":
            store = value
        elif name == "-C":
            directory = value  # the last one wins, as in the CLI
        i += 1
    return command, store, directory


def _target(argv: list[str]) -> tuple[str, str, str] | None:
    """``(command, working directory sent, store directory)`` of a command the service may run,
    or None when it runs here."""
    parsed = parse_globals(argv)
    if parsed is None:
        return None
    command, store, directory = parsed
    if command is None or command in LOCAL_COMMANDS:
        return None
    if any(a == "--remote" or a.startswith("--remote=") for a in argv):
        return None  # reads a remote: the caller's credentials, never the service's
    cwd = os.getcwd()
    if command in STDIN_COMMANDS:
        # A hook runs wherever the agent is (`cwd` follows `cd`): its project is the store's tree.
        cwd = os.environ.get("CLAUDE_PROJECT_DIR") or cwd
    start = os.path.join(cwd, directory) if directory else cwd
    store = store or os.environ.get("SNAPSTORE_STORE") or None
    store_dir = protocol.find_store_dir(start, store)
    return None if store_dir is None else (command, cwd, store_dir)


def lost_request(argv: list[str], value: str, silent: bool = False) -> int | None:
    """What the native client hands over when its service stopped after accepting a command
    (``SNAPSTORE_LOST_REQUEST=<id>:<pid>:<command>``): the store says what happened; the
    command is never run again, but for a snapshot that took no effect (None: run it here)."""
    from snapstore.service.client import lost

    rid, _, rest = value.partition(":")
    pid, _, command = rest.partition(":")
    target = _target(argv)
    if target is None:
        sys.stderr.write("snapstore: error: the service stopped before answering, and its store cannot be found again\n")
        return 12
    if not silent and lost.taken_here(target[2], rid, command, pid.encode()):
        return None
    return lost.report(target[2], rid, command, pid.encode(), silent=silent)


def _fell_back(store_dir: str, cause: str, detail: str) -> None:
    """Record a fallback the user can fix (service.fallback), with its hint the first time."""
    from snapstore.service import fallback

    hint = fallback.note(store_dir, cause, detail)
    if hint is not None:
        sys.stderr.write(hint + "\n")
        sys.stderr.flush()


def _request(command: str, argv: list[str], cwd: str, store_dir: str) -> dict[str, object] | None:
    """The request for the service (a hook's stdin read, up to a bound); None when that stdin
    leaves no room in a request frame."""
    env = {k: v for k, v in os.environ.items() if k.startswith(protocol.FORWARDED_ENV_PREFIXES)}
    if "COLUMNS" not in env and sys.stdout.isatty():  # the terminal's width, as in-process
        env["COLUMNS"] = str(os.get_terminal_size(sys.stdout.fileno()).columns)
    request: dict[str, object] = {
        "v": protocol.version_tag(),
        "id": os.urandom(16).hex(),
        "client": "python",
        "command": command,
        "argv": argv,
        "cwd": cwd,
        "env": env,
        "store": store_dir,
        "encoding": sys.stdout.encoding,
        "errors": sys.stdout.errors,
    }
    if command in STDIN_COMMANDS:
        global _read_stdin
        _read_stdin = sys.stdin.buffer.read(protocol.MAX_STDIN + 1)  # (the hook reads no more either)
        if len(_read_stdin) > protocol.MAX_FRAME // 2:
            return None
        request["stdin"] = _read_stdin.decode("utf-8", "surrogateescape")
    return request


def _not_accepted(store_dir: str, first: tuple[bytes, bytes] | None) -> None:
    """Record why the service did not take the command, when the user can fix it."""
    if first is None:
        _fell_back(store_dir, "service-did-not-answer", f"this installation: {protocol.version_tag()}")
    elif first == (b"n", b"version"):
        _fell_back(store_dir, "python-client-refused", f"this installation: {protocol.version_tag()}")


def try_service(argv: list[str], native_refused: str | None = None) -> int | None:
    """The exit code of the command run by the store's service, or None to run it here.

    ``native_refused``: why the service refused the native client that handed this command
    over (``SNAPSTORE_NATIVE_REFUSED``), recorded when it is a version the user can fix."""
    target = _target(argv)
    if target is None:
        return None
    command, cwd, store_dir = target
    if native_refused == "version":
        _fell_back(store_dir, "native-client-refused", f"python client {protocol.version_tag()}")
    path = protocol.owned_socket(store_dir)
    if path is None:
        return None
    request = _request(command, argv, cwd, store_dir)
    if request is None:
        return None  # a hook's stdin too large for a request frame: run here, on what was read
    rid = str(request["id"])
    try:
        conn = protocol.connect(path, CONNECT_TIMEOUT)
    except OSError:
        return None
    with conn as sock:
        try:
            protocol.send_frame(sock, b"r", protocol.encode_request(request))
            first = protocol.recv_frame(sock)
            if first is None or first[0] != b"a":  # not accepted (another version, another store)
                _not_accepted(store_dir, first)
                return None
            # From here on the command is the service's, never run here: the service runs it
            # only after this confirmation (a client that timed out above closes without it).
            # A failed send means the service's end is closed: it cannot have run it.
            protocol.send_frame(sock, b"g", b"")
        except (OSError, ValueError):
            return None
        # Accepted: the command may take as long as it needs, but the service sends a frame
        # (a heartbeat at least) every HEARTBEAT seconds; SILENCE seconds of none, it is stopped.
        sock.settimeout(protocol.SILENCE)
        code, wrote, silent = _relay(sock)
    if code is not None:
        return code
    # The service stopped (or went silent) before answering.  A read-only command that printed
    # nothing runs here; any other is never run twice: the store says what it did (service.client.lost).
    if command in protocol.READ_ONLY_COMMANDS:
        if not wrote:
            return None
        sys.stderr.write("snapstore: error: the service stopped before the command ended: its output above may be incomplete\n")
        return 12  # ServiceStoppedError's code (errors is not imported on this path)
    from snapstore.service.client import lost

    if not silent and lost.taken_here(store_dir, rid, command, first[1]):
        return None
    return lost.report(store_dir, rid, command, first[1], silent=silent)


def _relay(sock: Any) -> tuple[int | None, bool, bool]:
    """Relay the command's output; ``(exit code, whether anything was written, whether the
    service went silent)``, the code None when the service stopped before sending it."""
    out, err = sys.stdout.buffer, sys.stderr.buffer
    wrote = False
    while True:
        try:
            frame = protocol.recv_frame(sock)
        except TimeoutError:  # no frame, not even a heartbeat, for SILENCE seconds
            return None, wrote, True
        except (OSError, ValueError):
            frame = None
        if frame is None:
            return None, wrote, False
        channel, payload = frame
        if channel == b"h" and not payload:
            continue
        if channel == b"o":
            out.write(payload)
            out.flush()
            wrote = True
        elif channel == b"e":
            err.write(payload)
            err.flush()
            wrote = True
        elif channel == b"x":
            try:
                return int(payload), wrote, False
            except ValueError:  # not an exit code: as if the service had stopped
                return None, wrote, False
        else:  # no such channel: the answer cannot be trusted from here on
            return None, wrote, False


def main() -> int:
    """Run the command line in ``sys.argv``; returns its exit code."""
    return _main(sys.argv[1:])[0]


def _main(argv: list[str]) -> tuple[int, bool]:
    """``(exit code, whether the process may end at once)``: True after a command run by the
    service or by the click-free snapshot, whose every resource is closed when they return."""
    # The cyclic collector finds no cycles in start-up's imports nor in a snapshot's tuples,
    # yet walks every new object again and again (4% of a no-change CLI snapshot, counted with
    # callgrind); the click path turns it back on for commands that may run long.
    gc.disable()
    if argv == ["--version"]:
        from snapstore import __version__

        sys.stdout.write(f"snapstore {__version__}\n")
        return 0, False
    gone = working_directory_gone(argv)
    if gone is not None:
        return gone, False
    handed = os.environ.pop("SNAPSTORE_LOST_REQUEST", None)
    # The native client found the service silent (protocol.SILENCE): not asked again.
    silent = os.environ.pop("SNAPSTORE_SERVICE_SILENT", None) is not None
    native_refused = os.environ.pop("SNAPSTORE_NATIVE_REFUSED", None)
    lost_code = None if handed is None else lost_request(argv, handed, silent)
    if lost_code is not None:
        return lost_code, True
    try:
        code = None if silent or handed is not None else try_service(argv, native_refused)
    except BrokenPipeError:
        return 0, False
    if code is not None:
        return code, True
    if _read_stdin is not None:
        import io

        sys.stdin = io.TextIOWrapper(io.BytesIO(_read_stdin), encoding="utf-8", errors="surrogateescape")
    else:
        # A plain `snapshot` (the command an agent runs after every tool call) without click.
        from snapstore.cli import lean

        code = lean.main(argv)
        if code is not None:
            return code, True
    gc.enable()
    from snapstore.cli import main as cli_main

    return cli_main(argv), False


def working_directory_gone(argv: list[str]) -> int | None:
    """None when the working directory exists; else, unless the command names where to work
    anyway (an absolute ``-C DIR``; a hook's ``$CLAUDE_PROJECT_DIR``, which then becomes the
    working directory), the error is printed and its exit code returned."""
    why = _working_directory(argv)
    if why is None:
        return None
    from snapstore.errors import TreeIOError

    sys.stderr.write(f"snapstore: error: {why}\n")
    return TreeIOError.exit_code


def _working_directory(argv: list[str]) -> str | None:
    try:
        os.getcwd()
        return None
    except OSError:
        pass
    instead = os.environ.get("CLAUDE_PROJECT_DIR") if "hook" in argv else None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "-C" and i + 1 < len(argv):
            instead = argv[i + 1]
        elif arg.startswith("-C") and len(arg) > 2:
            instead = arg[2:]
    if instead and os.path.isabs(instead):
        try:
            os.chdir(instead)
            return None
        except OSError:
            pass
    return "the current directory no longer exists (it was deleted or moved): cd to an existing directory, or give -C DIR"


def _leave(code: int) -> None:
    """End the process now: tearing down every module and object costs a short command ~10%
    of its instructions (callgrind) and does nothing for it.  Output is flushed first; with
    another thread still alive the normal exit runs instead, so nothing is cut short."""
    import threading

    if threading.active_count() != 1:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more to say there
            pass
    os._exit(code)


def run() -> None:
    """Entry point of the ``snapstore`` console script."""
    from snapstore.service import firstrun

    firstrun.ensure_native()  # (a pip/pipx/uv install's first run builds the native client)
    code, finished = _main(sys.argv[1:])
    if finished:
        _leave(code)
    sys.exit(code)
