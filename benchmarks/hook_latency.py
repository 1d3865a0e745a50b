"""Per-event latency of ``snapstore hook AGENT`` for a no-change pre-tool event (issues 13, 23).

``python -m benchmarks.hook_latency [--runs N] [--tree DIR | --small | --files N] [--agents a,b]
[--http] [--console-script]``: copies the Python standard library (the "stdlib tree") to a temporary directory
unless ``--tree`` is given (``--small``: a 4-file tree; ``--files N``: N small files), records a
first checkpoint, then times N hook processes (the Python client, event on stdin) per agent,
without the service (in-process) and with it; ``--http`` also times Claude Code's http hook path
(``integrate claude-code --http``: a POST answered by the service, measured from this process,
so without Claude Code's own HTTP client).  Prints the median and the 90th percentile of each.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

CLIENT = [sys.executable, "-c", "from snapstore.service.client import run; run()"]


def use_console_script() -> None:
    """Time the ``snapstore`` beside this interpreter instead (the native client when built)."""
    CLIENT[:] = [os.path.join(os.path.dirname(sys.executable), "snapstore")]


def stdlib_tree(dest: str) -> str:
    src = sysconfig.get_paths()["stdlib"]
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("site-packages", "__pycache__", "*.pyc"), symlinks=True)
    return dest


#: Each agent's no-change pre-tool event, as its hook receives it.
EVENTS = {
    "claude-code": {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t"},
    "codex": {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t", "turn_id": "1"},
    "gemini": {"hook_event_name": "BeforeTool", "tool_name": "run_shell_command", "tool_input": {"command": "ls"}},
    "copilot": {"hook_event_name": "PreToolUse", "tool_name": "bash", "tool_input": {"command": "ls"}},
    "cursor": {"hook_event_name": "beforeShellExecution", "conversation_id": "bench", "command": "ls"},
    "cline": {"hookName": "PreToolUse", "taskId": "bench", "preToolUse": {"toolName": "execute_command", "parameters": {"command": "ls"}}},
    "windsurf": {"agent_action_name": "pre_run_command", "trajectory_id": "bench", "tool_info": {"command_line": "ls"}},
    "kiro": {"hook_event_name": "preToolUse", "tool_name": "execute_bash", "tool_input": {"command": "ls"}},
    "opencode": {"hook_event_name": "tool.execute.before", "sessionID": "bench", "callID": "c", "tool": "bash", "args": {"command": "ls"}},
}
#: Each agent's post-tool event of the same no-change call (a pre+post pair is what every tool
#: call of an agent costs).
POST_EVENTS = {
    "claude-code": {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t",
                    "tool_response": {"stdout": ""}},
    "codex": {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "t", "turn_id": "1"},
    "gemini": {"hook_event_name": "AfterTool", "tool_name": "run_shell_command", "tool_input": {"command": "ls"},
               "tool_response": {"llmContent": ""}},
    "copilot": {"hook_event_name": "PostToolUse", "tool_name": "bash", "tool_input": {"command": "ls"},
                "tool_result": {"result_type": "success"}},
    "cursor": {"hook_event_name": "afterShellExecution", "conversation_id": "bench", "command": "ls", "output": ""},
    "cline": {"hookName": "PostToolUse", "taskId": "bench", "postToolUse": {"toolName": "execute_command",
              "parameters": {"command": "ls"}, "result": "", "success": True}},
    "windsurf": {"agent_action_name": "post_run_command", "trajectory_id": "bench", "tool_info": {"command_line": "ls"}},
    "kiro": {"hook_event_name": "postToolUse", "tool_name": "execute_bash", "tool_input": {"command": "ls"},
             "tool_response": {"success": True}},
    "opencode": {"hook_event_name": "tool.execute.after", "sessionID": "bench", "callID": "c", "tool": "bash",
                 "args": {"command": "ls"}, "exit": 0},
}
#: What a no-change event's hook prints, per agent (anything else is a failure).
QUIET = ("", "{}", '{"cancel": false}')


def time_events(tree: str, runs: int, env: dict[str, str], agent: str = "claude-code") -> list[float]:
    event = json.dumps({"session_id": "bench", "transcript_path": "/nonexistent", "cwd": tree, "workspace_roots": [tree],
                        "workspaceRoots": [tree], "directory": tree, **EVENTS[agent]})
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([*CLIENT, "hook", agent], input=event, text=True, capture_output=True, cwd=tree, env=env)
        out.append(time.perf_counter() - start)
        if done.returncode != 0 or done.stdout.strip() not in QUIET:
            raise SystemExit(f"hook failed: {done.returncode} {done.stdout} {done.stderr}")
    return out


def _payload(tree: str, doc: dict) -> str:
    return json.dumps({"session_id": "bench", "transcript_path": "/nonexistent", "cwd": tree, "workspace_roots": [tree],
                       "workspaceRoots": [tree], "directory": tree, **doc})


def time_pairs(tree: str, runs: int, env: dict[str, str], agent: str) -> list[float]:
    """Seconds of each pre+post pair of one no-change shell call, as the agent runs them: two
    hook processes, one after the other."""
    events = (_payload(tree, EVENTS[agent]), _payload(tree, POST_EVENTS[agent]))
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        for event in events:
            done = subprocess.run([*CLIENT, "hook", agent], input=event, text=True, capture_output=True, cwd=tree, env=env)
            if done.returncode != 0 or done.stdout.strip() not in QUIET:
                raise SystemExit(f"hook failed: {done.returncode} {done.stdout} {done.stderr}")
        out.append(time.perf_counter() - start)
    return out


def pairs_table(trees: dict[str, str], runs: int, agents: list[str]) -> str:
    """Markdown: the median and 90th percentile of a pre+post pair per agent and tree, through
    the service (the client beside this interpreter: the native one when built)."""
    import platform

    lines = [
        "| agent | " + " | ".join(f"{name}: median | {name}: p90" for name in trees) + " | target |",
        "|---|" + "---:|---:|" * len(trees) + "---|",
    ]
    results: dict[str, list[str]] = {a: [] for a in agents}
    for tree in trees.values():
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "CLAUDE_"))}
        env["CLAUDE_PROJECT_DIR"] = tree
        subprocess.run([*CLIENT, "init", "-q"], cwd=tree, check=True, env=env)
        subprocess.run([*CLIENT, "snapshot", "-q", "-m", "base"], cwd=tree, check=True, env=env)
        subprocess.run([*CLIENT, "serve", "--detach"], cwd=tree, check=True, env=env, capture_output=True)
        try:
            for agent in agents:
                time_pairs(tree, 5, env, agent)  # (warm: the service's caches, the page cache)
                samples = sorted(time_pairs(tree, runs, env, agent))
                p90 = samples[min(len(samples) - 1, int(len(samples) * 0.9))]
                results[agent] += [f"{statistics.median(samples) * 1000:.1f} ms", f"{p90 * 1000:.1f} ms"]
        finally:
            subprocess.run([*CLIENT, "serve", "--stop"], cwd=tree, env=env, capture_output=True)
    for agent in agents:
        lines.append(f"| {agent} | " + " | ".join(results[agent]) + " | <= 10 ms |")
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    client = os.path.basename(CLIENT[0]) if len(CLIENT) == 1 else "python client"
    return "\n".join([
        "# Hook cost per tool call (`make bench`: `python -m benchmarks.hook_latency --pairs`)",
        "",
        f"A no-change shell call's pre-tool and post-tool hook, as each agent runs them (two hook "
        f"processes, `{client}` through the service), {runs} pairs per agent and tree; the target is "
        "issue 37's (<= 10 ms a pair). Durability: the store's default (each commit's data pages "
        "synced).",
        "",
        *lines,
        "",
        f"**Machine:** {os.cpu_count()} cores, {platform.platform()}, Python {platform.python_version()}; "
        f"load average (1/5/15 min) {load} at the end; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
    ])


def time_command(tree: str, runs: int, env: dict[str, str], *argv: str) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([*CLIENT, *argv], cwd=tree, env=env, check=True, capture_output=True)
        out.append(time.perf_counter() - start)
    return out


def time_http(tree: str, runs: int) -> list[float]:
    """Claude Code's http hook path: the no-change PreToolUse POSTed to the service."""
    import http.client

    from snapstore.service import http_hooks

    found = http_hooks.load(os.path.join(tree, ".snapstore"))
    if found is None:
        raise SystemExit("no http endpoint: integrate claude-code --http failed")
    port, token = found
    body = json.dumps({"session_id": "bench", "transcript_path": "/nonexistent", "cwd": tree, **EVENTS["claude-code"]})
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/snapstore/hook/claude-code", body=body, headers={"Authorization": f"Bearer {token}"})
        answer = conn.getresponse()
        answer.read()
        conn.close()
        out.append(time.perf_counter() - start)
        if answer.status != 200:
            raise SystemExit(f"http hook failed: {answer.status}")
    return out


def many_files(dest: str, count: int) -> str:
    for i in range(count):
        folder = os.path.join(dest, f"d{i // 100:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"f{i:05d}.py"), "w") as f:
            f.write(f"# file {i}\nvalue = {i}\n")
    return dest


def report(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"{name:<30} median {statistics.median(samples) * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms   (n={len(samples)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--tree", help="an existing tree to use (a store is created in it)")
    parser.add_argument("--small", action="store_true", help="a 4-file tree instead of the stdlib")
    parser.add_argument("--files", type=int, help="a tree of this many small files instead of the stdlib")
    parser.add_argument("--agents", default="claude-code", help="comma-separated: " + ",".join(EVENTS))
    parser.add_argument("--http", action="store_true", help="also time Claude Code's http hook path")
    parser.add_argument("--console-script", action="store_true",
                        help="run the snapstore beside this interpreter (the native client when built), not the Python client")
    parser.add_argument("--pairs", action="store_true",
                        help="time pre+post pairs per agent on a 5-file and an 8.7k-file tree (the console script)")
    parser.add_argument("--md", help="with --pairs: write the table to this Markdown file")
    args = parser.parse_args()
    if args.console_script or args.pairs:
        use_console_script()
    if args.pairs:
        tmp = tempfile.mkdtemp(prefix="hookbench.")
        try:
            small = os.path.join(tmp, "small")
            many_files(small, 5)
            trees = {"5 files": small, "8.7k files": many_files(os.path.join(tmp, "many"), 8700)}
            agents = [a for a in args.agents.split(",") if a] if args.agents != "claude-code" else list(EVENTS)
            table = pairs_table(trees, args.runs, agents)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(table)
        if args.md:
            from .mdfile import write_generated

            write_generated(args.md, table, "benchmarks.hook_latency")
        return
    agents = [a for a in args.agents.split(",") if a]
    tmp = tempfile.mkdtemp(prefix="hookbench.")
    try:
        if args.small:
            tree = os.path.join(tmp, "small")
            os.makedirs(os.path.join(tree, "src"))
            for name in ("README.md", "src/app.py", "src/util.py", "pyproject.toml"):
                with open(os.path.join(tree, name), "w") as f:
                    f.write(f"# {name}\n")
        elif args.files:
            tree = many_files(os.path.join(tmp, "many"), args.files)
        else:
            tree = args.tree or stdlib_tree(os.path.join(tmp, "stdlib"))
        files = sum(len(f) for _, _, f in os.walk(tree))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "CLAUDE_"))}
        env["CLAUDE_PROJECT_DIR"] = tree
        subprocess.run([*CLIENT, "init", "-q"], cwd=tree, check=True, env=env)
        subprocess.run([*CLIENT, "snapshot", "-q", "-m", "base"], cwd=tree, check=True, env=env)
        print(f"tree: {tree} ({files} files)")
        for agent in agents:
            time_events(tree, 3, {**env, "SNAPSTORE_NO_SERVICE": "1"}, agent)  # warm the page cache
            local = time_events(tree, args.runs, {**env, "SNAPSTORE_NO_SERVICE": "1"}, agent)
            print(report(f"{agent}: without the service", local))
        if args.http:
            subprocess.run([*CLIENT, "integrate", "claude-code", "--http"], cwd=tree, check=True, env=env, capture_output=True)
        subprocess.run([*CLIENT, "serve", "--detach"], cwd=tree, check=True, env=env, capture_output=True)
        try:
            if args.http:
                time_http(tree, 3)
                print(report("claude-code: http hook", time_http(tree, args.runs)))
            for agent in agents:
                time_events(tree, 3, env, agent)  # warm the service's caches
                served = time_events(tree, args.runs, env, agent)
                print(report(f"{agent}: with the service", served))
            # What the hook costs beyond the service's own snapshot and a bare round trip.
            print(report("  snapshot --skip-unchanged", time_command(tree, args.runs, env, "snapshot", "-q", "--skip-unchanged")))
            print(report("  list -n 1 (round trip)", time_command(tree, args.runs, env, "list", "-n", "1")))
        finally:
            subprocess.run([*CLIENT, "serve", "--stop"], cwd=tree, env=env, capture_output=True)
        python_only = [time.perf_counter()]
        subprocess.run([sys.executable, "-c", "pass"])
        print(f"(a bare python start: {(time.perf_counter() - python_only[0]) * 1000:.1f} ms)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
