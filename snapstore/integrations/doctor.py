"""``snapstore doctor``: will the agents' hooks run, and what failed lately.

For every agent configuration ``integrate`` writes that exists (the project's, and the user's
where the agent has one), it lists the snapstore each one runs and says when that cannot work
from the agent's ``PATH`` (a bare ``snapstore``, a path that is gone, a moved virtualenv) or when
``integrate`` would change the entries (another executable, an older matcher).  Then the last
lines of the two failure logs: the user's ``hook-failures.log`` (:mod:`hook_log`: hooks that
failed before reaching a store, Cline's and OpenCode's when snapstore could not run) and the
store's ``hook.log``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from snapstore.errors import SnapstoreError
from snapstore.integrations import hook_log
from snapstore.integrations.executable import missing_dependency, program_words, resolve

#: agent -> ((scope, folder kind, path), ...): where integrate writes the hook entries.
FILES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "claude-code": (("project", "project", ".claude/settings.json"), ("local", "project", ".claude/settings.local.json"),
                    ("user", "home", ".claude/settings.json")),
    "codex": (("project", "project", ".codex/hooks.json"), ("user", "home", ".codex/hooks.json")),
    "gemini": (("project", "project", ".gemini/settings.json"), ("user", "home", ".gemini/settings.json")),
    "copilot": (("project", "project", ".github/hooks/snapstore.json"),),
    "cursor": (("project", "project", ".cursor/hooks.json"), ("user", "home", ".cursor/hooks.json")),
    "cline": (("project", "project", ".clinerules/hooks/PreToolUse"), ("user", "home", "Documents/Cline/Hooks/PreToolUse")),
    "windsurf": (("project", "project", ".windsurf/hooks.json"), ("user", "home", ".codeium/windsurf/hooks.json")),
    "kiro": (("project", "project", ".kiro/hooks/snapstore.json"), ("user", "home", ".kiro/hooks/snapstore.json")),
    "opencode": (("project", "project", ".opencode/plugins/snapstore.js"), ("user", "home", ".config/opencode/plugins/snapstore.js")),
}
LOG_LINES = 5


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    problems: int = 0

    def problem(self, text: str) -> None:
        self.lines.append("  problem: " + text)
        self.problems += 1


def check(project: str, home: str | None = None) -> Report:
    """The doctor's report for ``project``."""
    home = home if home is not None else os.path.expanduser("~")
    project = os.path.abspath(project)
    report = Report()
    exe = resolve()
    report.lines.append(f"snapstore for agents: {exe.command()}")
    if exe.note:
        report.problem(exe.note.removeprefix("note: "))
    for agent, places in FILES.items():
        for scope, kind, rel in places:
            path = os.path.join(project if kind == "project" else home, rel)
            found = _commands(agent, path)
            if found:
                _check_agent(report, agent, scope, path, found, project, home)
    _logs(report, project)
    report.lines.append(f"{report.problems} problem(s)" if report.problems else "no problems found")
    return report


def _commands(agent: str, path: str) -> list[list[str]]:
    from snapstore.integrations.hook_files import json_commands, read_small

    try:
        text = read_small(path)
    except SnapstoreError:
        return []
    if text is None:
        return []
    if agent == "cline":
        from snapstore.integrations.cline import commands_in

        return commands_in(text)
    if agent == "opencode":
        from snapstore.integrations.opencode import commands_in as plugin_commands

        return plugin_commands(text)
    return json_commands(text, agent)


def _check_agent(report: Report, agent: str, scope: str, path: str, found: list[list[str]], project: str, home: str) -> None:
    from snapstore.integrations.agents import integrate

    again = f"run 'snapstore integrate {agent}{'' if scope == 'project' else ' --scope ' + scope}' again"
    programs = sorted({tuple(words) for words in found})
    report.lines.append(f"{agent} ({scope}): {path} runs {', '.join(' '.join(p) for p in programs)}")
    for words in programs:
        program = words[0]
        if program_words(list(words)) == 0:
            continue
        if not os.path.isabs(program):
            report.problem(f"{agent} runs {program!r} by name, which the agent's PATH may lack: {again}")
        elif not (os.path.isfile(program) and os.access(program, os.X_OK)):
            report.problem(f"{agent} runs {program}, which does not exist: {again}")
        elif (gone := missing_dependency(program)) is not None:
            report.problem(f"{agent} runs {program}, which looks moved ({gone} is gone): {again}")
    try:
        pending = [line for line in integrate(agent, project, scope=scope, mcp=False, remove=False, dry_run=True, home=home)
                   if not line.startswith("note:")]
    except SnapstoreError as exc:
        report.problem(f"{agent}: {exc.message}")
        return
    if pending:
        report.problem(f"{agent}'s entries are out of date ({pending[0]}): {again}")


def _logs(report: Report, project: str) -> None:
    from snapstore.integrations.claude_code import LOG_NAME
    from snapstore.store import Store

    logs = [hook_log.path()]
    try:
        logs.append(os.path.join(Store.locate(project), LOG_NAME))
    except SnapstoreError:
        pass
    for log in logs:
        recent = hook_log.tail(log, LOG_LINES)
        if recent:
            report.lines.append(f"last lines of {log}:")
            report.lines += ["  " + line for line in recent]
        else:
            report.lines.append(f"no hook failures logged in {log}")
