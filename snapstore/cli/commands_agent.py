"""Commands for coding agents: hook, integrate, mcp, edit."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from snapstore.cli.app import Ctx, command, echo_json, json_option, read_json_list
from snapstore.errors import UsageError

#: Agents whose MCP configuration ``integrate --print`` writes out (kept here: click needs the
#: choices at import, and importing the integrations would slow every command's start).
PRINTABLE = ("cursor", "cline", "windsurf", "kiro", "copilot", "opencode", "codex", "generic")

if TYPE_CHECKING:
    from snapstore.store import Store

#: The writer-lock wait of a hook: well inside the 20 s Claude Code gives it.
HOOK_LOCK_TIMEOUT = 10.0


@command(example="echo '{...event...}' | snapstore hook claude-code   # as Claude Code runs it")
@click.argument("agent")
@click.option("--no-service", is_flag=True, envvar="SNAPSTORE_NO_SERVICE", help="Do not start the resident service (also SNAPSTORE_NO_SERVICE=1).")
@click.pass_obj
def hook(obj: Ctx, agent: str, no_service: bool) -> None:
    """Record checkpoints for one agent hook event read on stdin (agent: claude-code, codex,
    gemini, copilot, cursor, cline, windsurf, kiro, opencode).

    Always exits 0 (exit 2 would block the agent's tool call): a failure is logged in the
    store's hook.log and shown once per session where the agent shows hook messages.
    """
    out = run_hook(obj, agent, no_service)
    if out:
        click.echo(out)


def plain_hook(argv: list[str], *, opener: Callable[[Ctx], Store]) -> int | None:
    """``snapstore hook AGENT [--no-service]`` as the resident service runs it for an agent's
    every tool event, without click's parsing; None for any other form (click parses it).  The
    body and the output are the click command's (:func:`run_hook`)."""
    if len(argv) not in (2, 3) or argv[0] != "hook" or argv[1].startswith("-") or argv[2:] not in ([], ["--no-service"]):
        return None
    try:
        lock_timeout = float(os.environ.get("SNAPSTORE_LOCK_TIMEOUT") or "30")
    except ValueError:
        return None  # click's message for a bad number
    import sys

    ctx = Ctx(os.environ.get("SNAPSTORE_STORE") or None, None, lock_timeout, opener=opener)
    out = run_hook(ctx, argv[1], len(argv) == 3 or bool(os.environ.get("SNAPSTORE_NO_SERVICE")))
    if out:
        from snapstore.cli.app import Printable

        Printable(sys.stdout).write(out + "\n")  # (the stream cli.main gives click.echo)
    return 0


def run_hook(obj: Ctx, agent: str, no_service: bool) -> str:
    """The body of ``snapstore hook``: the event on stdin recorded, what to print (never
    raises an Exception).  Shared with the service's click-free path (cli.lean.hook)."""
    import sys

    from snapstore.integrations import agents
    from snapstore.integrations.bounded_json import read_stream

    obj.lock_timeout = min(obj.lock_timeout, HOOK_LOCK_TIMEOUT)
    given = obj.directory

    def open_at(project: str) -> Callable[[], Store]:
        obj.directory = os.path.join(project, given) if given != "." else project
        return obj.open

    try:
        return agents.hook(agent, read_stream(sys.stdin), open_at, start_service=not (obj.in_service or no_service))
    except Exception as exc:  # noqa: BLE001 - a hook must never fail the agent's tool call
        return agents.failed(agent, exc)


@command(example="snapstore integrate claude-code --mcp\nsnapstore integrate codex --mcp   # .codex/hooks.json and .codex/config.toml\nsnapstore integrate cursor --dry-run\nsnapstore integrate claude-code --remove\nsnapstore integrate --print cline   # paste into Cline's MCP settings")
@click.argument("agent", required=False)
@click.option("--scope", type=click.Choice(["project", "local", "user"]), default="project", show_default=True, help="Which settings: the project's, the project's unshared ones (Claude Code's settings.local.json), or your own for every project.")
@click.option("--mcp", is_flag=True, help="Also register the MCP server where the agent reads it.")
@click.option("--remove", is_flag=True, help="Take snapstore's entries (only those) out again.")
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option("--print", "print_for", type=click.Choice(list(PRINTABLE)), help="Print the agent's MCP server configuration instead (codex: the TOML table).")
@click.option("--http", is_flag=True, help="Claude Code: tool events as http hooks answered by the store's service (no process per event), in .claude/settings.local.json.")
@click.pass_obj
def integrate(obj: Ctx, agent: str | None, scope: str, mcp: bool, remove: bool, dry_run: bool, print_for: str | None, http: bool) -> None:
    """Add snapstore's hooks (and MCP server) to an agent's settings, keeping everything else
    (agent: claude-code, codex, gemini, copilot, cursor, cline, windsurf, kiro, opencode).

    Idempotent; a merged settings file's previous version is kept as FILE.bak; prints each change.
    """
    from snapstore.integrations import agents

    if print_for is not None:
        if agent is not None:
            raise UsageError("--print takes the agent itself: snapstore integrate --print cursor")
        click.echo(agents.printable_config(print_for, obj.directory))
        return
    if agent is None:
        raise UsageError(f"integrate what? snapstore integrate {'|'.join(agents.AGENTS)}, or --print AGENT")
    lines = agents.integrate(agent, obj.directory, scope=scope, mcp=mcp, remove=remove, dry_run=dry_run, http=http)
    prefix = "would change " if dry_run else ""
    notes = [line for line in lines if line.startswith("note: ")]
    changes = [line for line in lines if not line.startswith("note: ")]
    for line in changes:
        click.echo(prefix + line)
    if not changes:
        click.echo("nothing to change: " + ("no snapstore entries found" if remove else "already integrated"))
    for line in notes:
        click.echo(line, err=True)


@command(example="snapstore doctor   # will the agents' hooks run here? what failed lately?")
@click.pass_obj
def doctor(obj: Ctx) -> None:
    """Check the agents' hook configurations of this project (and yours): the snapstore each
    runs, whether that works from the agent's PATH, whether 'integrate' would change them; then
    the last hook failures logged.  Exits 0 (the last line counts the problems)."""
    from snapstore.integrations.doctor import check

    for line in check(obj.directory).lines:
        click.echo(line)


@command(name="mcp", example='snapstore mcp   # registered as {"command": "snapstore", "args": ["mcp"]}\nsnapstore mcp --root ~/src/app   # for hosts that start servers in / or $HOME')
@click.option("--root", metavar="DIR", help="The project's directory (default: -C, an agent's project variable, the current directory).")
@click.option("--create-anywhere", "anywhere", is_flag=True, help="Let a write tool create a store even at /, at $HOME or among other users' files.")
@click.pass_obj
def mcp_(obj: Ctx, root: str | None, anywhere: bool) -> None:
    """Run the MCP server (stdio) for the project: --root (or -C), else $CLAUDE_PROJECT_DIR or
    $GEMINI_PROJECT_DIR, else the client's first workspace root (MCP roots), else the current
    directory.  A write tool creates a store there only if
    it is not /, not $HOME and holds no other user's files (unless --create-anywhere)."""
    from importlib.util import find_spec

    # (The SDK itself is imported only once the first request is answered: see mcp_front.)
    if find_spec("mcp") is None:
        raise UsageError("the MCP server needs the mcp package: pip install 'snapstore[agents]'")
    from snapstore.integrations import mcp_front
    from snapstore.integrations.roots import project_root

    given = root or (obj.directory if obj.directory != "." else None)
    chosen = project_root(given, os.getcwd())
    # Only a root nobody named (the working directory) gives way to the client's workspace roots.
    mcp_front.serve(chosen, anywhere, named=given is not None or chosen != os.path.abspath(os.getcwd()))


@command(example="snapstore rewind --claude-session 5f0c... --to '#3'   # files and conversation\nclaude --resume <the new session id it prints>")
@click.option("--claude-session", "session", required=True, metavar="ID", help="The Claude Code session whose checkpoint to go back to.")
@click.option("--to", "ref", required=True, metavar="REF", help="The checkpoint (#N as list shows it, latest~N, a tag, an id prefix; latest counts within the session).")
@click.option("--no-files", is_flag=True, help="Only write the new session; leave the files as they are.")
@click.option("--transcript", metavar="FILE", help="The session's transcript (default: found under ~/.claude/projects).")
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
@click.pass_obj
def rewind(obj: Ctx, session: str, ref: str, no_files: bool, transcript: str | None, dry_run: bool) -> None:
    """Go back to a checkpoint of a Claude Code session: restore the files (undoable: snapstore
    undo) and write a new session, cut at that checkpoint, for claude --resume.  The original
    session's transcript is left untouched."""
    from snapstore.integrations.claude_transcript import rewind as rewind_session

    with obj.open() as store:
        done = rewind_session(store, session, ref, files=not no_files, transcript=transcript, dry_run=dry_run)
    cp = done.checkpoint
    if done.report is not None:
        verb = "would restore" if dry_run else "restored"
        click.echo(f"{verb} the files of {cp.short_id} ({cp.message}): {len(done.report.changes)} changed" + ("" if dry_run else "; undo: snapstore undo"))
    click.echo(f"conversation: {done.kept} of {done.total} transcript lines, up to {cp.iso_time()}")
    if done.session is None:
        click.echo("dry run: nothing written", err=True)
    else:
        click.echo(f"new session {done.session} ({done.path})")
        click.echo(f"resume it: claude --resume {done.session}")


@command(example="snapstore edit src/app.py --old 'return 1' --new 'return 2'\nsnapstore edit src/app.py --edits edits.json --dry-run")
@click.argument("path")
@click.option("--old", "old_text", metavar="TEXT", help="The text to replace.")
@click.option("--new", "new_text", metavar="TEXT", help="What replaces it.")
@click.option("--edits", "edits_src", metavar="FILE|-", help='A JSON list of {"old_text", "new_text"} applied in order.')
@click.option("--replace-all", is_flag=True, help="Replace every match (else two matches are an error).")
@click.option("--expected", metavar="HASH", help="Refuse (exit 9) unless the file is still this version.")
@click.option("--dry-run", is_flag=True, help="Print the diff; change nothing.")
@json_option
@click.pass_obj
def edit(
    obj: Ctx,
    path: str,
    old_text: str | None,
    new_text: str | None,
    edits_src: str | None,
    replace_all: bool,
    expected: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Replace text in PATH safely: exact match, then whitespace-insensitive, then similar
    (the level and lines are reported); checkpoint first; atomic write; prints the diff."""
    edits = _edits(old_text, new_text, edits_src)
    target = os.path.abspath(os.path.join(obj.directory, path))
    with obj.open() as store:
        report = store.edit(target, edits, expected=expected, dry_run=dry_run, replace_all=replace_all)
    if as_json:
        echo_json(report.to_json())
        return
    click.echo(report.diff, nl=False)
    for m in report.matches:
        where = f"line {m.start_line}" if m.start_line == m.end_line else f"lines {m.start_line}-{m.end_line}"
        score = "" if m.level == "exact" else f", similarity {m.similarity:.2f}"
        click.echo(f"edit {m.edit}: {m.level} match at {where}{score}", err=True)
    if dry_run:
        click.echo("dry run: nothing written", err=True)
    else:
        click.echo(f"wrote {report.path} (version {report.new_hash[:12]}; checkpoint {str(report.checkpoint)[:12]} before)", err=True)


def _edits(old_text: str | None, new_text: str | None, source: str | None) -> list[dict[str, str]]:

    if source is not None:
        if old_text is not None or new_text is not None:
            raise UsageError("give --old/--new or --edits, not both")
        return read_json_list(source, "the edits", "{old_text, new_text} objects")
    if old_text is None or new_text is None:
        raise UsageError("give --old TEXT and --new TEXT (or --edits FILE|-)")
    return [{"old_text": old_text, "new_text": new_text}]
