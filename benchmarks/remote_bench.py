"""Remotes against a local SeaweedFS (issue 26): ``python -m benchmarks.remote_bench [--quick]``.

Two workloads, every figure a real run through the library (``Store.push`` / ``clone`` /
``fetch``), request counts from the transport's own counter:

- **stdlib**: the standard-library corpus (~7,700 files): the first push, a clone, a 1-file
  incremental push and the fetch of it into the clone;
- **history**: the seeded edit history of benchmarks.replay on that tree, 150 checkpoints each
  pushed as it is taken (an agent pushing after every step), then a clone of the latest, and
  the same 150 checkpoints pushed at once (``push --task``) to a fresh prefix and cloned.

- **peers** (when restic is installed: ``make peers``): snapstore and restic side by side on
  the same engine, row by row (benchmarks/remote_peers.py: first push, incremental push,
  requests, bytes stored, one file read from a fresh machine, clone); ``--peers-only`` runs
  just these rows, ``--no-peers`` skips them.

SeaweedFS runs on 127.0.0.1 on this machine (2 cores shared with the client): timings show the
client's costs and a loopback engine, not a WAN.  ``--md FILE`` writes the table docs/remote.md
quotes; ``--out FILE`` the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from seaweed import BUCKET, SeaweedFS, _free_ports  # noqa: E402

from snapstore.store import Store  # noqa: E402

from .corpora import build_stdlib, tree_stats  # noqa: E402
from .replay import History  # noqa: E402


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _timed(fn: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def make_tree(work: str, small: bool) -> str:
    tree = os.path.join(work, "tree")
    if small:  # --quick: a slice of the stdlib
        os.makedirs(tree)
        from .corpora import stdlib_dir

        for name in ("json", "email", "asyncio", "unittest"):
            shutil.copytree(os.path.join(stdlib_dir(), name), os.path.join(tree, name), symlinks=True)
    else:
        build_stdlib(tree)
    return tree


def run(work: str, weed: SeaweedFS, steps: int, small: bool, tree: str) -> dict[str, Any]:
    os.environ.update(weed.env)
    res: dict[str, Any] = {}
    files, size = tree_stats(tree)
    res["tree"] = {"files": files, "bytes": size}
    url = f"s3://{BUCKET}/bench-{os.urandom(4).hex()}"
    with Store.init(tree) as s:
        s.remote_add("origin", url, endpoint=weed.endpoint)
        s.snapshot("initial", task="bench")
        s.remote_doctor()  # first contact (config, probe) kept out of the push figures
        p, t = _timed(lambda: s.push())
        res["stdlib_push"] = {"seconds": t, "requests": p.requests, "packs": p.packs,
                              "bytes_sent": p.bytes_sent, "bytes_new": p.bytes_new}
        c, t = _timed(lambda: Store.clone(url, os.path.join(work, "clone1"), endpoint=weed.endpoint))
        res["stdlib_clone"] = {"seconds": t, "requests": c.requests, "objects": c.refs[0].objects_read,
                               "bytes_read": c.refs[0].bytes_read}
        hist = History(tree, seed=1)
        hist.step()
        s.snapshot("one step", task="bench")
        p, t = _timed(lambda: s.push())
        res["incremental_push"] = {"seconds": t, "requests": p.requests, "inline": p.inline,
                                   "bytes_sent": p.bytes_sent}
        with Store.open(os.path.join(work, "clone1")) as c1:
            f, t = _timed(lambda: c1.fetch(["bench"]))
        res["incremental_fetch"] = {"seconds": t, "requests": f.requests, "objects": f.refs[0].objects_read}
        per_push: list[float] = []
        per_req: list[int] = []
        snaps: list[float] = []
        for i in range(steps):
            hist.step()
            _, ts = _timed(lambda i=i: s.snapshot(f"step {i}", task="bench"))
            snaps.append(ts)
            p, t = _timed(lambda: s.push())
            per_push.append(t)
            per_req.append(p.requests)
        res["history_push_each"] = {
            "checkpoints": steps, "median_seconds": statistics.median(per_push),
            "max_seconds": max(per_push), "median_requests": statistics.median(per_req),
            "max_requests": max(per_req), "total_requests": sum(per_req),
            "median_snapshot_seconds": statistics.median(snaps),
        }
        c, t = _timed(lambda: Store.clone(url, os.path.join(work, "clone2"), endpoint=weed.endpoint))
        res["history_clone"] = {"seconds": t, "requests": c.requests, "objects": c.refs[0].objects_read,
                                "bytes_read": c.refs[0].bytes_read}
        url2 = f"s3://{BUCKET}/bench-{os.urandom(4).hex()}"
        s.remote_add("batch", url2, endpoint=weed.endpoint)
        s.remote_doctor("batch")
        p, t = _timed(lambda: s.push(remote="batch", task="bench"))
        res["history_push_once"] = {"seconds": t, "requests": p.requests, "checkpoints": len(p.checkpoints),
                                    "packs": p.packs, "bytes_sent": p.bytes_sent}
        c, t = _timed(lambda: Store.clone(url2, os.path.join(work, "clone3"), endpoint=weed.endpoint))
        res["history_once_clone"] = {"seconds": t, "requests": c.requests, "objects": c.refs[0].objects_read,
                                     "bytes_read": c.refs[0].bytes_read}
    res["task_push_each"] = task_push_each(work, weed, steps)
    return res


def task_push_each(work: str, weed: SeaweedFS, steps: int) -> dict[str, Any]:
    """``push --task`` after each of ``steps`` edits of a 200-file tree: the bytes a step sends
    early and late in the history (each record is sent once: they do not grow with it)."""
    import random

    tree = os.path.join(work, "task-tree")
    rng = random.Random(7)
    for i in range(200):
        os.makedirs(os.path.join(tree, f"d{i % 10}"), exist_ok=True)
        with open(os.path.join(tree, f"d{i % 10}", f"f{i}.py"), "w") as f:
            f.write("".join(f"line {j} {rng.random()}\n" for j in range(40)))
    sent: list[int] = []
    with Store.init(tree) as s:
        s.remote_add("origin", f"s3://{BUCKET}/bench-{os.urandom(4).hex()}", endpoint=weed.endpoint)
        s.remote_doctor()
        for i in range(steps):
            with open(os.path.join(tree, f"d{i % 10}", f"f{rng.randrange(200)}.py"), "a") as f:
                f.write(f"step {i}\n")
            s.snapshot(f"step {i}", task="t")
            sent.append(s.push(task="t").bytes_sent)
    k = max(1, min(10, steps // 4))
    return {"checkpoints": steps, "first_median_bytes": statistics.median(sent[1 : 1 + k]),
            "last_median_bytes": statistics.median(sent[-k:]), "total_bytes": sum(sent)}


def markdown(res: dict[str, Any]) -> str:
    tr = res["tree"]
    h = res["history_push_each"]
    rows = [
        ("stdlib: first push", res["stdlib_push"]["seconds"], res["stdlib_push"]["requests"],
         f"{res['stdlib_push']['packs']} packs, {_mib(res['stdlib_push']['bytes_sent'])} sent"),
        ("stdlib: clone", res["stdlib_clone"]["seconds"], res["stdlib_clone"]["requests"],
         f"{res['stdlib_clone']['objects']} objects, {_mib(res['stdlib_clone']['bytes_read'])} read"),
        ("1-step incremental push", res["incremental_push"]["seconds"], res["incremental_push"]["requests"],
         f"inline: {res['incremental_push']['inline']}, {res['incremental_push']['bytes_sent']} B sent"),
        ("fetch of that step into the clone", res["incremental_fetch"]["seconds"], res["incremental_fetch"]["requests"],
         f"{res['incremental_fetch']['objects']} objects"),
        (f"history: push after each of {h['checkpoints']} steps (median)", h["median_seconds"], h["median_requests"],
         f"max {h['max_requests']} requests, {h['total_requests']} in all"),
        ("history: clone of the latest", res["history_clone"]["seconds"], res["history_clone"]["requests"],
         f"{res['history_clone']['objects']} objects, {_mib(res['history_clone']['bytes_read'])} read"),
        (f"history: all {res['history_push_once']['checkpoints']} checkpoints in one push", res["history_push_once"]["seconds"],
         res["history_push_once"]["requests"], f"{res['history_push_once']['packs']} packs, {_mib(res['history_push_once']['bytes_sent'])} sent"),
        ("history (one push): clone of the latest", res["history_once_clone"]["seconds"], res["history_once_clone"]["requests"],
         f"{res['history_once_clone']['objects']} objects, {_mib(res['history_once_clone']['bytes_read'])} read"),
    ]
    tp = res["task_push_each"]
    rows.append((f"200 files: push --task after each of {tp['checkpoints']} steps", 0.0, 0,
                 f"bytes sent per step: {tp['first_median_bytes']:.0f} B early, {tp['last_median_bytes']:.0f} B late "
                 f"(median), {_mib(tp['total_bytes'])} in all"))
    out = [f"Tree: {tr['files']} files, {_mib(tr['bytes'])}; SeaweedFS on 127.0.0.1, 2 cores shared.", "",
           "| operation | time | requests | notes |", "| --- | ---: | ---: | --- |"]
    out += [f"| {name} | {sec:.2f} s | {req} | {note} |" for name, sec, req, note in rows]
    return "\n".join(out) + "\n"


def _tables(res: dict[str, Any], peer_steps: int) -> str:
    import subprocess

    from .report import machine, machine_line

    restic = subprocess.run(["restic", "version"], capture_output=True, text=True).stdout.split(" compiled")[0] \
        if shutil.which("restic") else "no restic"
    out = [f"Machine: {machine_line(machine())}; {restic}; SeaweedFS on 127.0.0.1 on the same cores.", ""]
    if "tree" in res:
        out.append(markdown(res))
    if "peers" in res:
        from . import remote_peers

        out.append(remote_peers.markdown(res["peers"], peer_steps))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a slice of the stdlib and 20 history steps")
    ap.add_argument("--steps", type=int, default=None, help="history steps (default 150; 20 with --quick)")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--no-peers", action="store_true", help="skip the side-by-side rows with restic")
    ap.add_argument("--peers-only", action="store_true", help="only the side-by-side rows with restic")
    ap.add_argument("--peer-steps", type=int, default=10, help="incremental steps of the side-by-side rows")
    a = ap.parse_args()
    steps = a.steps if a.steps is not None else (20 if a.quick else 150)
    peers = not a.no_peers and shutil.which("restic") is not None
    if a.peers_only and not peers:
        sys.exit("no restic: make peers installs it")
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="snapstore-remote-bench-") as work:
        weed = SeaweedFS(os.path.join(work, "weed"))
        weed.metrics_port = _free_ports(1)[0]
        weed.start()
        try:
            tree = make_tree(work, a.quick)
            if peers:
                from . import remote_peers

                res["peers"] = remote_peers.run(work, weed, tree, a.peer_steps)
            if not a.peers_only:
                res.update(run(work, weed, steps, a.quick, tree))
        finally:
            weed.stop()
    text = _tables(res, a.peer_steps)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
    if a.md:
        from .mdfile import write_generated

        write_generated(a.md, text, "benchmarks.remote_bench")


if __name__ == "__main__":
    main()
