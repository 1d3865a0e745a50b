"""Time to the first answer of ``snapstore mcp`` (issue 37 req 5: within 1 s).

``python -m benchmarks.mcp_startup [--runs N] [--console-script]``: starts the server N times over
stdio with the MCP SDK's own client (as an agent does) in a small project with a store, and times
from the spawn to the answer of ``initialize``, then to the answer of ``tools/list`` and of a
first ``checkpoint_list`` call.  Prints the median and the maximum of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def one_run(tree: str, command: list[str]) -> tuple[float, float, float]:
    """Seconds from the spawn to the answers of initialize, tools/list and a first tool call."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    env = {k: v for k, v in os.environ.items() if not k.startswith(("SNAPSTORE_", "CLAUDE_", "GEMINI_"))}
    params = StdioServerParameters(command=command[0], args=[*command[1:], "mcp"], cwd=tree, env=env)
    times: list[float] = []

    async def main() -> None:
        start = time.perf_counter()
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            times.append(time.perf_counter() - start)
            await session.list_tools()
            times.append(time.perf_counter() - start)
            result = await session.call_tool("checkpoint_list", {})
            assert not result.is_error, result.content
            times.append(time.perf_counter() - start)

    anyio.run(main)
    return times[0], times[1], times[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--console-script", action="store_true", help="the snapstore beside this interpreter")
    args = parser.parse_args(argv)
    if args.console_script:
        command = [os.path.join(os.path.dirname(sys.executable), "snapstore")]
    else:
        command = [sys.executable, "-c", "from snapstore.service.client import run; run()"]
    from snapstore.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "a.py"), "w") as f:
            f.write("x = 1\n")
        with Store.init(tmp) as store:
            store.snapshot("first")
        runs = [one_run(tmp, command) for _ in range(args.runs)]
    for i, name in enumerate(("initialize", "tools/list", "first tool call")):
        values = [r[i] * 1000 for r in runs]
        print(f"{name:16} median {statistics.median(values):7.0f} ms   max {max(values):7.0f} ms   ({len(values)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
