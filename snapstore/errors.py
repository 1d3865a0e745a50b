"""The one error hierarchy of snapstore.

Every error a user can cause or meet derives from :class:`SnapstoreError` and carries the exit
code the CLI returns for it.  The CLI prints ``snapstore: error: <message>`` and exits with
``exit_code``; library callers catch the class they care about.

Exit codes (documented in docs/cli.md, tested in tests/test_cli_errors.py):

====  ===========================================================
0     success
1     ``diff``: the two sides differ (not an error, like diff(1))
2     usage error: bad option, bad argument, unreadable --conversation
3     no store here / a store already exists
4     unknown or ambiguous checkpoint reference, unknown path in it
5     the store is locked by another process
6     the store is damaged (``verify`` found problems, a chunk is corrupt)
7     the store has a format this version does not know
8     a file-system error on the tree or the store (missing path, disk full)
9     a conflict: the tree changed under a running restore
10    an unsafe path in a manifest (absolute, ``..``, through a symlink)
11    a before-hook refused the operation (hooks.HookError)
70    an internal error (a bug): one line, no traceback unless SNAPSTORE_DEBUG=1
====  ===========================================================
"""

from __future__ import annotations


class SnapstoreError(Exception):
    """Root of every snapstore error; ``exit_code`` is what the CLI exits with."""

    exit_code = 70

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(SnapstoreError):
    """Bad arguments or bad input given by the caller (e.g. malformed conversation JSON)."""

    exit_code = 2


class StoreNotFoundError(SnapstoreError):
    """No store where one was looked for."""

    exit_code = 3


class StoreExistsError(SnapstoreError):
    """``init`` where a store already exists."""

    exit_code = 3


class RefError(SnapstoreError):
    """A checkpoint reference (or a path inside a checkpoint) that does not resolve to one thing."""

    exit_code = 4


class LockedError(SnapstoreError):
    """Another process holds the store's writer lock and did not release it in time."""

    exit_code = 5


class CorruptError(SnapstoreError):
    """Stored data failed an integrity check (hash mismatch, missing object, bad record)."""

    exit_code = 6


class FormatVersionError(SnapstoreError):
    """The store was written by a format version this snapstore does not understand."""

    exit_code = 7


class TreeIOError(SnapstoreError):
    """An operating-system error on the working tree or on the store's files."""

    exit_code = 8


class ConflictError(SnapstoreError):
    """The working tree changed under an operation that had planned against it."""

    exit_code = 9


class UnsafePathError(SnapstoreError):
    """A stored path that would escape the tree or pass through a symlink."""

    exit_code = 10


EXIT_OK = 0
EXIT_DIFFERENT = 1
