"""Starting, stopping and asking the service of a store (``snapstore serve``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from snapstore.errors import SnapstoreError, TreeIOError
from snapstore.service import protocol

#: How long ``serve --detach`` waits for the new service to accept connections.
START_TIMEOUT = 15.0


def _ask(store_dir: str, op: str, timeout: float = 2.0) -> dict[str, Any] | None:
    """Send ``op`` to the store's service; its JSON answer, or None when none answers."""
    path = protocol.owned_socket(store_dir)
    if path is None:
        return None
    try:
        conn = protocol.connect(path, timeout)
    except OSError:
        return None
    with conn as sock:
        try:
            protocol.send_frame(sock, b"r", protocol.encode_request({"v": protocol.version_tag(), "op": op}))
            out = b""
            while True:
                frame = protocol.recv_frame(sock)
                if frame is None or frame[0] == b"n":
                    return None
                if frame[0] == b"o":
                    out += frame[1]
                if frame[0] == b"x":
                    return json.loads(out) if out else {}
        except (OSError, ValueError):
            return None


def status(store_dir: str) -> dict[str, Any] | None:
    """The running service's status, or None when there is none."""
    return _ask(store_dir, "status")


def full_status(store_dir: str) -> dict[str, Any]:
    """What ``serve --status`` prints: the service's status (``running`` False when none
    answers), whether it runs this installation's version, and the recorded fallbacks
    (:mod:`snapstore.service.fallback`): which clients it served and why any stepped aside."""
    from snapstore.service import fallback

    info = status(store_dir)
    out: dict[str, Any] = {"running": info is not None, **(info or {})}
    other = other_version(info)
    out["this_version"] = protocol.version_tag()
    if other:
        out["warning"] = other
    out["fallbacks"] = fallback.read(store_dir)
    return out


def other_version(info: dict[str, Any] | None) -> str | None:
    """Why commands of this installation do not reach the service ``info`` describes (None
    when they do, or when none runs)."""
    if not info or info.get("version") in (None, protocol.version_tag()):
        return None
    return (
        f"the running service is another snapstore installation or version ({info['version']}); "
        "this installation's commands run without it (slower): 'snapstore serve --stop', then "
        "'snapstore serve --detach'"
    )


def stop(store_dir: str) -> bool:
    """Ask the service to exit; True if one was running."""
    answered = _ask(store_dir, "stop") is not None
    if answered:
        deadline = time.monotonic() + 5
        while protocol.owned_socket(store_dir) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
    return answered


def server_command(store_dir: str, idle_timeout: float) -> list[str]:
    """The command line of a service process for ``store_dir``."""
    return [sys.executable, "-m", "snapstore.service.server", store_dir, str(idle_timeout)]


def run_foreground(store_dir: str, idle_timeout: float) -> None:
    """Become the service (exec), so signals and the exit status are the service's own."""
    command = server_command(store_dir, idle_timeout)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def start_detached(store_dir: str, idle_timeout: float) -> dict[str, Any]:
    """Start a service in the background and return its status once it answers."""
    running = status(store_dir)
    if running is not None:
        return running
    log_path = os.path.join(store_dir, "service.log")
    try:
        child = _spawn(store_dir, idle_timeout)
    except OSError as exc:
        raise TreeIOError(f"cannot start the service ({log_path}): {exc.strerror}") from exc
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        answer = status(store_dir)
        if answer is not None:
            return answer
        if child.poll() is not None:
            break
        time.sleep(0.02)
    raise SnapstoreError(f"the service did not start (see {log_path})")


def start_in_background(store_dir: str, idle_timeout: float) -> bool:
    """Start a service without waiting for it (``service.autostart``): the command that asks
    has already done its work in-process; the next ones will find the service.  A second
    service for the same store exits at once (its single-instance lock), so a race is harmless;
    any failure is silent (the service is an optimisation).  Whether one was started."""
    if protocol.owned_socket(store_dir) is not None and status(store_dir) is not None:
        return False
    try:
        _spawn(store_dir, idle_timeout)
    except OSError:
        return False
    return True


#: Made when the note of a service started by a command has been shown (once per store).
AUTOSTART_NOTED = "autostart-noted"


def first_autostart(store_dir: str) -> bool:
    """Whether this is the first service a command started for the store (the one time its
    note is shown); never raises."""
    try:
        fd = os.open(
            os.path.join(store_dir, AUTOSTART_NOTED),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
    except OSError:
        return False
    os.close(fd)
    return True


def _spawn(store_dir: str, idle_timeout: float) -> subprocess.Popen[bytes]:
    """A service process for ``store_dir`` in its own session, logging to ``service.log``."""
    log = os.open(
        os.path.join(store_dir, "service.log"),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
    )
    try:
        return subprocess.Popen(
            server_command(store_dir, idle_timeout),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd="/",
            close_fds=True,
        )
    finally:
        os.close(log)


def ensure_running(store_dir: str, idle_timeout: float) -> None:
    """Start the service on demand (agent hooks and the MCP server); never fails the caller."""
    try:
        start_detached(store_dir, idle_timeout)
    except SnapstoreError:
        pass
