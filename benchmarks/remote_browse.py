"""Browsing a remote (``--remote NAME``) against a local SeaweedFS: ``python -m benchmarks.remote_browse``.

A history of ``--steps`` pushes (a 200-file tree; each step changes the README and one module
and adds a 1.5 MB binary, so each push writes a pack), then each browsing command on a fresh
cache (a teammate's first look) and once more (the cache warm): requests by kind, bytes read,
time.  Requests are counted by a wrapper around every transport made, so the figures are the
engine's, whatever the code under test does.  docs/remote.md quotes the table.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from seaweed import BUCKET, SeaweedFS  # noqa: E402

from snapstore.remote import transport as tr  # noqa: E402
from snapstore.remote.names import parse_url  # noqa: E402
from snapstore.storage import entries  # noqa: E402
from snapstore.store import Store  # noqa: E402
from snapstore.testing import build_tree, random_bytes  # noqa: E402


class Recorder(tr.Transport):
    """Every request made through a transport: ``(kind, bytes read)``."""

    calls: list[tuple[str, int]] = []

    def __init__(self, inner: tr.Transport) -> None:
        self.inner = inner

    def get(self, key: str, limit: int = tr.MAX_GET) -> tr.Got | None:
        got = self.inner.get(key, limit)
        self.calls.append(("get", len(got.body) if got else 0))
        return got

    def head(self, key: str) -> tr.Listed | None:
        self.calls.append(("head", 0))
        return self.inner.head(key)

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        got = self.inner.get_range(key, start, end)
        self.calls.append(("range", len(got) if got else 0))
        return got

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        got = self.inner.get_suffix(key, n)
        self.calls.append(("suffix", len(got[0]) if got else 0))
        return got

    def put_create(self, key: str, data: bytes) -> str | None:
        return self.inner.put_create(key, data)

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        return self.inner.put_update(key, data, etag)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[tr.Listed]:
        self.calls.append(("list", 0))
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="snapstore-browse-") as tmp:
        d = Path(tmp)
        weed = SeaweedFS(str(d / "weed"))
        weed.start()
        try:
            os.environ.update(weed.env)
            run(d, weed.endpoint, f"s3://{BUCKET}/{os.urandom(4).hex()}", args.steps)
        finally:
            weed.stop()


def run(d: Path, endpoint: str, url: str, steps: int) -> None:
    files = {f"src/m{j}.py": (f"# module {j}\n" + "x = 1\n" * 300).encode() for j in range(200)}
    build_tree(d / "a", {"README.md": b"hello\n", **files})
    ids = []
    with Store.init(d / "a") as a:
        a.remote_add("origin", url, endpoint=endpoint)
        (d / "a" / "data").mkdir()
        for i in range(steps):
            (d / "a" / "data" / f"big{i}.bin").write_bytes(random_bytes(1_500_000, f"s{i}"))
            (d / "a" / "README.md").write_bytes(b"hello %d\n" % i)
            (d / "a" / "src" / f"m{i}.py").write_bytes(b"changed %d\n" % i * 100)
            ids.append(a.snapshot(f"step {i}", task="t").id)
            a.push(task="t")
    plain = tr.connect(parse_url(url), endpoint=endpoint)
    packs = list(plain.list("packs/"))
    print(f"remote: {len(packs)} packs, {sum(p.size for p in packs)} B")
    real = tr.connect
    tr.connect = lambda *a, **kw: Recorder(real(*a, **kw))  # type: ignore[assignment]
    commands: list[tuple[str, Callable[[Store], Any]]] = [
        ("list", lambda v: v.checkpoints()),
        ("cat latest README.md", lambda v: v.read_bytes(ids[-1], "README.md")),
        ("cat first data/big0.bin", lambda v: v.read_bytes(ids[0], "data/big0.bin")),
        ("show latest", lambda v: v.summary(ids[-1])),
        ("diff first latest", lambda v: v.diff(ids[0], ids[-1])),
        ("log README.md", lambda v: v.history("README.md")),
    ]
    print("| command | cache | requests | bytes | s | by kind |\n| --- | --- | ---: | ---: | ---: | --- |")
    for n, (label, fn) in enumerate(commands):
        build_tree(d / f"b{n}", {"mine.txt": b"mine\n"})
        with Store.init(d / f"b{n}") as b:
            b.remote_add("origin", url, endpoint=endpoint)
            for cache in ("fresh", "warm"):
                entries.clear_cache()  # the pusher's chunks must not answer for the remote
                Recorder.calls.clear()
                t0 = time.perf_counter()
                with b.remote_view("origin") as view:
                    fn(view)
                dt = time.perf_counter() - t0
                kinds = dict(Counter(k for k, _ in Recorder.calls))
                read = sum(n for _, n in Recorder.calls)
                print(f"| {label} | {cache} | {len(Recorder.calls)} | {read} | {dt:.2f} | {kinds} |")


if __name__ == "__main__":
    main()
