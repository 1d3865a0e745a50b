"""The checkpoint browser's costs (issue 27): first byte of its pages at any history length, a
big diff, a 50 MB file.  ``python -m benchmarks.ui_pages [--sizes 300,2000,20000] [--runs 7]
[--browser] [--out FILE.json]``.

* **Timeline and checkpoint pages** at each size: a store of N checkpoint records (one real
  snapshot of a 30-file tree, then N-1 records written through the library in batches, as
  benchmarks.history10k does, with a task per 50 and the task index), served by the real
  uvicorn server (``snapstore.ui.server.background``); time to the first byte of the response
  (median of ``--runs`` after one warm-up) over HTTP for: the timeline's first page, its page
  half-way down, the newest checkpoint and the oldest (whose number and neighbours are found
  furthest down the log).  ``--browser`` adds the first contentful paint in headless Chromium.
* **A 1.4 MB file with scattered edits** (80,000 lines, every third changed: the input that took
  the difflib UI 182 s): the checkpoint page's whole response time and size, default and "show
  anyway" (``full=1``).
* **A 50 MB text file**: the file view and the raw download, peak Python memory (tracemalloc)
  of the server side, and time.

Timings move with the machine and its load (figures in docs/ui.md say where they were taken).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

MB = 1 << 20


def build(root: Path, n: int) -> Any:
    """A store of ``n`` checkpoints (records naming one real manifest) over a 30-file tree."""
    import msgpack

    from snapstore.records import checkpoint as ck
    from snapstore.store import Store

    tree = root / "tree"
    tree.mkdir()
    for k in range(30):
        (tree / f"file_{k}.py").write_text(f"# file {k}\n" + "x = 1\n" * (k + 1))
    store = Store.init(tree)
    base = store.snapshot("base", task="task-0")
    with store.backend.read() as view:
        rec = msgpack.unpackb(view.get("checkpoints", bytes.fromhex(base.id)), raw=False)
        seq = ck.key_seq(next(iter(view.items("log", reverse=True)))[0])
    parent, t_ns, i = base.id, rec["time_ns"], 1
    while i < n:
        with store.backend.write() as batch:
            for _ in range(min(500, n - i)):
                seq += 1
                task = f"task-{i // 50}"
                cid, packed = ck.build_record(
                    parent=parent, time_ns=t_ns + i * 1_000_000_000, message=f"step {i}: edited file_{i % 30}.py",
                    task=task, tags=[], kind=ck.USER, manifest=rec["manifest"], conversation=None,
                    metadata={"actor": "agent", "tool_name": "Edit"}, stats=rec["stats"],
                )
                batch.put("checkpoints", cid, packed)
                batch.put("log", ck.seq_key(seq), cid)
                batch.put("tasks", ck.task_key(task, seq), cid)
                parent = cid.hex()
                i += 1
    store.backend.sync()
    return store


def ttfb(client: Any, url: str, runs: int) -> float:
    """Median seconds to the first byte of ``url``'s body (after one warm-up request)."""
    times = []
    for k in range(runs + 1):
        t0 = time.perf_counter()
        with client.stream("GET", url) as r:
            assert r.status_code == 200, (url, r.status_code)
            body = r.iter_raw()
            next(body)
            if k:
                times.append(time.perf_counter() - t0)
            for _ in body:
                pass
    return statistics.median(times)


#: The first contentful paint of the page, waiting for it if it has not been reported yet.
FCP_JS = """() => new Promise((resolve) => {
  const seen = performance.getEntriesByName('first-contentful-paint')[0];
  if (seen) return resolve(seen.startTime);
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) if (e.name === 'first-contentful-paint') resolve(e.startTime);
  }).observe({ type: 'paint', buffered: true });
  setTimeout(() => resolve(-1), 5000);
})"""


def fcp(urls: dict[str, str], login: str) -> dict[str, float]:
    """First contentful paint (ms) of each page in headless Chromium (median of 3)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from playwright.sync_api import sync_playwright
    from ui_browser import CHROMIUM, FLAGS

    out: dict[str, float] = {}
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = ctx.new_page()
        page.goto(login)
        for label, url in urls.items():
            paints = []
            for _ in range(4):
                page.goto(url, wait_until="load")
                paints.append(page.evaluate(FCP_JS))
            out[label] = statistics.median(paints[1:])
        ctx.close()
    return out


def pages_at(n: int, runs: int, browser: bool) -> dict[str, Any]:
    import httpx

    from snapstore.ui.server import background

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        store = build(Path(tmp), n)
        built = time.perf_counter() - t0
        newest = store.resolve("latest").id
        oldest = store.log_page(before=2, limit=1)[0][0].id
        with background(store) as running, httpx.Client(follow_redirects=True, timeout=120) as web:
            base = running.url.split("/?")[0]
            web.get(running.url)  # the session cookie
            urls = {
                "timeline": f"{base}/",
                "timeline, half-way down": f"{base}/?before={n // 2}",
                "newest checkpoint": f"{base}/c/{newest}",
                "oldest checkpoint": f"{base}/c/{oldest}",
            }
            out: dict[str, Any] = {"n": n, "build_s": round(built, 1)}
            out["ttfb_ms"] = {k: round(ttfb(web, u, runs) * 1000, 1) for k, u in urls.items()}
            out["html_kb"] = {k: round(len(web.get(u).content) / 1024, 1) for k, u in urls.items()}
            if browser:
                out["fcp_ms"] = fcp(urls, running.login_url())
        store.close()
    return out


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def big_diff() -> dict[str, Any]:
    from starlette.testclient import TestClient

    from snapstore.store import Store
    from snapstore.ui.app import create_app

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        text = "".join(f"key{i:06d} = v({i % 997})\n" for i in range(80_000))
        (tree / "deps.lock.py").write_text(text)
        edited = "".join(ln.replace("v(", "w(") if i % 3 == 0 else ln for i, ln in enumerate(text.splitlines(True)))
        with Store.init(tree) as store:
            store.snapshot("add")
            (tree / "deps.lock.py").write_text(edited)
            cid = store.snapshot("edit a third").id
            client = TestClient(create_app(store, token="t" * 20, host="127.0.0.1", port=1), base_url="http://127.0.0.1:1")
            client.get("/?token=" + "t" * 20)
            client.get(f"/c/{cid}")  # warm-up (imports, lexer)
            page, seconds = timed(lambda: client.get(f"/c/{cid}"))
            full, full_seconds = timed(lambda: client.get(f"/c/{cid}?full=1"))
    return {
        "file_bytes": len(text), "lines": 80_000,
        "page_s": round(seconds, 3), "page_kb": round(len(page.content) / 1024, 1),
        "full_s": round(full_seconds, 3), "full_kb": round(len(full.content) / 1024, 1),
    }


def huge_file() -> dict[str, Any]:
    import httpx
    from starlette.testclient import TestClient

    from snapstore.store import Store
    from snapstore.ui.app import create_app
    from snapstore.ui.server import background

    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        with (tree / "huge.txt").open("wb") as f:
            for i in range(50 * MB // 64):
                f.write((b"%015d the quick brown fox jumps over the lazy dog" % i).ljust(63, b".") + b"\n")
        with Store.init(tree) as store:
            cid = store.snapshot("a 50 MB text file").id
            client = TestClient(create_app(store, token="t" * 20, host="127.0.0.1", port=1), base_url="http://127.0.0.1:1")
            client.get("/?token=" + "t" * 20)
            tracemalloc.start()
            view, view_s = timed(lambda: client.get(f"/c/{cid}/file?p=huge.txt"))
            view_peak = tracemalloc.get_traced_memory()[1]
            with background(store) as running, httpx.Client(follow_redirects=True, timeout=300) as web:
                web.get(running.url)
                tracemalloc.reset_peak()
                t0 = time.perf_counter()
                got = 0
                with web.stream("GET", running.url.split("/?")[0] + f"/c/{cid}/raw?p=huge.txt") as r:
                    for piece in r.iter_bytes():
                        got += len(piece)
                raw_s = time.perf_counter() - t0
                raw_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return {
        "file_mb": 50, "view_s": round(view_s, 3), "view_kb": round(len(view.content) / 1024, 1),
        "view_peak_mb": round(view_peak / MB, 1), "download_s": round(raw_s, 2), "download_mb": round(got / MB, 1),
        "download_peak_mb": round(raw_peak / MB, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="300,2000,20000")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--browser", action="store_true", help="also first contentful paint in headless Chromium")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    os.environ.setdefault("SNAPSTORE_NO_BROWSER", "1")
    results: dict[str, Any] = {"pages": [pages_at(int(n), args.runs, args.browser) for n in args.sizes.split(",")]}
    results["big_diff"] = big_diff()
    results["huge_file"] = huge_file()
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
