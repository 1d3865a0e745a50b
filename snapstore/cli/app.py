"""The click group, the options every command shares, and the one place errors become exits.

Each command module (``snapstore.cli.commands_*``) adds its commands to :data:`cli`.  A command
parses its options, calls one :class:`snapstore.Store` method and renders the result; errors are
printed as ``snapstore: error: <one line>`` with the exit code their class carries
(:data:`snapstore.errors.EXIT_CODES`, which also builds the ``--help`` epilog).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from snapstore import __version__
from snapstore.cli.lean import failure_code
from snapstore.errors import (
    EXIT_CODES,
    EXIT_OK,
    UsageError,
)

if TYPE_CHECKING:
    from snapstore.store import Store

CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
F = TypeVar("F", bound=Callable[..., Any])


#: How a command opens its store when not by itself: the resident service passes one to
#: :func:`main` (it keeps the store open).
Opener = Callable[["Ctx"], "Store"]


class Ctx:
    """What the global options say: which store, which tree, how long to wait for the lock;
    and ``opener``, the service's way to open the store (None: the command opens it)."""

    def __init__(self, store_dir: str | None, directory: str | None, lock_timeout: float, opener: Opener | None = None):
        self.store_dir = store_dir
        self.directory = directory or "."
        self.lock_timeout = lock_timeout
        self.opener = opener

    @property
    def in_service(self) -> bool:
        """Whether the command runs inside the resident service."""
        return self.opener is not None

    def open(self, *, reading: bool = False, upgrading: bool = False, remote: str | None = None) -> Store:
        """The store of the tree the user is in (or names with -C), or the one --store names.

        With ``remote`` (``--remote NAME`` of the reading commands): that remote's browsing
        cache, its refs read first, the rest read on demand (:meth:`snapstore.Store.remote_view`).

        A read-only command (``reading``) warns when an interrupted restore is pending: it
        never finishes one itself (writers and ``snapstore recover`` do).  Every command but
        ``upgrade`` notes a format-1 store (it works, and ``upgrade`` makes it smaller).
        """
        if self.opener is not None:
            store = self.opener(self)
        else:
            from snapstore.store import Store

            store = Store.find(self.directory, store=self.store_dir, lock_timeout=self.lock_timeout)
        if remote is not None:
            try:
                view = store.remote_view(remote)
            finally:
                store.close()
            for line in view.notes:  # refs skipped as damaged: the sound ones are browsed
                warn(line)
            return view
        note = None if upgrading else store.format_note
        for line in store.notes + ([note] if note is not None else []):
            warn(line)
        if reading:
            try:
                pending = store.pending_restore()
            except BaseException:
                store.close()
                raise
            if pending is not None:
                warn(pending)
        return store


class Exit(Exception):
    """A command's non-error exit status (diff: 1 when the sides differ)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def echo_json(doc: Any, err: bool = False) -> None:
    from snapstore.render import dump_json

    click.echo(dump_json(doc), err=err)


def read_json_list(source: str, what: str, shape: str) -> list[Any]:
    """A JSON list read from FILE or ``-`` (stdin); UsageError naming ``what`` otherwise."""
    import json

    # Bytes that are not UTF-8 are kept as lone surrogates (surrogateescape): the edit engine
    # matches them byte for byte, and what is stored as text says where it replaced them.
    try:
        if source == "-":
            text = read_stdin_text()
        else:
            with open(source, "rb") as f:
                text = f.read().decode("utf-8", "surrogateescape")
    except OSError as exc:
        raise UsageError(f"cannot read {what} from {source}: {exc.strerror}") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{what} in {source} is not valid JSON: {exc}") from exc
    if not isinstance(doc, list):
        raise UsageError(f"{what} must be a JSON list of {shape}")
    return doc


def read_stdin_text() -> str:
    """All of stdin as text, bytes that are not UTF-8 kept as lone surrogates."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream handed in (the service replays a hook's event)
        return sys.stdin.read()
    data: bytes = buffer.read()
    return data.decode("utf-8", "surrogateescape")


def warn(message: str) -> None:
    click.echo(f"snapstore: warning: {message}", err=True)


def _set_global(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    # The global options are accepted after the command too (`snapstore snapshot --store X`):
    # a value given there overrides the one given before the command.
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None:
            return
        obj = ctx.find_object(Ctx)
        if obj is not None:
            setattr(obj, name, value)

    return callback


#: The one help text of ``--json`` and of ``-q`` (every command that has them: json_option,
#: quiet_option; what each command's JSON holds is in docs/cli.md).
JSON_HELP = "Print the result as JSON (its fields: docs/cli.md)."
QUIET_HELP = "Print nothing but errors (and, for the checks, the problems found)."


def json_option(f: F) -> F:
    """``--json`` (``as_json``), with the one help text."""
    return click.option("--json", "as_json", is_flag=True, help=JSON_HELP)(f)


def quiet_option(f: F) -> F:
    """``-q/--quiet``, with the one help text."""
    return click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)(f)


def global_options(f: F, *, store: bool = True) -> F:
    """The global options (--store, -C, --lock-timeout), also accepted after the command."""
    f = click.option(
        "--lock-timeout",
        type=float,
        expose_value=False,
        callback=_set_global("lock_timeout"),
        help="Seconds to wait for another writer (also accepted before the command).",
    )(f)
    f = click.option(
        "-C",
        "directory",
        metavar="DIR",
        expose_value=False,
        callback=_set_global("directory"),
        help="Run as if started in DIR (also accepted before the command).",
    )(f)
    if store:
        f = click.option(
            "--store",
            "store_dir",
            metavar="DIR",
            expose_value=False,
            callback=_set_global("store_dir"),
            help="Use the store in DIR (also accepted before the command).",
        )(f)
    return f


class PathsAfterDashDash(click.Command):
    """A command whose operands after ``--`` are paths: they land in ``ctx.meta['paths']``.

    click drops ``--`` itself, so ``diff A -- B`` could not tell a path from a checkpoint; the
    split is made here, before click parses the rest.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            cut = args.index("--")
            ctx.meta["paths"] = list(args[cut + 1 :])
            args = args[:cut]
        else:
            ctx.meta["paths"] = []
        return super().parse_args(ctx, args)


def command(
    name: str | None = None, *, example: str, paths_after_dashdash: bool = False, own_store_option: bool = False
) -> Callable[[F], F]:
    """Register a subcommand with the shared options and an ``Example:`` section in its help."""

    def decorate(f: F) -> F:
        lines = "\n".join(f"  {line}" for line in example.strip().splitlines())
        kwargs: dict[str, Any] = {"context_settings": CONTEXT, "epilog": f"\b\nExample:\n{lines}"}
        if paths_after_dashdash:
            kwargs["cls"] = PathsAfterDashDash
        with_globals = global_options(f, store=not own_store_option)
        registered: Any = cli.command(name=name, **kwargs)(with_globals)
        return registered  # type: ignore[no-any-return]  # click returns a Command; callers only need it registered

    return decorate


def _epilog() -> str:
    rows = "\n".join(f"{code:>3}  {text.replace('`', '')}" for code, text in EXIT_CODES)
    return f"\b\nExit codes:\n{rows}"


@click.group(context_settings=CONTEXT, epilog=_epilog())
@click.option(
    "--store",
    "store_dir",
    envvar="SNAPSTORE_STORE",
    metavar="DIR",
    help="Use the store in DIR (default: the nearest .snapstore at or above the current directory).",
)
@click.option("-C", "directory", metavar="DIR", help="Run as if started in DIR.")
@click.option(
    "--lock-timeout",
    type=float,
    default=30.0,
    envvar="SNAPSTORE_LOCK_TIMEOUT",
    show_default=True,
    help="Seconds to wait for another writer before failing with exit code 5.",
)
@click.version_option(version=__version__, prog_name="snapstore", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, store_dir: str | None, directory: str | None, lock_timeout: float) -> None:
    """Checkpoints of a directory tree, without git.

    \b
    Record:   init, snapshot, list, show, log, cat, diff
    Go back:  restore, undo, revert, oplog, recover
    Upkeep:   verify, prune, delete, gc, maintain, stats, config, relocate, serve, upgrade
    Agents:   hook, integrate, doctor, mcp, edit, rewind
    Browse:   ui
    Remotes:  remote, push, fetch, pull, clone

    Every command takes --help (with an example). References: latest, latest~N, #N, a tag,
    an id prefix, :/TEXT (newest message containing TEXT), each optionally @TASK.
    """
    # main() hands the opener in as the context's initial obj.
    ctx.obj = Ctx(store_dir, directory, lock_timeout, opener=ctx.obj)


class Printable:
    """A text stream whose writes show control characters escaped (:func:`render.printable`):
    what the CLI prints holds text from outside (messages, file names, conversations, tool
    names, remotes' answers), which must not drive the terminal.  Bytes written to ``buffer``
    (``cat``, patches) pass as they are; ``unfiltered`` is the stream itself (the progress
    line's own control sequences)."""

    def __init__(self, stream: Any):
        self.unfiltered = stream

    def write(self, text: str) -> int:
        from snapstore.units import printable

        written: int = self.unfiltered.write(printable(text))
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self.unfiltered, name)


def main(argv: list[str] | None = None, *, open_store: Opener | None = None) -> int:
    """Entry point of the console script; returns the exit code.  ``open_store`` replaces how
    commands open the store (the resident service keeps one open)."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Printable(sys.stdout), Printable(sys.stderr)
    try:
        return _main(argv, open_store)
    finally:
        sys.stdout, sys.stderr = saved


def _main(argv: list[str] | None, open_store: Opener | None) -> int:
    try:
        cli.main(args=argv, prog_name="snapstore", standalone_mode=False, obj=open_store)
        return EXIT_OK
    except Exit as exc:
        return exc.code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        return failure_code(KeyboardInterrupt(), _fail)
    except click.ClickException as exc:
        _fail(exc.format_message())
        return exc.exit_code
    except (KeyboardInterrupt, Exception) as exc:
        return failure_code(exc, _fail)


def _fail(message: str) -> None:
    from snapstore.render import printable  # (a message may quote an engine or a remote)

    first = printable(" ".join(str(message).split()))
    try:
        click.echo(f"snapstore: error: {first}", err=True)
    except Exception:
        pass
