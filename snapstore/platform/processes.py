"""Other processes: whose they are, and whether one is a zombie.

Linux reads ``/proc``; elsewhere the POSIX ``ps`` answers (one process start: these are asked
rarely, at ``integrate --http`` and when a request's answer was lost).
"""

from __future__ import annotations

import os
import subprocess

from snapstore import platform


def other_users() -> list[int] | None:
    """The uids, other than this process's and root's, that own a running process (sorted), or
    None when this system does not show every user's processes (``/proc`` mounted with
    ``hidepid``, or no ``ps``)."""
    me = os.getuid()
    if platform.linux():
        if _proc_hides_processes():
            return None
        found = set()
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    found.add(os.stat(f"/proc/{name}").st_uid)
                except OSError:
                    continue  # (it ended meanwhile)
        return sorted(found - {0, me})
    column = _ps("-A", "-o", "uid=")
    if column is None:
        return None
    return sorted({int(u) for u in column.split() if u.isdigit()} - {0, me})


def _proc_hides_processes() -> bool:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            rows = [row.split() for row in f]
    except OSError:
        return True
    for row in rows:
        if len(row) > 4 and row[4] == "/proc":
            options = row[-1].split(",")
            return any(o.startswith("hidepid=") and o not in ("hidepid=0", "hidepid=off") for o in options)
    return True


def is_zombie(pid: int) -> bool:
    """Whether process ``pid`` has ended and waits for its parent to reap it (False when unknown)."""
    if platform.linux():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                return f.read().split(b") ", 1)[-1][:1] == b"Z"
        except OSError:
            return False
    state = _ps("-o", "stat=", "-p", str(pid))
    return state is not None and state.strip().startswith("Z")


def _ps(*args: str) -> str | None:
    try:
        done = subprocess.run(["ps", *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 or done.stdout else None
