"""The one error hierarchy of snapstore, and the one table of exit codes.

Every error a user can cause or meet derives from :class:`SnapstoreError` and carries the exit
code the CLI returns for it.  The CLI prints ``snapstore: error: <message>`` and exits with
``exit_code``; library callers catch the class they care about.

:data:`EXIT_CODES` is the single source of the exit-code table: the CLI's ``--help`` epilog is
built from it, and ``tests/test_exit_codes.py`` fails when docs/cli.md disagrees with it or
when a code is not produced by a real CLI run.
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


class NoSpaceError(TreeIOError):
    """No space left (or the disk quota reached) on the device a write went to: nothing of the
    write was recorded.  The exit code is :class:`TreeIOError`'s."""


def no_space(exc: BaseException, where: str | None = None) -> NoSpaceError | None:
    """The one error for an OSError of a full disk or an exhausted quota (ENOSPC, EDQUOT), or
    None for any other error: every place the store writes says it the same way."""
    import errno

    if not isinstance(exc, OSError) or exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    place = where or exc.filename or "the store"
    return NoSpaceError(f"no space left on the device holding {place} ({exc.strerror}): this write was not "
                        "recorded; free some space and try again")


class ConflictError(SnapstoreError):
    """The working tree changed under an operation that had planned against it."""

    exit_code = 9


class UnsafePathError(SnapstoreError):
    """A stored path that would escape the tree or pass through a symlink."""

    exit_code = 10


class HookError(SnapstoreError):
    """A before-hook refused the operation; nothing was changed."""

    exit_code = 11


class ServiceStoppedError(SnapstoreError):
    """The resident service stopped before answering, and its command did not take effect in
    full (or not provably): it is never run a second time; the message says what happened."""

    exit_code = 12


class RemoteError(SnapstoreError):
    """A remote (S3-compatible object storage) could not be reached, refused the request
    (permission, credentials), or cannot do what the protocol needs (conditional writes).
    Nothing local was changed by the failed step; corrupt remote data is CorruptError (6)."""

    exit_code = 13


class EncryptionKeyError(SnapstoreError):
    """An encrypted remote and no key to open it: a wrong passphrase, a missing or unreadable
    key file, none given (no ``SNAPSTORE_PASSPHRASE`` and no terminal to ask on), or a remote
    added with ``--encrypt`` that is not encrypted (or the reverse).  Nothing was read or
    written past the check."""

    exit_code = 14


class InternalError(SnapstoreError):
    """A bug in snapstore: reported as one line (a traceback with ``SNAPSTORE_DEBUG=1``)."""

    exit_code = 70


class Interrupted(SnapstoreError):
    """The user interrupted the command (Ctrl-C); journaled work is finished by the next command."""

    exit_code = 130


EXIT_OK = 0
EXIT_DIFFERENT = 1

#: Every exit code the CLI can return, with what it means: the one source of the table.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "success"),
    (EXIT_DIFFERENT, "`diff`: the two sides differ (like diff(1)); `restore`/`undo`: done, but some paths were left alone (listed); `revert`: conflicts remain (markers written, or binary/type conflicts left as they are; also for `--dry-run`)"),
    (UsageError.exit_code, "usage error: bad option or argument, unreadable or invalid input (`--conversation` JSON, a tag, metadata)"),
    (StoreNotFoundError.exit_code, "no store here (or the store belongs to another tree), or `init` where a store exists"),
    (RefError.exit_code, "unknown or ambiguous checkpoint reference; a path not in the checkpoint; no conversation stored; nothing to undo"),
    (LockedError.exit_code, "the store is locked by another writer (the message names its pid)"),
    (CorruptError.exit_code, "the store is damaged: `verify` found problems, or a record or chunk read back is invalid"),
    (FormatVersionError.exit_code, "the store has a format version (or chunker parameters) this snapstore does not know"),
    (TreeIOError.exit_code, "a file-system error on the tree or the store (missing directory, a deleted working directory, disk full, permission, an address-space limit)"),
    (ConflictError.exit_code, "conflict: the tree changed under a restore or a recovery (nothing of yours was overwritten); `revert`: conflicting changes, listed, nothing changed; `integrate`: a file of that name is not snapstore's (yours, or edited), nothing changed"),
    (UnsafePathError.exit_code, "an unsafe path in a checkpoint (absolute, `..`, `.git`, below a symlink), or a store found by searching that belongs to another user: refused, nothing written"),
    (HookError.exit_code, "a `before_snapshot` / `before_restore` hook (or plugin) refused the operation; nothing changed"),
    (ServiceStoppedError.exit_code, "the resident service stopped before answering and the command did not provably finish: it is not run again; the message says what was recorded"),
    (RemoteError.exit_code, "a remote could not be reached, refused the request (permission, credentials) or lacks conditional writes (`remote doctor` says which); nothing local changed. Corrupt remote data is 6"),
    (EncryptionKeyError.exit_code, "an encrypted remote and no key that opens it: wrong passphrase, a missing key file, none given; or `--encrypt` on a remote that is not encrypted (or the reverse); nothing changed"),
    (InternalError.exit_code, "an internal error (a bug): one line; `SNAPSTORE_DEBUG=1` shows the traceback"),
    (Interrupted.exit_code, "interrupted (Ctrl-C); an interrupted restore is finished by the next writing command"),
)

#: Every error class, for ``snapstore.__all__`` and the exit-code tests.
ERROR_CLASSES: tuple[type[SnapstoreError], ...] = (
    SnapstoreError,
    UsageError,
    StoreNotFoundError,
    StoreExistsError,
    RefError,
    LockedError,
    CorruptError,
    FormatVersionError,
    TreeIOError,
    NoSpaceError,
    ConflictError,
    UnsafePathError,
    HookError,
    ServiceStoppedError,
    RemoteError,
    EncryptionKeyError,
    InternalError,
    Interrupted,
)


def exit_code_markdown() -> str:
    """The exit-code table of docs/cli.md (a test keeps the two identical)."""
    rows = [f"| {code} | {text} |" for code, text in EXIT_CODES]
    return "\n".join(["| code | meaning |", "| --- | --- |", *rows])
