"""Storage format 2 against format 1 and git, in one process run (issue 12's targets).

``python -m benchmarks.storage_v2 [--quick] [--out FILE.json]``

* **bytes on disk** of the store directory (format 1, format 2) vs git's objects after
  ``git gc``, on the same data: the stdlib initial checkpoint, a 150-step realistic edit history
  on the stdlib (benchmarks.replay), an npm-installed node_modules (``npm install`` of eslint 8,
  webpack 5 and express 4 when npm and its registry answer; skipped otherwise), and a
  conversation growing over 150 checkpoints (vs its final zstd-compressed size);
* **time** where users wait, format 1 vs format 2 interleaved, medians: the initial checkpoint,
  a restore 100 files away, ``cat`` of one file, ``diff -p`` of 20 changed files (library calls,
  so interpreter start-up does not hide the difference).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import zstandard

from benchmarks import corpora
from benchmarks.competitors import git_env, init_shadow_git
from benchmarks.mdfile import write_generated
from benchmarks.measure import disk_bytes
from benchmarks.replay import History
from snapstore.storage import entries
from snapstore.store import Store

MiB = 1 << 20


def make_store(tree: str, store_dir: str, fmt: int) -> Store:
    shutil.rmtree(store_dir, ignore_errors=True)
    store = Store.init(tree, store=store_dir)
    if fmt == 1:
        with store.backend.write() as batch:  # a format-1 store keeps writing format 1
            batch.put("meta", b"format", b"1")
    return store


class Git:
    def __init__(self, tree: str, gitdir: str):
        shutil.rmtree(gitdir, ignore_errors=True)
        init_shadow_git(gitdir, tree)
        self.tree, self.gitdir, self.env = tree, gitdir, git_env(gitdir)

    def commit(self, msg: str) -> None:
        for args in (["add", "-A"], ["commit", "-q", "--allow-empty", "--no-verify", "-m", msg]):
            subprocess.run(["git", *args], cwd=self.tree, env=self.env, check=True, capture_output=True)

    def gc_bytes(self) -> int:
        subprocess.run(["git", "gc", "-q"], cwd=self.tree, env=self.env, check=True, capture_output=True)
        return disk_bytes(os.path.join(self.gitdir, "objects"))


def timed(fn: Callable[..., Any], *args: Any) -> float:
    """Seconds ``fn(*args)`` takes, starting with cold caches (as a fresh CLI process would)."""
    entries.clear_cache()
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def sizes_row(name: str, v1: int, v2: int, v2_compact: int, git: int, note: str = "") -> dict[str, Any]:
    return {
        "data": name, "v1": v1, "v2": v2, "v2_compact": v2_compact, "git_gc": git,
        "v1_ratio": round(v1 / git, 3), "v2_ratio": round(v2 / git, 3),
        "v2_compact_ratio": round(v2_compact / git, 3), "note": note,
    }


def initial_sizes(work: str, name: str, tree: str) -> dict[str, Any]:
    out = {}
    for fmt in (1, 2):
        sd = os.path.join(work, f"{name}-v{fmt}")
        with make_store(tree, sd, fmt) as store:
            store.snapshot("initial")
            out[fmt] = disk_bytes(sd)
            if fmt == 2:
                store.gc(compact=True)
                out[3] = disk_bytes(sd)
                out[4] = payload_bytes(store)
    git = Git(tree, os.path.join(work, f"{name}-git"))
    git.commit("initial")
    row = sizes_row(name, out[1], out[2], out[3], git.gc_bytes())
    row["payload"] = out[4]
    return row


def payload_bytes(store: Store) -> int:
    """Keys and values of every table: what the LMDB file holds, without its page overhead."""
    from snapstore.storage.backend import TABLES

    with store.backend.read() as view:
        return sum(len(k) + len(v) for t in TABLES for k, v in view.items(t))


def history_sizes(work: str, tree: str, steps: int) -> dict[str, Any]:
    stores = {fmt: make_store(tree, os.path.join(work, f"hist-v{fmt}"), fmt) for fmt in (1, 2)}
    git = Git(tree, os.path.join(work, "hist-git"))
    for store in stores.values():
        store.snapshot("initial")
    git.commit("initial")
    history = History(tree, seed=12)
    for n in range(steps):
        history.step()
        for store in stores.values():
            store.snapshot(f"step {n}")
        git.commit(f"step {n}")
    v1 = disk_bytes(os.path.join(work, "hist-v1"))
    v2 = disk_bytes(os.path.join(work, "hist-v2"))
    stores[2].gc(compact=True)
    v2c = disk_bytes(os.path.join(work, "hist-v2"))
    for store in stores.values():
        store.close()
    return sizes_row(f"stdlib + {steps}-step edit history", v1, v2, v2c, git.gc_bytes(), f"{history.kinds}")


def node_modules(work: str) -> str | None:
    """An npm-installed node_modules (cached under the work dir's parent), or None."""
    cache = os.path.join(os.path.dirname(work), "npm-corpus")
    nm = os.path.join(cache, "node_modules")
    if os.path.isdir(nm):
        return cache
    if shutil.which("npm") is None:
        return None
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, "package.json"), "w") as f:
        f.write('{"name": "corpus", "version": "1.0.0"}')
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--silent", "eslint@8", "webpack@5", "express@4"],
        cwd=cache, capture_output=True, timeout=600,
    )
    return cache if done.returncode == 0 and os.path.isdir(nm) else None


def conversation_growth(work: str, source: str, steps: int) -> dict[str, Any]:
    """Disk bytes a conversation growing over ``steps`` checkpoints adds, vs its final zstd size.

    Each step appends one message of 0.5-3 KB: alternately a user's line and a slice of a
    stdlib source file (what an agent's tool output looks like).
    """
    rng = random.Random(5)
    sources = sorted(
        os.path.join(d, n) for d, _, ns in os.walk(source) for n in ns if n.endswith(".py") and "__pycache__" not in d
    )
    messages: list[dict[str, Any]] = []
    for n in range(steps):
        body = open(rng.choice(sources), "rb").read().decode("utf-8", "replace")
        start = rng.randrange(max(1, len(body) - 3000))
        content = body[start : start + rng.randint(500, 3000)]
        messages.append({"role": "assistant" if n % 2 else "user", "content": f"step {n}:\n{content}"})
    tree = os.path.join(work, "conv-tree")
    os.makedirs(tree, exist_ok=True)
    with open(os.path.join(tree, "f.txt"), "w") as f:
        f.write("x\n")
    sizes = {}
    for with_conv in (False, True):
        sd = os.path.join(work, f"conv-{with_conv}")
        with make_store(tree, sd, 2) as store:
            for n in range(steps):
                store.snapshot(f"s{n}", conversation=messages[: n + 1] if with_conv else None)
            store.gc(compact=True)
        sizes[with_conv] = disk_bytes(sd)
    final = len(zstandard.ZstdCompressor(level=3).compress(json.dumps(messages).encode()))
    added = sizes[True] - sizes[False]
    return {"steps": steps, "store_bytes_added": added, "final_zstd": final, "ratio": round(added / final, 2)}


def user_waits(work: str, tree: str, runs: int) -> list[dict[str, Any]]:
    """Initial checkpoint, restore 100 files, cat, diff -p: format 1 vs 2, interleaved medians."""
    times: dict[tuple[str, int], list[float]] = {}
    rng = random.Random(3)
    files = sorted(
        os.path.relpath(os.path.join(d, n), tree)
        for d, _, ns in os.walk(tree) for n in ns if n.endswith(".py") and "__pycache__" not in d
    )
    changed = rng.sample(files, 100)
    originals = {p: open(os.path.join(tree, p), "rb").read() for p in changed}
    stores: dict[int, Store] = {}
    for r in range(runs):
        for fmt in ((1, 2) if r % 2 == 0 else (2, 1)):
            if fmt in stores:
                stores[fmt].close()
            corpora.warm(tree)
            store = make_store(tree, os.path.join(work, f"wait-v{fmt}"), fmt)
            times.setdefault(("initial checkpoint", fmt), []).append(timed(store.snapshot, "a"))
            stores[fmt] = store
    ids = {fmt: [store.resolve("latest").id] for fmt, store in stores.items()}
    for p in changed:  # checkpoint b: 100 files edited
        with open(os.path.join(tree, p), "ab") as f:
            f.write(b"\n# edited\n")
    for fmt, store in stores.items():
        ids[fmt].append(store.snapshot("b").id)
    for r in range(runs):
        for fmt in ((1, 2) if r % 2 == 0 else (2, 1)):
            store, (a, b) = stores[fmt], ids[fmt]
            times.setdefault(("restore 100 files", fmt), []).append(timed(store.restore, a))
            times.setdefault(("restore 100 files back", fmt), []).append(timed(store.restore, b))
            p = changed[r % len(changed)]
            times.setdefault(("cat one file", fmt), []).append(timed(store.read_bytes, a, p))
            times.setdefault(("diff -p, 20 files", fmt), []).append(timed(_patch, store, a, b, changed[:20]))
    for store in stores.values():
        store.close()
    for p, body in originals.items():
        with open(os.path.join(tree, p), "wb") as f:
            f.write(body)
    rows = []
    for what in dict.fromkeys(k for k, _ in times):
        a, b = statistics.median(times[(what, 1)]), statistics.median(times[(what, 2)])
        rows.append({"scenario": what, "v1_s": round(a, 4), "v2_s": round(b, 4), "v2_over_v1": round(b / a, 3), "runs": runs})
    return rows


def _patch(store: Store, a: str, b: str, paths: list[str]) -> None:
    """What ``diff -p`` reads: both sides of every changed file."""
    for change in store.diff(a, b, paths=paths):
        change.old_bytes()
        change.new_bytes()


TARGETS = {
    "stdlib, initial": 0.80,
    "node_modules": 0.90,
    "edit history": 1.0,
}


def _target(data: str) -> float | None:
    return next((t for k, t in TARGETS.items() if k in data), None)


def render(doc: dict[str, Any]) -> str:
    """The markdown page of one run."""
    mib = lambda n: f"{n / MiB:.1f} MiB"  # noqa: E731
    out = [
        "# Storage format 2: bytes on disk and the waits it may cost",
        "",
        f"Generated by `python -m benchmarks.storage_v2` ({doc.get('started', '?')}; "
        f"{doc['machine']}{'; --quick' if doc.get('quick') else ''}"
        f"{'; ' + doc['note'] if doc.get('note') else ''}). Bytes are what the store "
        "directory (snapstore) or `objects/` after `git gc` (git) take on disk (`du`). "
        "Times are library calls, format 1 and format 2 interleaved, medians, each started "
        "with cold caches.",
        "",
        "| data | format 1 | format 2 | format 2 after `gc --compact` | git after `git gc` | "
        "format 2 / git | after compact / git | target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in doc["sizes"]:
        t = _target(r["data"])
        verdict = "" if t is None else (f"<= {t:.2f}x: " + ("met" if r["v2_ratio"] <= t else
                  "met after compact" if r["v2_compact_ratio"] <= t else "missed"))
        out.append(
            f"| {r['data']} | {mib(r['v1'])} ({r['v1_ratio']:.2f}x) | {mib(r['v2'])} | "
            f"{mib(r['v2_compact'])} | {mib(r['git_gc'])} | {r['v2_ratio']:.3f}x | "
            f"{r['v2_compact_ratio']:.3f}x | {verdict} |"
        )
    for r in doc["sizes"]:
        if "payload" in r:
            out.append(
                f"\n{r['data']}: after `gc --compact` the store directory is "
                f"{r['v2_compact'] / r['payload']:.3f}x its live payload (keys and values; "
                "target <= 1.10x)."
            )
    if "node_modules" in doc:
        out += ["", f"node_modules: {doc['node_modules']}."]
    c = doc["conversation"]
    out += [
        "",
        f"Conversation growing over {c['steps']} checkpoints (one 0.5-3 KB message per step): "
        f"the store grew {c['store_bytes_added']:,} B on disk (after `gc --compact`, against the "
        f"same checkpoints without the conversation) for {c['final_zstd']:,} B of final "
        f"conversation compressed with zstd: **{c['ratio']}x** (target <= 3x: "
        f"{'met' if c['ratio'] <= 3 else 'missed'}).",
        "",
        "| where users wait | format 1 | format 2 | format 2 / format 1 | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for w in doc["waits"]:
        t = {"initial checkpoint": 1.0, "restore 100 files": 1.10}.get(w["scenario"])
        verdict = "" if t is None else f"<= {t:.2f}x: " + ("met" if w["v2_over_v1"] <= t else "missed")
        out.append(
            f"| {w['scenario']} | {w['v1_s'] * 1000:.1f} ms | {w['v2_s'] * 1000:.1f} ms | "
            f"{w['v2_over_v1']:.2f}x | {verdict} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer runs and steps")
    ap.add_argument("--out", default="benchmarks/results/storage_v2.json")
    ap.add_argument("--md", help="also write the markdown page here (docs/benchmarks-storage.md)")
    ap.add_argument("--from-json", help="only render the markdown of an earlier run's JSON")
    ap.add_argument("--waits-only", metavar="JSON", help="measure the waits again, keep the bytes of JSON")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            doc = json.load(f)
        write_generated(args.md, render(doc), "benchmarks.storage_v2")
        return
    base = os.environ.get("SNAPSTORE_BENCH_DIR") or tempfile.gettempdir()
    work = os.path.join(base, "snapstore-storage-v2")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    stdlib = os.path.join(work, "stdlib")
    corpora.build_stdlib(stdlib)
    doc: dict[str, Any] = {
        "machine": f"{os.uname().sysname} {os.uname().release}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at start",
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "quick": args.quick,
    }
    if args.waits_only:
        with open(args.waits_only) as f:
            earlier = json.load(f)
        for key in ("sizes", "conversation", "node_modules"):
            if key in earlier:
                doc[key] = earlier[key]
        doc["waits"] = user_waits(work, stdlib, 3 if args.quick else 5)
        doc["note"] = f"bytes from the run of {earlier.get('started', '?')}; waits measured again"
        _write(args, doc)
        shutil.rmtree(work, ignore_errors=True)
        return
    doc["sizes"] = [initial_sizes(work, "stdlib, initial", stdlib)]
    nm = node_modules(base)
    if nm is not None:
        doc["sizes"].append(initial_sizes(work, "node_modules (npm: eslint 8, webpack 5, express 4)", nm))
    else:
        doc["node_modules"] = "skipped: npm or its registry is not available"
    doc["waits"] = user_waits(work, stdlib, 3 if args.quick else 5)
    steps = 30 if args.quick else 150
    hist_tree = os.path.join(work, "hist-tree")
    corpora.build_stdlib(hist_tree)
    doc["sizes"].append(history_sizes(work, hist_tree, steps))
    doc["conversation"] = conversation_growth(work, stdlib, 150)
    _write(args, doc)
    shutil.rmtree(work, ignore_errors=True)


def _write(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    if args.md:
        write_generated(args.md, render(doc), "benchmarks.storage_v2")
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
