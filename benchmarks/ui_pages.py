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
* **A 27-file agent checkpoint** (``--checkpoint27``; issue 42): 27 modules of real Python (the
  standard library's, 15-70 KB each), then a step that edits ~50 scattered lines in each (about
  +870 -460 lines, like the reviewed "typing" checkpoint), served by the real server.  Alone and
  with four other loads of it at once (five clients, each as a browser does: the page, then
  every diff placeholder it holds, two at a time): time to the page's first byte, time until
  every diff is rendered, and how many of the 27 diffs were rendered (medians over
  ``--runs``; the highlight cache emptied before each round, so every round lexes).

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


def machine() -> str:
    """The machine line: cores, load and Python."""
    import platform

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.machine()}, {os.cpu_count()} cores, load {load}, Python {platform.python_version()}, {platform.system()} {platform.release()}"


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


def checkpoint27(root: Path) -> Any:
    """A store whose newest checkpoint edits 27 real Python modules."""
    import glob

    from snapstore.store import Store

    tree = root / "tree"
    tree.mkdir()
    sources = [p for p in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py"))) if 15_000 < os.path.getsize(p) < 70_000]
    chosen = sources[:: max(1, len(sources) // 27)][:27]
    texts = {}
    for path in chosen:
        name = os.path.basename(path)
        texts[name] = Path(path).read_text(encoding="utf-8", errors="replace")
        (tree / name).write_text(texts[name])
    store = Store.init(tree)
    store.snapshot("import 27 modules")
    for name, text in texts.items():
        lines = text.splitlines(True)
        for i in range(5, len(lines), max(1, len(lines) // 32)):
            if lines[i].strip():
                lines[i] = lines[i].rstrip("\n") + "  # typed\n"
        for i in range(7, len(lines), max(1, len(lines) // 17)):
            lines.insert(i, "    # reviewed by the agent\n")
        (tree / name).write_text("".join(lines))
    store.snapshot("add type hints to 27 modules", metadata={"actor": "agent", "tool_name": "Edit"})
    return store


def load_all(base: str, url: str, cookies: Any) -> dict[str, float]:
    """One browser's load of a checkpoint page: the page, then its placeholders two at a time."""
    import re
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    with httpx.Client(cookies=cookies, timeout=300) as web:
        t0 = time.perf_counter()
        with web.stream("GET", url) as r:
            body = r.iter_bytes()
            first = next(body)
            first_byte = time.perf_counter() - t0
            html = first + b"".join(body)
        text = html.decode()
        lazy = [m.replace("&amp;", "&") for m in re.findall(r'<div class="lazy" data-src="([^"]+)"', text)]

        def get(src: str) -> str:
            return web.get(base + src).text

        with ThreadPoolExecutor(2) as pool:
            pieces = list(pool.map(get, lazy))
        done = time.perf_counter() - t0
    whole = text + "".join(pieces)
    rendered = whole.count('<div class="scroll"') - text.count('class="file hl"')
    return {"first_byte_s": first_byte, "all_diffs_s": done, "diffs": rendered,
            "not_rendered": whole.count("reached its limit"), "fragments": len(lazy)}


def checkpoint_pages(runs: int) -> dict[str, Any]:
    """The 27-file checkpoint alone and with four other loads at once."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from snapstore.ui import highlight
    from snapstore.ui.server import background

    try:
        from snapstore.ui import filediff
    except ImportError:
        filediff = None  # type: ignore[assignment]

    def cold() -> None:
        """Forget what the server keeps: highlighted lines and checkpoints' changes (the code
        before either had none)."""
        cache = getattr(highlight, "CACHE", None)
        if cache is not None:
            cache.clear()
        kept = getattr(filediff, "_kept", None)
        if kept is not None:
            kept.clear()

    with tempfile.TemporaryDirectory() as tmp:
        store = checkpoint27(Path(tmp))
        cid = store.resolve("latest").id
        with background(store) as running, httpx.Client(follow_redirects=True, timeout=120) as web:
            base = running.url.split("/?")[0]
            web.get(running.url)
            url = f"{base}/c/{cid}"
            load_all(base, url, web.cookies)  # warm-up: imports, lexers
            alone, together = [], []
            for _ in range(runs):
                cold()
                alone.append(load_all(base, url, web.cookies))
                cold()
                with ThreadPoolExecutor(5) as pool:
                    together += list(pool.map(lambda _: load_all(base, url, web.cookies), range(5)))
            cold()
            warm_first = load_all(base, url, web.cookies)
            warm = load_all(base, url, web.cookies)
            size = len(web.get(url).content)
        store.close()

    def med(rows: list[dict[str, float]], key: str) -> float:
        return round(statistics.median(r[key] for r in rows) * (1000 if key.endswith("_s") else 1), 1)

    keys = ("first_byte_s", "all_diffs_s", "diffs", "not_rendered", "fragments")
    return {
        "files": 27, "page_kb": round(size / 1024, 1),
        "alone": {k.replace("_s", "_ms"): med(alone, k) for k in keys},
        "with_four_others": {k.replace("_s", "_ms"): med(together, k) for k in keys},
        "with_four_others_worst_diffs": min(r["diffs"] for r in together),
        "warm_cache": {k.replace("_s", "_ms"): med([warm], k) for k in keys},
        "cold_then": med([warm_first], "all_diffs_s"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="300,2000,20000")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--browser", action="store_true", help="also first contentful paint in headless Chromium")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--checkpoint27", action="store_true", help="only the 27-file checkpoint, alone and with four other loads")
    args = ap.parse_args()
    os.environ.setdefault("SNAPSTORE_NO_BROWSER", "1")
    if args.checkpoint27:
        print(json.dumps({"machine": machine(), "checkpoint27": checkpoint_pages(args.runs)}, indent=1))
        return
    results: dict[str, Any] = {"machine": machine(), "pages": [pages_at(int(n), args.runs, args.browser) for n in args.sizes.split(",")]}
    results["checkpoint27"] = checkpoint_pages(args.runs)
    results["big_diff"] = big_diff()
    results["huge_file"] = huge_file()
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
