"""The per-file cost of reading changed files in a watched checkpoint (issue 40).

``python -m benchmarks.reread [--repo PATH] [--files N] [--mode same|edit] [--rounds R]``: the
tree of PATH's HEAD is laid out in a scratch directory and checkpointed by ``Store(watch=True)``;
then, R times, N of its files are rewritten and checkpointed again, timed.

* ``same``: each file is replaced by a new file with the same bytes (what ``git read-tree -u
  --reset`` does to the files a restore's safety checkpoint then re-reads: new stat, content
  the store has);
* ``edit``: a line is appended to each file (new content, a delta on the previous version);
* ``--stdlib``: the tree is Python's standard library instead, and each round inserts a line
  at a random place in N files not edited before (``make bench``'s edit-100, in process).

Prints the median and the mean of the checkpoints and of the read phase (``read_changed``);
``--profile FILE`` writes a cProfile of the timed checkpoints.  Standalone (no other
benchmark module), so that ``PYTHONPATH=OLD python benchmarks/reread.py`` times an older
snapstore, interleaved with the current one by a shell loop.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import shutil
import statistics
import subprocess
import tempfile
import time


def _lay_out(repo: str, tree: str) -> list[str]:
    out = subprocess.run(["git", "-C", repo, "ls-files", "-z"], check=True, capture_output=True).stdout
    files = []
    for rel in out.decode().split("\0"):
        src = os.path.join(repo, rel)
        if not rel or not os.path.isfile(src) or os.path.islink(src):
            continue
        dst = os.path.join(tree, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)
        files.append(dst)
    return files


def _rewrite(paths: list[str], mode: str, round_no: int) -> None:
    for p in paths:
        with open(p, "rb") as f:
            data = f.read()
        if mode == "edit":
            data += b"# round %d\n" % round_no
        os.unlink(p)  # as git does: a new file (new inode, new stat)
        with open(p, "wb") as f:
            f.write(data)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", default=".")
    p.add_argument("--files", type=int, default=150)
    p.add_argument("--mode", choices=("same", "edit"), default="same")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--stdlib", action="store_true", help="edit fresh stdlib files (benchmarks.corpora)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profile", default=None)
    p.add_argument("--profile-reads", action="store_true", help="profile only the read phase")
    args = p.parse_args()
    os.environ.setdefault("SNAPSTORE_AUTOSTART", "0")
    from snapstore.ops.snapshot import read
    from snapstore.store import Store

    reads: list[float] = []
    real = read.read_changed

    def timed(*a: object, **k: object) -> object:
        t0 = time.perf_counter()
        if prof and args.profile_reads:
            prof.enable()
        try:
            return real(*a, **k)  # type: ignore[arg-type]
        finally:
            if prof and args.profile_reads:
                prof.disable()
            reads.append(time.perf_counter() - t0)

    read.read_changed = timed  # type: ignore[assignment]
    work = tempfile.mkdtemp(prefix="reread.")
    prof: cProfile.Profile | None = None
    if args.profile:
        prof = cProfile.Profile()
    try:
        tree = os.path.join(work, "tree")
        edit = None
        chosen: list[str] = []
        if args.stdlib:
            from benchmarks import corpora

            corpora.build_stdlib(tree)
            edit = corpora.Editor(tree, args.seed).edit
        else:
            files = sorted(_lay_out(os.path.abspath(args.repo), tree))
            step = max(1, len(files) // args.files)
            chosen = files[::step][: args.files]
        Store.init(tree, store=os.path.join(work, "store")).close()
        store = Store.open(tree, store=os.path.join(work, "store"), watch=True)
        store.maintain_after_snapshot = False
        store.snapshot("initial")
        reads.clear()
        times: list[float] = []
        cpu: list[float] = []  # (all threads: less sensitive than wall time to a loaded machine)
        for r in range(args.rounds):
            if edit is not None:
                edit(args.files)
            else:
                _rewrite(chosen, args.mode, r)
            time.sleep(0.05)  # let the watcher see the events
            t0, c0 = time.perf_counter(), time.process_time()
            if prof and not args.profile_reads:
                prof.enable()
            store.snapshot(f"round {r}")
            if prof and not args.profile_reads:
                prof.disable()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if prof and args.profile:
        prof.dump_stats(args.profile)
    what = "stdlib edit" if args.stdlib else args.mode
    print(f"{what} {args.files} files, load {os.getloadavg()[0]:.2f}: checkpoint median "
          f"{statistics.median(times) * 1e3:.2f} ms mean {statistics.mean(times) * 1e3:.2f} (CPU median "
          f"{statistics.median(cpu) * 1e3:.2f}); read_changed median {statistics.median(reads) * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
