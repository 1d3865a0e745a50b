"""A realistic edit history replayed on the stdlib corpus (issue 11, requirement 11).

Each step touches 1-5 files with small line edits (a line changed, inserted or removed, 1-3 per
file); now and then a small file is added (8%), deleted (4%) or renamed (4%). Seeded, so every
run and every contestant sees the same history; every contestant checkpoints every step (the
order alternating), and the figure is the median per checkpoint.
"""

from __future__ import annotations

import os
import random


class History:
    """The seeded edit steps, applied to ``root`` one at a time."""

    def __init__(self, root: str, seed: int):
        self.root = root
        self.rng = random.Random(seed * 7919 + 11)
        alive = []
        for dirpath, dirs, files in os.walk(root):
            dirs.sort()
            if "__pycache__" in dirpath:
                continue
            for name in sorted(files):
                p = os.path.join(dirpath, name)
                if name.endswith(".py") and not os.path.islink(p) and 200 < os.path.getsize(p) < 200_000:
                    alive.append(os.path.relpath(p, root))
        self.alive = alive
        self.n = 0
        self.kinds = {"edited": 0, "added": 0, "deleted": 0, "renamed": 0}

    def _edit_file(self, rel: str) -> None:
        p = os.path.join(self.root, rel)
        with open(p, "rb") as f:
            lines = f.read().splitlines(keepends=True)
        for _ in range(self.rng.randint(1, 3)):
            at = self.rng.randrange(max(1, len(lines)))
            r = self.rng.random()
            if r < 0.5 and lines:  # change a line, as an agent's small fix does
                lines[at] = lines[at].rstrip(b"\n") + f"  # fix {self.n}\n".encode()
            elif r < 0.8 or not lines:
                lines.insert(at, f"    value_{self.n} = {self.rng.randrange(1000)}\n".encode())
            else:
                del lines[at]
        with open(p, "wb") as f:
            f.write(b"".join(lines))
        self.kinds["edited"] += 1

    def step(self) -> None:
        """Apply the next step's edits to the tree."""
        self.n += 1
        rng = self.rng
        for rel in rng.sample(self.alive, rng.randint(1, 5)):
            self._edit_file(rel)
        r = rng.random()
        if r < 0.08:
            src = os.path.join(self.root, rng.choice(self.alive))
            with open(src, "rb") as f:
                body = f.read()[: rng.randrange(500, 4000)]
            rel = os.path.join(os.path.dirname(os.path.relpath(src, self.root)), f"replay_new_{self.n}.py")
            with open(os.path.join(self.root, rel), "wb") as f:
                f.write(f"# added at step {self.n}\n".encode() + body)
            self.alive.append(rel)
            self.kinds["added"] += 1
        elif r < 0.12:
            rel = self.alive.pop(rng.randrange(len(self.alive)))
            os.unlink(os.path.join(self.root, rel))
            self.kinds["deleted"] += 1
        elif r < 0.16:
            i = rng.randrange(len(self.alive))
            rel = self.alive[i]
            new = os.path.join(os.path.dirname(rel), f"renamed_{self.n}_{os.path.basename(rel)}")
            os.rename(os.path.join(self.root, rel), os.path.join(self.root, new))
            self.alive[i] = new
            self.kinds["renamed"] += 1


def run_replay(bench, comps: dict, corpus: str, tree: str, steps: int, seed: int) -> None:
    """Replay ``steps`` steps; every contestant checkpoints each step; per-checkpoint medians.

    The service and watcher contestants and their git counterparts always take part; snap-cli
    and snap-lib only in the full run (150 more whole-process checkpoints cost ~1 minute).
    """
    from .common import PAIRS, log
    from .competitors import LibWorker
    from .measure import Series, fmt_seconds

    names = ["snap-svc", "git-cli", "snap-watch", "pygit2"]
    if not bench.args.quick:
        names += ["snap-cli", "snap-lib"]
    active = {n: comps[n] for n in names if n in comps}
    if "snap-svc" in active and not active["snap-svc"].supported:
        del active["snap-svc"]
    for c in active.values():
        if isinstance(c, LibWorker):
            c.start()
    svc = active.get("snap-svc")
    req0 = svc.requests() if svc is not None else None
    hist = History(tree, seed)
    series = {n: Series() for n in active}
    bench.checkpoint_all(active, "before the replay")  # (the watcher's first, full walk)
    for step in range(1, steps + 1):
        hist.step()
        for name in bench.order(active, step):
            t, rss = active[name].checkpoint(f"replay step {step}")
            series[name].add(t, rss or 0)
    if svc is not None and req0 is not None:
        bench.check_service(svc, corpus, "replay", req0, steps)
    for name, c in active.items():
        if isinstance(c, LibWorker):
            series[name].rss_kib = [c.rss_kib()]
            c.close()
    label = f"{steps}-step edit-history replay (median per checkpoint)"
    for pair, (a, b) in PAIRS.items():
        if a in series and b in series:
            bench.add_row(corpus, "replay", label, pair, series[a], series[b], b)
    per = ", ".join(f"{n} median {fmt_seconds(s.median())}, total {fmt_seconds(sum(s.seconds))}, "
                    f"max {fmt_seconds(max(s.seconds))}" for n, s in series.items())
    bench.facts["sessions"].append(
        f"{corpus} replay of {steps} steps ({hist.kinds['edited']} file edits, {hist.kinds['added']} "
        f"adds, {hist.kinds['deleted']} deletes, {hist.kinds['renamed']} renames): {per}")
    log(f"{corpus} replay: {per}")


if __name__ == "__main__":  # python -m benchmarks.replay --repo PATH: a real repository's history
    from .repo_replay import main

    raise SystemExit(main())
