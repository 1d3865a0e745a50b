"""``snapstore snapshot`` without click: the command an agent runs after every tool call.

Importing click and the whole command tree costs more than the snapshot of a small tree itself
(docs/benchmarks-design.md), so the console script hands a plain ``snapshot`` to
:func:`main` first.  It accepts exactly the forms listed in :func:`parse_snapshot` and returns
None for anything else (``--help``, ``--conversation``, an unknown or abbreviated option, a
value that starts with ``-``, combined short flags, ``--``...): click then parses the same
argv, so every unusual form keeps click's behaviour and messages.  The work and the output are
shared with the click command (:func:`snapshot_output`), so both print the same bytes and exit
with the same codes.
"""

from __future__ import annotations

import os
import sys

from snapstore.units import printable

TYPE_CHECKING = False  # no `typing` at run time (start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from snapstore.store import Store

#: The global options (each takes a value, before or after the command) -> the name they set:
#: the one table the click group, this parser and the service client agree on (a test checks
#: the click group's options against it).
GLOBAL_OPTIONS = {"--store": "store_dir", "-C": "directory", "--lock-timeout": "lock_timeout"}
_VALUES = {"-m": "message", "--message": "message", "--task": "task"}
_MULTI = {"--tag": "tags", "--meta": "meta"}
_FLAGS = {"-q": "quiet", "--quiet": "quiet", "--json": "as_json", "--skip-unchanged": "skip_unchanged"}


def parse_snapshot(argv: list[str]) -> dict[str, Any] | None:
    """The options of a plain ``snapshot`` command line, or None to let click parse it.

    Global options (``--store``, ``-C``, ``--lock-timeout``) may come before or after the
    command, as in the click group; a later one wins.  The environment defaults
    (SNAPSTORE_STORE, SNAPSTORE_LOCK_TIMEOUT) are read as click reads them.
    """
    opts: dict[str, Any] = {
        "store_dir": os.environ.get("SNAPSTORE_STORE") or None,
        "directory": None,
        "lock_timeout": os.environ.get("SNAPSTORE_LOCK_TIMEOUT") or None,
        "message": "",
        "task": None,
        "tags": [],
        "meta": [],
        "quiet": False,
        "as_json": False,
        "skip_unchanged": False,
    }
    seen_command = False
    i = 0
    n = len(argv)
    while i < n:
        arg = argv[i]
        i += 1
        if not seen_command and arg == "snapshot":
            seen_command = True
            continue
        if not arg.startswith("-") or arg in ("-", "--"):
            return None  # an operand (or a second command): click reports it
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if not eq and len(arg) > 2 and not arg.startswith("--"):
            name, value, eq = arg[:2], arg[2:], "attached"  # -mTEXT, -CDIR
        if name in _FLAGS:
            if eq or not seen_command:
                return None
            opts[_FLAGS[name]] = True
            continue
        key = GLOBAL_OPTIONS.get(name) or (_VALUES.get(name) or _MULTI.get(name) if seen_command else None)
        if key is None:
            return None
        if not eq:
            if i >= n:
                return None
            value = argv[i]
            i += 1
        if value.startswith("-"):
            return None  # click's rules for such values are subtle: let it decide
        if name in _MULTI:
            opts[key].append(value)
        else:
            opts[key] = value
    if not seen_command:
        return None
    if opts["lock_timeout"] is None:
        opts["lock_timeout"] = 30.0
    else:
        try:
            opts["lock_timeout"] = float(opts["lock_timeout"])
        except ValueError:
            return None  # click's message for a bad number
    return opts


def parse_meta(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``--meta KEY=VALUE`` pairs as a dict (UsageError for a pair without ``=``)."""
    from snapstore.errors import UsageError

    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta takes KEY=VALUE, not {pair!r}")
        meta[key] = value
    return meta


def snapshot_output(
    open_store: Callable[[], Store],
    *,
    message: str,
    tags: list[str] | tuple[str, ...],
    task: str | None,
    metadata: dict[str, str],
    messages: list[Any] | None,
    skip_unchanged: bool,
    quiet: bool,
    as_json: bool,
    may_start_service: bool = False,
) -> tuple[list[str], str | None]:
    """Take the snapshot; returns ``(warnings, text for stdout or None)``.

    The one body of the ``snapshot`` command, for the click command and for :func:`main`.
    ``may_start_service``: run in-process, not by a service, so ``service.autostart`` applies.
    """
    progress = None
    if not quiet and not as_json:  # (-q prints nothing: render and json are not even imported)
        from snapstore.render import Progress

        progress = Progress("snapshot")
    with open_store() as store:
        try:
            cp = store.snapshot(
                message,
                tags=tags,
                task=task,
                metadata=metadata,
                conversation=messages,
                skip_unchanged=skip_unchanged,
                progress=progress,
            )
        finally:
            if progress is not None:
                progress.close()
        if may_start_service:
            start_service(store, quiet=quiet)
    if as_json:
        from snapstore.render import dump_json

        return [], dump_json({**cp.to_json(), "reused": cp.reused, "warnings": list(cp.warnings)})
    if quiet:
        return [], None
    from snapstore.render import snapshot_line

    return list(cp.warnings), snapshot_line(cp)


def start_service(store: Store, *, quiet: bool = False) -> None:
    """After a command ran in-process: start the store's service in the background for the
    next commands when ``service.autostart`` (and the environment) want it; never waits, never
    fails the command.  The first one started for a store is said once (not under ``-q``): a
    process left running is never a surprise."""
    idle = store.service_autostart() if store.store_dir else None
    if idle is not None and store.store_dir is not None:
        from snapstore.service import daemon  # only when asked for: it imports subprocess

        if daemon.start_in_background(store.store_dir, idle) and not quiet and daemon.first_autostart(store.store_dir):
            _echo(
                f"snapstore: note: a background service now keeps this store open for the next commands"
                f" (it exits after {idle / 60:g} min idle; `snapstore serve --stop` stops it,"
                " SNAPSTORE_AUTOSTART=0 or `snapstore config service.autostart false` turns this off)",
                err=True,
            )


def _echo(text: str, err: bool = False) -> None:
    # What click.echo does with a str on a text stream: ANSI escapes stripped unless the
    # stream is a terminal, then the text, a newline, a flush.
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    if "\033" in text and not stream.isatty():
        import re

        text = re.sub(r"\033\[[;?0-9]*[a-zA-Z]", "", text)
    stream.write(printable(text) + "\n")  # (no control character of a message or a name reaches the terminal)
    stream.flush()


def fail(message: str) -> None:
    """Print ``snapstore: error: <message on one line>`` on stderr (never raises)."""
    from snapstore.render import printable  # (a message may quote an engine or a remote)

    first = printable(" ".join(str(message).split()))
    try:
        _echo(f"snapstore: error: {first}", err=True)
    except Exception:
        pass


def failure_code(exc: BaseException, fail: Callable[[str], None]) -> int:
    """The exit code of a command that raised ``exc``, its one line said through ``fail``.

    The one mapping for both entry points (this module and the click app): a SnapstoreError
    says its message, an interrupt says so, a closed stdout is no error, anything else is a bug
    (one line; the traceback only with SNAPSTORE_DEBUG=1, when this re-raises).
    """
    from snapstore.errors import EXIT_OK, InternalError, Interrupted, SnapstoreError, no_space

    exc = no_space(exc) or exc  # a full disk met anywhere is said as such, not as a bug
    if isinstance(exc, SnapstoreError):
        fail(exc.message)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        fail("interrupted (a restore in progress is finished by the next command)")
        return Interrupted.exit_code
    if isinstance(exc, BrokenPipeError):
        # The reader went away (``snapstore cat ... | head``): not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - replaces the closed stdout for good
        except OSError:
            pass
        return EXIT_OK
    if os.environ.get("SNAPSTORE_DEBUG"):
        raise exc
    fail(f"internal error: {type(exc).__name__}: {exc} (set SNAPSTORE_DEBUG=1 for details)")
    return InternalError.exit_code


def main(argv: list[str], opener: Callable[[Any], Store] | None = None) -> int | None:
    """Run a plain ``snapshot`` command line without click; None when it is not one.

    ``opener`` is the resident service's way to open the store (:data:`snapstore.cli.app.Opener`):
    the service runs a plain snapshot here too, sparing click's parsing of every request."""
    opts = parse_snapshot(argv)
    if opts is None:
        return None
    from snapstore.errors import EXIT_OK

    try:
        metadata = parse_meta(opts["meta"])

        def open_store() -> Store:
            from snapstore.store import Store

            if opener is not None:  # (what it reads of the click path's Ctx; no click imported here)
                from types import SimpleNamespace

                where = SimpleNamespace(store_dir=opts["store_dir"], directory=opts["directory"] or ".", lock_timeout=opts["lock_timeout"])
                store = opener(where)
            else:
                store = Store.find(opts["directory"] or ".", store=opts["store_dir"], lock_timeout=opts["lock_timeout"])
            note = store.format_note  # as the click path's Ctx.open says it
            for line in store.notes + ([note] if note is not None else []):
                _echo(f"snapstore: warning: {line}", err=True)
            return store

        warnings, text = snapshot_output(
            open_store,
            message=opts["message"],
            tags=opts["tags"],
            task=opts["task"],
            metadata=metadata,
            messages=None,
            skip_unchanged=opts["skip_unchanged"],
            quiet=opts["quiet"],
            as_json=opts["as_json"],
            may_start_service=opener is None,
        )
        for w in warnings:
            _echo(f"snapstore: warning: {w}", err=True)
        if text is not None:
            _echo(text)
        return EXIT_OK
    except (KeyboardInterrupt, Exception) as exc:
        return failure_code(exc, fail)
