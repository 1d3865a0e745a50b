"""Where the memory of one initial checkpoint goes (issue 11, requirement 9).

``python -m benchmarks.memory_profile lib|cli TREE [--runs N]`` takes an initial checkpoint of
TREE into a new store under a temporary directory, in a fresh child process, and prints its
peak RSS with, sampled every 20 ms, the split between anonymous memory (Python objects, malloc,
LMDB's dirty pages, buffers in flight) and file-backed pages (shared libraries and the mapped
LMDB file).  ``lib`` runs the library in the child and labels the samples by phase (walk, read,
manifest, commit) and adds glibc's malloc totals; ``cli`` runs the CLI as the benchmarks do and
samples it from outside.  Use one core (``taskset -c 1``) on a shared machine; the numbers in
docs/benchmarks-design.md ("77k files") come from here, on the ``stdlib-x10u`` corpus
(benchmarks/corpora.py ``build_x10(src, dst, unique=True)``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = ("VmRSS", "RssAnon", "RssFile")


def status(pid: str = "self") -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of a process, in MiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in FIELDS:
                out[key] = int(value.split()[0]) >> 10
    return out


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def malloc_totals() -> dict[str, int]:
    """glibc's malloc: bytes in use and free inside its heaps (MiB); empty without glibc."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        mi = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {"malloc_used": (mi.uordblks + mi.hblkhd) >> 20, "malloc_free": mi.fordblks >> 20}


class Sampler(threading.Thread):
    """Samples a process's memory every ``every`` seconds, labelled with ``self.phase``."""

    def __init__(self, pid: str = "self", every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.phase, self.stop = pid, every, "start", False
        self.samples: list[tuple[str, dict[str, int]]] = []

    def run(self) -> None:
        while not self.stop:
            try:
                s = status(self.pid)
            except OSError:
                return
            if self.pid == "self":
                s.update(malloc_totals())
                s["py_blocks_k"] = sys.getallocatedblocks() // 1000
            self.samples.append((self.phase, s))
            time.sleep(self.every)

    def summary(self) -> dict[str, dict[str, int]]:
        """Per phase: the sample of highest RSS, and each field's maximum."""
        out: dict[str, dict[str, int]] = {}
        for phase, s in self.samples:
            d = out.setdefault(phase, {"peak_rss": -1})
            if s.get("VmRSS", 0) > d["peak_rss"]:
                d.update({"peak_rss": s.get("VmRSS", 0)}, **{"at_peak_" + k: v for k, v in s.items()})
            for k in ("RssAnon", "RssFile"):
                d["max_" + k] = max(d.get("max_" + k, 0), s.get(k, 0))
        return out


def _child_lib(tree: str, store: str) -> None:
    sampler = Sampler()
    sampler.start()
    from snapstore.ops.snapshot import read, walk
    from snapstore.records import manifest
    from snapstore.storage import lmdb_backend
    from snapstore.store import Store

    def label(owner: object, name: str, phase: str, generator: bool = False) -> None:
        real = getattr(owner, name)

        if generator:
            def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
                sampler.phase = phase
                yield from real(*args, **kwargs)
                sampler.phase = "after " + phase
        else:
            def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
                if threading.current_thread() is not threading.main_thread():
                    return real(*args, **kwargs)  # the writer thread's commits: not a phase
                sampler.phase = phase
                try:
                    return real(*args, **kwargs)
                finally:
                    sampler.phase = "after " + phase

        setattr(owner, name, wrapped)

    label(walk, "inputs", "walk")
    label(read, "read_files", "read", generator=True)
    label(manifest, "write_manifest", "manifest")
    label(lmdb_backend.LmdbBackend, "_apply", "commit")
    Store.init(tree, store=store).close()
    s = Store.open(tree, store=store)
    t0 = time.perf_counter()
    s.snapshot("initial")
    seconds = time.perf_counter() - t0
    sampler.phase = "end"
    time.sleep(0.05)
    sampler.stop = True
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) >> 10 for line in f if line.startswith("VmHWM"))
    print(json.dumps({"seconds": seconds, "peak_rss": hwm, "phases": sampler.summary()}))


def run_lib(tree: str, store: str) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO)
    code = f"from benchmarks.memory_profile import _child_lib; _child_lib({tree!r}, {store!r})"
    out = subprocess.run([sys.executable, "-P", "-c", code], env=env, cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def run_cli(tree: str, store: str) -> dict:
    from benchmarks.competitors import snap_env, snapstore_argv

    argv, env = snapstore_argv(), snap_env()
    subprocess.run([*argv, "init", "--store", store, "-q"], cwd=tree, env=env, check=True)
    t0 = time.perf_counter()
    p = subprocess.Popen([*argv, "--store", store, "snapshot", "-m", "initial", "-q"], cwd=tree, env=env)
    sampler = Sampler(str(p.pid))
    sampler.start()
    _, code, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t0
    sampler.stop = True
    if code:
        raise SystemExit(f"snapshot failed: wait status {code}")
    return {"seconds": seconds, "peak_rss": usage.ru_maxrss >> 10, "phases": sampler.summary()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("lib", "cli"))
    parser.add_argument("tree")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    tree = os.path.abspath(args.tree)
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="snap-mem-") as work:
            store = os.path.join(work, "store")
            got = (run_lib if args.mode == "lib" else run_cli)(tree, store)
        phases = got["phases"].values()
        print(f"{args.mode}: {got['seconds']:.1f} s, peak RSS {got['peak_rss']} MiB "
              f"(sampled max: anon {max(p['max_RssAnon'] for p in phases)}, "
              f"file {max(p['max_RssFile'] for p in phases)})")
        for phase, d in got["phases"].items():
            at = ", ".join(f"{k[8:]} {v}" for k, v in d.items() if k.startswith("at_peak_") and k != "at_peak_VmRSS")
            print(f"  {phase:14s} peak {d['peak_rss']:4d} MiB  ({at})")


if __name__ == "__main__":
    main()
