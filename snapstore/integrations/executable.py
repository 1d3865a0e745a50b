"""The snapstore that agents' configurations run: an absolute path, resolved when ``integrate`` runs.

An agent runs its hooks and MCP servers with its own ``PATH``, which often lacks the virtualenv
or pipx directory snapstore lives in; a bare ``snapstore`` there exits 127 (and Cline blocks the
tool call).  So every command ``integrate`` writes names the executable by its absolute path:
the native client beside the running interpreter (``.venv/bin/snapstore``) when present, else
the Python entry point (``snapstore-py``), else the ``snapstore`` on this ``PATH``, else
``python -m snapstore`` with this interpreter.  Running ``integrate`` again re-resolves it and
updates the entries.  A path in a temporary directory, or an executable that names an
interpreter or Python client that is gone (a moved virtualenv), gets a one-line note.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

#: The names snapstore's executables have (the native client, its Python fallback).
PROGRAM_NAMES = ("snapstore", "snapstore-py")
#: Directories whose contents may vanish at a reboot or a cleanup.
TEMP_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")
#: The most of an executable read to find the interpreter or Python client it names.
_PROBE_BYTES = 8 << 20


class Executable(NamedTuple):
    """How an agent runs snapstore: ``argv`` (one absolute path, or an interpreter and
    ``-m snapstore``) and, when that looks fragile, a one-line ``note`` for the user.  (Imported
    by every adapter, so by every hook: it imports nothing that a hook does not.)"""

    argv: tuple[str, ...]
    note: str | None = None

    def command(self, *args: str) -> str:
        """A shell command line running snapstore with ``args``."""
        return shlex.join([*self.argv, *args])

    def words(self, *args: str) -> list[str]:
        return [*self.argv, *args]


def resolve(
    argv0: str | None = None, python: str | None = None, which: Callable[[str], str | None] | None = None,
) -> Executable:
    """The snapstore an agent should run (see the module's docstring); ``argv0`` and ``python``
    default to this process's ``sys.argv[0]`` and ``sys.executable`` (never resolved through
    symlinks: a virtualenv's ``python`` is a link to the system's); ``which`` to shutil's."""
    if which is None:
        import shutil

        which = shutil.which
    argv0 = sys.argv[0] if argv0 is None else argv0
    python = python or sys.executable
    folders = []
    if argv0 and os.path.basename(argv0) in PROGRAM_NAMES:
        folders.append(os.path.dirname(os.path.abspath(argv0)))
    if python:
        folders.append(os.path.dirname(os.path.abspath(python)))
    for folder in folders:
        for name in PROGRAM_NAMES:
            path = os.path.join(folder, name)
            if _runnable(path):
                return Executable((path,), note_for(path))
    found = which("snapstore")
    if found:
        path = os.path.abspath(found)
        return Executable((path,), note_for(path))
    path = os.path.abspath(python)
    return Executable((path, "-m", "snapstore"), note_for(path))


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def note_for(path: str) -> str | None:
    """A one-line warning when ``path`` will likely stop working for the agent, else None."""
    if in_temporary_directory(path):
        return (
            f"note: the agent will run {path}, which lives in a temporary directory: its hooks stop "
            "working when that directory is cleaned (install snapstore somewhere lasting, then run "
            "'snapstore integrate' again)"
        )
    gone = missing_dependency(path)
    if gone is not None:
        return (
            f"note: {path} looks moved (it runs {gone}, which does not exist): the agent's hooks will "
            "fail; reinstall snapstore (make setup, or pip install), then run 'snapstore integrate' again"
        )
    return None


def in_temporary_directory(path: str) -> bool:
    import tempfile

    real = os.path.realpath(path)
    roots = {os.path.realpath(r) for r in (*TEMP_ROOTS, tempfile.gettempdir())}
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def missing_dependency(path: str) -> str | None:
    """The interpreter (a script's ``#!`` line) or Python client (the native client's fallback)
    that ``path`` runs and that no longer exists: the mark of a moved virtualenv."""
    try:
        with open(path, "rb") as f:
            head = f.read(_PROBE_BYTES)
    except OSError:
        return path
    if head.startswith(b"#!"):
        words = head[2:].split(b"\n", 1)[0].split()
        target = os.fsdecode(words[0]) if words else ""
        if target == "/usr/bin/env" or not target:
            return None
        return None if _runnable(target) else target
    if head.startswith(b"\x7fELF"):
        # The native client holds its Python fallback's absolute path as a C string.
        marker = b"/snapstore-py\x00"
        at = head.find(marker)
        if at < 0:
            return None
        start = head.rfind(b"\x00", 0, at) + 1
        target = os.fsdecode(head[start : at + len(marker) - 1])
        return None if not os.path.isabs(target) or _runnable(target) else target
    return None


def program_words(words: Sequence[str]) -> int:
    """How many of ``words`` name a snapstore program (``/any/path/snapstore``, ``snapstore-py``,
    or ``python -m snapstore``): 1, 3, or 0 when they do not start with one."""
    if words and os.path.basename(words[0]) in PROGRAM_NAMES:
        return 1
    if len(words) >= 3 and list(words[1:3]) == ["-m", "snapstore"]:
        return 3
    return 0


def split_command(command: str) -> list[str]:
    """A shell command line's words, [] when it does not parse."""
    try:
        return shlex.split(command)
    except ValueError:
        return []


def is_snapstore_command(command: str | Sequence[str], *args: str, exact: bool = False) -> bool:
    """Whether a command (a shell line, or argv) runs snapstore with ``args`` first (``exact``:
    and nothing else: a line that also runs something of the user's is the user's)."""
    words = split_command(command) if isinstance(command, str) else [str(w) for w in command]
    n = program_words(words)
    rest = words[n:] if exact else words[n : n + len(args)]
    return n > 0 and rest == list(args)
