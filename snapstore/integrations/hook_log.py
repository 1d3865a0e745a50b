"""The user's log of agent hooks that failed before or outside a store: ``hook-failures.log``.

A hook that fails inside a store logs in that store's ``hook.log``; one that cannot get that far
(a payload that does not parse, an exception before the store is opened, an executable that is
gone: Cline's script logs that itself) appends one line here, in
``$XDG_STATE_HOME/snapstore/`` (default ``~/.local/state/snapstore/``).  ``snapstore doctor``
shows the last lines of both.  The file is the user's own (0600, in a 0700 directory, never
through a symlink) and bounded: past :data:`MAX_BYTES` it is moved to ``.1`` and restarted.
"""

from __future__ import annotations

import os
import time

NAME = "hook-failures.log"
MAX_BYTES = 256 << 10
#: The same place in the shell (Cline's hook scripts log there when snapstore cannot run).
SHELL_PATH = '"${XDG_STATE_HOME:-$HOME/.local/state}/snapstore/' + NAME + '"'


def path() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "snapstore", NAME)


def append(agent: str, message: str) -> None:
    """Add one line (never raises: a log that cannot be written must not fail the hook)."""
    target = path()
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {agent}: {' '.join(message.split())[:2000]}\n"
    try:
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        if os.lstat(target).st_size > MAX_BYTES:
            os.replace(target, target + ".1")
    except OSError:
        pass  # absent (the append creates it), or not ours to rotate
    append_line(target, line)


def append_line(path: str, text: str) -> None:
    """Append ``text`` to the log at ``path`` (created 0600, never through a symlink; a store's
    hook.log is written the same way); never raises."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, text.encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass


def tail(file: str, lines: int = 5) -> list[str]:
    """The last ``lines`` lines of a log (regular files only, the last 64 KiB read)."""
    import stat

    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return []
        os.lseek(fd, max(0, st.st_size - (64 << 10)), os.SEEK_SET)
        data = os.read(fd, 64 << 10)
    except OSError:
        return []
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace")
    return [line for line in text.splitlines() if line.strip()][-lines:]
