"""Commands for coding agents: hook, integrate, mcp, edit."""

from __future__ import annotations

import json
import os

import click

from snapstore.cli.app import Ctx, Exit, command, echo_json, read_json_list, read_stdin_text
from snapstore.errors import UsageError

#: The writer-lock wait of a hook: well inside the 20 s Claude Code gives it.
HOOK_LOCK_TIMEOUT = 10.0


#: Agents whose hooks ``snapstore hook AGENT`` handles (Claude Code's payload shape).
HOOK_AGENTS = ("claude-code", "codex", "gemini", "copilot")


def _event_cwd(raw: str) -> str | None:
    try:
        cwd = json.loads(raw).get("cwd")
    except (ValueError, AttributeError):
        return None
    return cwd if isinstance(cwd, str) and os.path.isabs(cwd) and os.path.isdir(cwd) else None


@command(example="echo '{...event...}' | snapstore hook claude-code   # as Claude Code runs it")
@click.argument("agent")
@click.option("--no-service", is_flag=True, envvar="SNAPSTORE_NO_SERVICE", help="Do not start the resident service (also SNAPSTORE_NO_SERVICE=1).")
@click.pass_obj
def hook(obj: Ctx, agent: str, no_service: bool) -> None:
    """Record checkpoints for one agent hook event read on stdin (agent: claude-code, codex, gemini,
    copilot).

    Always exits 0 (exit 2 would block the agent's tool call): a failure is logged in the
    store's hook.log and shown once per session as a systemMessage.
    """
    from snapstore.integrations import claude_code

    raw = read_stdin_text()
    if agent not in HOOK_AGENTS:
        if not any(f'"{name}"' in raw for name in claude_code.SILENT_EVENTS):
            echo_json({"systemMessage": f"snapstore: unknown agent {agent!r} in the hook command (use {' or '.join(HOOK_AGENTS)})"})
        raise Exit(0)
    in_service = obj.in_service
    if agent in ("gemini", "copilot"):  # other names, no call ids: mapped onto the one event model
        from importlib import import_module

        adapter = import_module(f"snapstore.integrations.{agent}")
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        event = adapter.normalize(doc) if isinstance(doc, dict) else None
        if event is None:  # nothing to record (Gemini reads stdout as JSON)
            if agent == "gemini":
                click.echo("{}")
            return
        raw = json.dumps(event)
        project = _event_cwd(raw) if agent == "copilot" else adapter.project_of(event)
        project = project or os.getcwd()
    elif agent == "codex":  # Codex names the session's directory in the event itself
        project = _event_cwd(raw) or os.getcwd()
    else:
        # In the service the client has already moved to $CLAUDE_PROJECT_DIR (the service's own
        # environment is that of whoever started it).
        project = os.getcwd() if in_service else (os.environ.get("CLAUDE_PROJECT_DIR") or os.getcwd())
    obj.directory = os.path.join(project, obj.directory) if obj.directory != "." else project
    obj.lock_timeout = min(obj.lock_timeout, HOOK_LOCK_TIMEOUT)
    out = claude_code.run(raw, project, obj.open, start_service=not (in_service or no_service), agent=agent)
    if agent == "copilot":
        return  # Copilot reads a preToolUse hook's output as a permission decision: say nothing
    if out or agent == "gemini":
        click.echo(out or "{}")


@command(example="snapstore integrate claude-code --mcp\nsnapstore integrate codex --mcp   # .codex/hooks.json and .codex/config.toml\nsnapstore integrate claude-code --remove\nsnapstore integrate --print cursor > .cursor/mcp.json")
@click.argument("agent", required=False)
@click.option("--scope", type=click.Choice(["project", "local", "user"]), default="project", show_default=True, help="Which settings file: .claude/settings.json, .claude/settings.local.json or ~/.claude/settings.json.")
@click.option("--mcp", is_flag=True, help="Also register the MCP server (.mcp.json, or ~/.claude.json for local/user).")
@click.option("--remove", is_flag=True, help="Take snapstore's entries (only those) out again.")
@click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
@click.option("--print", "print_for", type=click.Choice(["cursor", "cline", "codex", "generic"]), help="Print the MCP server configuration for another agent instead (codex: the TOML table).")
@click.pass_obj
def integrate(obj: Ctx, agent: str | None, scope: str, mcp: bool, remove: bool, dry_run: bool, print_for: str | None) -> None:
    """Add snapstore's hooks (and MCP server) to an agent's settings, keeping everything else.

    Idempotent; the previous file is kept as FILE.bak; prints each change.
    """
    from snapstore.integrations import settings

    if print_for is not None:
        if agent is not None:
            raise UsageError("--print takes the agent itself: snapstore integrate --print cursor")
        click.echo(settings.printable_config(print_for))
        return
    if agent in ("codex", "gemini", "copilot"):
        from importlib import import_module

        adapter = import_module(f"snapstore.integrations.{agent}")
        lines = adapter.integrate(obj.directory, scope=scope, mcp=mcp, remove=remove, dry_run=dry_run)
    elif agent == "claude-code":
        project = os.environ.get("CLAUDE_PROJECT_DIR") or obj.directory
        lines = settings.integrate_claude_code(project, scope=scope, mcp=mcp, remove=remove, dry_run=dry_run)
    else:
        raise UsageError("integrate what? snapstore integrate claude-code|codex|gemini|copilot, or --print cursor|cline|codex|generic")
    prefix = "would change " if dry_run else ""
    for line in lines:
        click.echo(prefix + line)
    if not lines:
        click.echo("nothing to change: " + ("no snapstore entries found" if remove else "already integrated"))


@command(name="mcp", example='snapstore mcp   # registered as {"command": "snapstore", "args": ["mcp"]}\nsnapstore mcp --root ~/src/app   # for hosts that start servers in / or $HOME')
@click.option("--root", metavar="DIR", help="The project's directory (default: -C, an agent's project variable, the current directory).")
@click.option("--create-anywhere", "anywhere", is_flag=True, help="Let a write tool create a store even at /, at $HOME or among other users' files.")
@click.pass_obj
def mcp_(obj: Ctx, root: str | None, anywhere: bool) -> None:
    """Run the MCP server (stdio) for the project: --root (or -C), else $CLAUDE_PROJECT_DIR or
    $GEMINI_PROJECT_DIR, else the current directory.  A write tool creates a store there only if
    it is not /, not $HOME and holds no other user's files (unless --create-anywhere)."""
    try:
        from snapstore.integrations import mcp_server
    except ImportError as exc:
        raise UsageError(f"the MCP server needs the mcp package: pip install 'snapstore[agents]' ({exc})") from exc
    from snapstore.integrations.roots import project_root

    given = root or (obj.directory if obj.directory != "." else None)
    mcp_server.serve(project_root(given, os.getcwd()), anywhere)


@command(example="snapstore edit src/app.py --old 'return 1' --new 'return 2'\nsnapstore edit src/app.py --edits edits.json --dry-run")
@click.argument("path")
@click.option("--old", "old_text", metavar="TEXT", help="The text to replace.")
@click.option("--new", "new_text", metavar="TEXT", help="What replaces it.")
@click.option("--edits", "edits_src", metavar="FILE|-", help='A JSON list of {"old_text", "new_text"} applied in order.')
@click.option("--replace-all", is_flag=True, help="Replace every match (else two matches are an error).")
@click.option("--expected", metavar="HASH", help="Refuse (exit 9) unless the file is still this version.")
@click.option("--dry-run", is_flag=True, help="Print the diff; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
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
