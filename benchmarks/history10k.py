"""Resolve latency at 10,000 checkpoints (issue 11, requirement 6: any ref <= 5 ms).

The parent (:func:`measure_resolve`, called by benchmarks.run) builds a small tree and a store,
then runs this module as a child process (the snapstore under test on its path):

- ``build TREE STORE N``: one real snapshot, then N-1 more checkpoint records written through the
  library (``build_record`` + the ``checkpoints``/``log``/``tags`` tables, in batches), each its
  own record (own parent, time and message) naming the same manifest; a tag on the middle one and
  a searchable marker three from the top.  Seconds instead of the minutes of N real snapshots.
- ``resolve TREE STORE REPS``: ``Store.resolve`` timed for each reference (one untimed warm-up,
  then REPS calls; median and max), with the store opened once, as an agent keeps it.

Then the parent times ``snapstore show latest`` as processes without and with the service.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

TAG = "bench-middle"
MARKER = "bench-marker-near-top"


def _records_module():  # the package layout changed in the refactor; measure either
    try:
        from snapstore.records import checkpoint
    except ImportError:
        from snapstore import checkpoint  # type: ignore[no-redef]
    return checkpoint


def build(tree: str, store_dir: str, n: int) -> dict:
    import msgpack

    from snapstore.store import Store

    ck = _records_module()
    t0 = time.perf_counter()
    store = Store.open(tree, store=store_dir)
    base = store.snapshot("base")
    backend = store.backend
    with backend.read() as view:
        packed = view.get("checkpoints", bytes.fromhex(base.id))
        last = view.last("log") if hasattr(view, "last") else None
        last_key = last[0] if last else next(iter(view.items("log", reverse=True)))[0]
    rec = msgpack.unpackb(packed, raw=False)
    seq = ck.key_seq(last_key)
    parent, t_ns = base.id, rec["time_ns"]
    ids: list[str] = [base.id]
    i = 1
    while i < n:
        with backend.write() as batch:
            for _ in range(min(500, n - i)):
                seq += 1
                msg = f"step {i}: edited file_{i % 50}.py"
                if i == n - 3:
                    msg += f" ({MARKER})"
                tags = [TAG] if i == n // 2 else []
                cid, packed = ck.build_record(
                    parent=parent, time_ns=t_ns + i * 1_000_000, message=msg, task=None, tags=tags,
                    kind=ck.USER, manifest=rec["manifest"], conversation=None, metadata={},
                    stats=rec["stats"],
                )
                batch.put("checkpoints", cid, packed)
                batch.put("log", ck.seq_key(seq), cid)
                for tag in tags:
                    batch.put("tags", tag.encode(), cid)
                parent = cid.hex()
                ids.append(parent)
                i += 1
    backend.sync()
    store.close()
    return {"seconds": time.perf_counter() - t0, "n": len(ids), "prefix": ids[n // 4][:12]}


def resolve(tree: str, store_dir: str, reps: int, prefix: str) -> dict:
    from snapstore.store import Store

    store = Store.open(tree, store=store_dir)
    refs = {"latest": "latest", "latest~50": "latest~50", "tag": TAG, "id prefix": prefix,
            ":/text near the top": f":/{MARKER}"}
    out = {}
    for label, ref in refs.items():
        try:
            store.resolve(ref)
        except Exception as exc:  # e.g. a reference syntax an older snapstore lacks
            out[label] = {"ref": ref, "error": f"{type(exc).__name__}: {exc}"}
            continue
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            store.resolve(ref)
            times.append(time.perf_counter() - t0)
        out[label] = {"ref": ref, "median_s": statistics.median(times), "max_s": max(times)}
    store.close()
    return out


def _child(args: list[str], src: str | None) -> dict:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, here, env.get("PYTHONPATH", "")) if p)
    res = subprocess.run([sys.executable, "-P", "-m", "benchmarks.history10k", *args], cwd=here,
                         env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(res.stderr.strip()[-800:])
    return json.loads(res.stdout)


def measure_resolve(work: str, n: int, reps: int, cli_runs: int, src: str | None) -> dict:
    """Build the long history and time resolving in the library and ``show latest`` as CLI."""
    from .competitors import SnapSvc
    from .measure import Series, run

    tree = os.path.join(work, "history-tree")
    store_dir = os.path.join(work, "history-store")
    os.makedirs(tree)
    for k in range(50):
        with open(os.path.join(tree, f"file_{k}.py"), "w") as f:
            f.write(f"# file {k}\n" + "x = 1\n" * (k + 1))
    svc = SnapSvc(tree, store_dir)
    svc.setup()
    built = _child(["build", tree, store_dir, str(n)], src)
    lib = _child(["resolve", tree, store_dir, str(reps), built["prefix"]], src)
    show = svc._cmd("show", "latest")
    plain, served = Series(), Series()
    for _ in range(cli_runs + 1):
        p = run(show, cwd=tree, env=svc_env())
        plain.add(p.seconds, p.rss_kib)
    plain.seconds, plain.rss_kib = plain.seconds[1:], plain.rss_kib[1:]
    svc.start_service()
    before = svc.requests()
    try:
        if svc.supported:
            for _ in range(cli_runs + 1):
                p = run(show, cwd=tree, env=svc_env())
                served.add(p.seconds, p.rss_kib)
            served.seconds, served.rss_kib = served.seconds[1:], served.rss_kib[1:]
        after = svc.requests()
    finally:
        svc.stop_service()
    through = (after or 0) - (before or 0)
    return {
        "checkpoints": built["n"],
        "build_seconds": built["seconds"],
        "library": lib,
        "cli_show_latest": plain.median(),
        "cli_show_latest_service": served.median(),
        "service_requests": through if svc.supported else None,
        "service_ok": (not svc.supported) or through >= cli_runs + 1,
    }


def svc_env() -> dict[str, str]:
    from .competitors import snap_env

    return snap_env()


def main() -> None:
    op, tree, store_dir, arg = sys.argv[1:5]
    if op == "build":
        doc = build(tree, store_dir, int(arg))
    else:
        doc = resolve(tree, store_dir, int(arg), sys.argv[5])
    sys.stdout.write(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
