"""What the harness's modules share: the contestant pairs, their order, the log, the floors."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

from . import competitors
from .measure import run

HERE = os.path.dirname(os.path.abspath(__file__))
PAIRS = {"cli": ("snap-cli", "git-cli"), "lib": ("snap-lib", "pygit2"),
         "svc": ("snap-svc", "git-cli"), "watch": ("snap-watch", "pygit2")}
ORDER = ("snap-cli", "git-cli", "snap-svc", "snap-lib", "pygit2", "snap-watch")


def expand(pairs) -> tuple[str, ...]:
    """Every CLI figure is also taken with the service, every library one with the watcher."""
    out = list(pairs)
    out += [x for p, x in (("cli", "svc"), ("lib", "watch")) if p in pairs and x not in out]
    return tuple(out)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _round_trip(where: str, med) -> float | None:
    """A command answered by a service on an empty store (``list -n 1``): the client's process
    and one round trip, the least any command through the service costs; None when it fails."""
    argv = competitors.snapstore_argv()
    env = competitors.snap_env()
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        try:
            run([*argv, "init", "-q"], cwd=tmp, env=env)
            run([*argv, "serve", "--detach"], cwd=tmp, env=env)
        except Exception:  # (a snapstore without the service: no such floor)
            return None
        try:
            ts = [run([*argv, "list", "-n", "1"], cwd=tmp, env=env).seconds for _ in range(7)]
            return statistics.median(ts[1:])
        finally:
            run([*argv, "serve", "--stop"], cwd=tmp, env=env, ok=())


def floors(where: str) -> dict:
    """What bounds a command here: a bare interpreter, the thin client, one fsync in ``where``
    (the file system of the stores); medians of 6 runs after a warm-up."""

    def med(argv):
        ts = [run(argv, env=competitors.snap_env()).seconds for _ in range(7)]
        return statistics.median(ts[1:])

    out = {"python_start_s": med([sys.executable, "-c", "pass"]),
           "client_version_s": med([*competitors.snapstore_argv(), "--version"]),
           "client_roundtrip_s": _round_trip(where, med)}
    with tempfile.NamedTemporaryFile(dir=where) as f:
        ts = []
        for _ in range(7):
            f.write(b"x" * 4096)
            f.flush()
            t0 = time.perf_counter()
            os.fsync(f.fileno())
            ts.append(time.perf_counter() - t0)
    out["fsync_s"] = statistics.median(ts[1:])
    return out


