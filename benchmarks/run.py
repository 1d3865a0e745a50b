"""Entry point: ``python -m benchmarks.run [--quick] [--out docs/benchmarks.md]``.

Builds the corpora under a temporary directory, drives the four contestants (see
benchmarks.competitors) through the scenarios of issue 5, prints a table, writes a JSON file and,
with ``--out``, the markdown page.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time

from . import competitors, corpora, peers, replay
from .common import ORDER, PAIRS, expand, floors, log
from .competitors import GitCLI, LibWorker, NotBuilt, OpFailed, SnapCLI, SnapSvc
from .measure import CommandFailed, Series, fmt_bytes, fmt_seconds
from .report import Row, machine, render_markdown, render_text, to_json
from .service_bench import ServiceScenarios

HERE = os.path.dirname(os.path.abspath(__file__))
class Bench(ServiceScenarios):
    def __init__(self, args):
        self.args = args
        self.rows: list[Row] = []
        self.facts: dict = {"sessions": [], "bytes": []}
        self.notes: list[str] = []
        self.corpora_meta: dict[str, str] = {}
        self.notes_seen: set[str] = set()

    # -- contestants ------------------------------------------------------------------------------

    def make(self, tree: str, state: str, with_lib: bool = True) -> dict:
        comps = {
            "snap-cli": SnapCLI(tree, os.path.join(state, "snap-cli")),
            "git-cli": GitCLI(tree, os.path.join(state, "git-cli")),
        }
        if competitors.has_service():
            comps["snap-svc"] = SnapSvc(tree, os.path.join(state, "snap-svc"))
        elif "no-service" not in self.notes_seen:
            self.notes_seen.add("no-service")
            self.notes.append("This snapstore has no resident service: no snap-svc rows.")
        if with_lib:
            comps["snap-lib"] = LibWorker("snap", tree, os.path.join(state, "snap-lib"))
            comps["pygit2"] = LibWorker("pygit2", tree, os.path.join(state, "pygit2"))
            if competitors.has_watch():
                comps["snap-watch"] = LibWorker("snapwatch", tree, os.path.join(state, "snap-watch"))
            elif "no-watch" not in self.notes_seen:
                self.notes_seen.add("no-watch")
                self.notes.append("This snapstore has no `Store.open(watch=True)`: no snap-watch rows.")
        return comps

    @staticmethod
    def order(comps: dict, i: int) -> list[str]:
        names = [n for n in ORDER if n in comps]
        return names if i % 2 == 0 else names[::-1]

    def measure(self, comps, corpus, scenario, label, op, *, runs, warmup=True, before=None,
                after=None, pairs=("cli", "lib")) -> dict[str, Series]:
        """Run ``op(comp, i)`` for every contestant, interleaved, ``runs`` times (+ warm-up)."""
        pairs = expand(pairs)
        svc = comps.get("snap-svc")
        requests0 = svc.requests() if svc is not None and "svc" in pairs else None
        active = {n: c for n, c in comps.items() if any(n in PAIRS[p] for p in pairs)}
        series = {n: Series() for n in active}
        for c in active.values():
            if isinstance(c, LibWorker):
                c.start()  # a fresh child: per-scenario peak RSS
        for i in range(-1 if warmup else 0, runs):
            ctx = before(i) if before else None
            for name in self.order(active, i):
                s = series[name]
                if s.na:
                    continue
                try:
                    seconds, rss, nbytes = op(active[name], i, ctx)
                except NotBuilt as exc:
                    s.na = f"n/a (not built: {exc})"
                    continue
                except (CommandFailed, OpFailed) as exc:
                    s.na = "FAILED"
                    self.notes.append(f"{corpus} {label}: {name} failed: {exc}")
                    log(f"FAILED {name}: {exc}")
                    continue
                if i >= 0:
                    s.add(seconds, rss or 0, nbytes)
            if after:
                after(i, ctx)
        if requests0 is not None and svc is not None:
            self.check_service(svc, corpus, label, requests0, runs + warmup)
        for name, c in active.items():
            if isinstance(c, LibWorker) and c.proc is not None:
                series[name].rss_kib = [c.rss_kib()] if series[name].seconds else []
                c.close()
        for p in pairs:
            a, b = PAIRS[p]
            if a in series:
                self.add_row(corpus, scenario, label, p, series[a], series[b], b)
        log(f"{corpus} {label}: " + ", ".join(
            f"{n} {s.na or fmt_seconds(s.median())}" for n, s in series.items()))
        return series

    def add_row(self, corpus, scenario, label, pair, snap, other, other_name, extra=None):
        row = Row(corpus, scenario, label, pair, snap, other, other_name, extra or {})
        self.rows.append(row)
        return row

    # -- scenarios --------------------------------------------------------------------------------

    def initial(self, comps, corpus, runs, warmup=True, pairs=("cli", "lib")) -> None:
        sizes: dict[str, list[int]] = {n: [] for n in comps}

        def op(c, i, ctx):
            c.setup()
            if isinstance(c, LibWorker):
                c.start()
                t, _ = c.checkpoint("initial")
                rss = c.rss_kib()
                c.close()
            else:
                t, rss = c.checkpoint("initial")
            b = c.disk_bytes()
            if i >= 0:
                sizes[c.name].append(b)
            return t, rss, b

        active = {n: c for n, c in comps.items() if any(n in PAIRS[p] for p in pairs)}
        series = {n: Series() for n in active}
        for i in range(-1 if warmup else 0, runs):
            for name in self.order(active, i):
                t, rss, b = op(active[name], i, None)
                if i >= 0:
                    series[name].add(t, rss, b)
        for name, c in comps.items():
            if name not in active:  # set up (untimed) for the later scenarios
                c.setup()
                c.checkpoint("initial")
                c.close()
        for p in pairs:
            a, b = PAIRS[p]
            self.add_row(corpus, "initial", "initial checkpoint", p, series[a], series[b], b)
        log(f"{corpus} initial: " + ", ".join(f"{n} {fmt_seconds(s.median())}" for n, s in series.items()))
        git = comps["git-cli"]
        gc_bytes, gc_s = (None, 0.0) if self.args.quick else git.gc_bytes()
        snap_b = comps["snap-cli"].disk_bytes()
        loose = git.disk_bytes()
        doc = {"snap_cli": snap_b, "git_loose": loose, "git_gc": gc_bytes, "git_gc_seconds": gc_s}
        if "snap-lib" in active:
            doc["snap_lib"] = comps["snap-lib"].disk_bytes()
            doc["pygit2_loose"] = comps["pygit2"].disk_bytes()
        self.facts[f"{corpus}_initial_bytes".replace("-", "_")] = doc
        self.facts["bytes"].append(
            f"{corpus} after the initial checkpoint: snapstore {fmt_bytes(snap_b)}, git objects "
            f"{fmt_bytes(loose)} loose, {fmt_bytes(gc_bytes)} after `git gc` ({gc_s:.1f} s)"
            if gc_bytes is not None else
            f"{corpus} after the initial checkpoint: snapstore {fmt_bytes(snap_b)}, git objects "
            f"{fmt_bytes(loose)} loose (no `git gc` in --quick)"
        )

    def no_change(self, comps, corpus, runs, warmup=True, pairs=("cli", "lib")) -> None:
        def op(c, i, ctx):
            t, rss = c.checkpoint(f"no change {i}")
            return t, rss, None

        self.measure(comps, corpus, "no-change", "no-change checkpoint", op, runs=runs,
                     warmup=warmup, pairs=pairs)

    def edits(self, comps, corpus, editor, n, runs) -> None:
        def before(i):
            editor.edit(n)

        def op(c, i, ctx):
            t, rss = c.checkpoint(f"edit {n} run {i}")
            return t, rss, None

        self.measure(comps, corpus, f"edit-{n}", f"checkpoint after editing {n} file{'s' * (n > 1)}",
                     op, runs=runs, before=before)

    def checkpoint_all(self, comps, msg) -> dict[str, str]:
        ids = {}
        for name, c in comps.items():
            c.checkpoint(msg)
            ids[name] = c.latest_id()
        return ids

    def status(self, comps, corpus, editor, runs) -> None:
        editor.edit(10)

        def op(c, i, ctx):
            t, rss = c.status()
            return t, rss, None

        self.measure(comps, corpus, "status", "working-tree status (10 files changed)", op, runs=runs)
        for c in comps.values():
            if isinstance(c, LibWorker):
                c.start()
        self.checkpoint_all(comps, "after status")

    def diff_and_restore(self, comps, corpus, editor, runs) -> None:
        for c in comps.values():
            if isinstance(c, LibWorker):
                c.start()
        x_ids = self.checkpoint_all(comps, "before 100 edits")
        old = editor.edit(100)
        y_contents = {}
        for rel in old:
            with open(os.path.join(editor.root, rel), "rb") as f:
                y_contents[rel] = f.read()
        y_ids = self.checkpoint_all(comps, "after 100 edits")
        for c in comps.values():
            c.close()

        def diff_op(c, i, ctx):
            t, rss = c.diff(x_ids[c.name], y_ids[c.name])
            return t, rss, None

        self.measure(comps, corpus, "diff-100", "diff --stat of two checkpoints 100 files apart",
                     diff_op, runs=runs)

        bad: list[str] = []

        def restore_op(c, i, ctx):
            for rel, data in y_contents.items():  # the tree is at Y again (untimed)
                with open(os.path.join(editor.root, rel), "wb") as f:
                    f.write(data)
            t, rss = c.restore(x_ids[c.name])
            competitors.let_sync_settle(c.name)
            wrong = 0
            for rel, data in old.items():
                try:
                    with open(os.path.join(editor.root, rel), "rb") as f:
                        wrong += f.read() != data
                except FileNotFoundError:
                    wrong += 1
            if wrong:
                bad.append(f"{c.name} run {i}: {wrong} of 100 files not restored")
            return t, rss, None

        self.measure(comps, corpus, "restore-100", "restore a checkpoint 100 files away",
                     restore_op, runs=runs)
        # leave the tree at X, which every store has as a checkpoint
        for rel, data in old.items():
            with open(os.path.join(editor.root, rel), "wb") as f:
                f.write(data)
        if bad:
            self.notes.append("RESTORE CHECK FAILED: " + "; ".join(bad))

    def bigfile(self, comps, editor, runs) -> None:
        editor.write_bigfile()
        for c in comps.values():
            if isinstance(c, LibWorker):
                c.start()
        if self.args.quick:
            comps = {n: comps[n] for n in ("snap-cli", "git-cli", "snap-svc") if n in comps}
        self.checkpoint_all(comps, "bigfile added")
        for c in comps.values():
            c.close()
        snap_new: list[int] = []

        def before(i):
            editor.flip_bigfile_byte()

        def op(c, i, ctx):
            b0 = c.disk_bytes()
            t, rss = c.checkpoint(f"1 byte {i}")
            grown = c.disk_bytes() - b0
            if c.name == "snap-cli":
                nb = int(c.latest()["stats"].get("new_bytes", grown))
                if i >= 0:
                    snap_new.append(nb)
                return t, rss, nb
            if c.name == "snap-lib":
                return t, rss, c.last.get("new_bytes", grown)
            return t, rss, grown

        quick = self.args.quick
        series = self.measure(comps, "bigfile", "edit-1-byte", "1-byte change in a 200 MB file",
                              op, runs=min(runs, 2) if quick else runs, before=before,
                              warmup=not quick, pairs=("cli",) if quick else ("cli", "lib"))
        cli_row = next(r for r in reversed(self.rows) if r.scenario == "edit-1-byte" and r.pair == "cli")
        cli_row.extra["snap_new_bytes"] = max(snap_new) if snap_new else None
        self.facts["bytes"].append(
            f"bigfile 1-byte change: snapstore stored {fmt_bytes(max(snap_new) if snap_new else None)} "
            f"per checkpoint (new_bytes; max of runs), git objects grew by "
            f"{fmt_bytes(max(series['git-cli'].bytes) if series['git-cli'].bytes else None)}"
        )
        os.unlink(os.path.join(editor.root, corpora.BIGFILE_NAME))

    def session(self, comps, corpus, editor, steps) -> None:
        before_bytes = {n: c.disk_bytes() for n, c in comps.items()}
        for c in comps.values():
            if isinstance(c, LibWorker):
                c.start()
        totals = {n: Series() for n in comps}
        svc_req0 = comps["snap-svc"].requests() if "snap-svc" in comps else None
        for step in range(1, steps + 1):
            if step % 50 == 0:
                editor.bulk()
            else:
                r = editor.rng.random()
                if r < 0.65:
                    editor.edit(editor.rng.randint(1, 3))
                elif r < 0.80:
                    editor.new_files(editor.rng.randint(1, 3))
                elif r < 0.90:
                    editor.delete(editor.rng.randint(1, 2))
            for name in self.order(comps, step):
                t, rss = comps[name].checkpoint(f"session step {step}")
                totals[name].add(t, rss or 0)
        for name, c in comps.items():
            if isinstance(c, LibWorker):
                totals[name].rss_kib = [c.rss_kib()]
                c.close()
        if svc_req0 is not None:
            self.check_service(comps["snap-svc"], corpus, "agent session", svc_req0, steps)
        grown = {n: c.disk_bytes() - before_bytes[n] for n, c in comps.items()}
        gc_bytes = None if self.args.quick else comps["git-cli"].gc_bytes()[0]
        for pair, (a, b) in PAIRS.items():
            if a not in totals:
                continue
            sa, sb = Series(), Series()
            sa.add(sum(totals[a].seconds), max(totals[a].rss_kib), grown[a])
            sb.add(sum(totals[b].seconds), max(totals[b].rss_kib), grown[b])
            sa.note = sb.note = f"{steps} checkpoints, total"
            self.add_row(corpus, "session", f"agent session: {steps} checkpoints (total)", pair, sa, sb, b)
        per = ", ".join(f"{n} {fmt_seconds(sum(s.seconds))} total "
                        f"(median {fmt_seconds(s.median())}/checkpoint, max {fmt_seconds(max(s.seconds))})"
                        for n, s in totals.items())
        self.facts["sessions"].append(f"{corpus}, {steps} checkpoints: {per}")
        self.facts["sessions"].append(
            "store growth over the session: "
            + ", ".join(f"{n} {fmt_bytes(g)}" for n, g in grown.items())
            + f"; git-cli objects after `git gc`: {fmt_bytes(gc_bytes)} in total "
            f"(snap-cli store in total: {fmt_bytes(comps['snap-cli'].disk_bytes())})"
        )
        log(f"{corpus} session: {per}")
        snap = comps["snap-cli"]
        before = snap.disk_bytes()
        seconds = snap.retention(20)
        after = snap.disk_bytes()
        self.facts["sessions"].append(
            f"retention on the snap-cli store after the session: `snapstore prune --keep-last 20` + "
            f"`snapstore gc --compact` took {fmt_seconds(seconds)}; store on disk "
            f"{fmt_bytes(before)} -> {fmt_bytes(after)}"
        )
        log(f"{corpus} retention: {fmt_bytes(before)} -> {fmt_bytes(after)} in {fmt_seconds(seconds)}")

    # -- driver -----------------------------------------------------------------------------------

    def run(self) -> None:
        a = self.args
        work = a.workdir
        if os.path.exists(work):
            shutil.rmtree(work)
        os.makedirs(work)
        if a.snapstore_at:
            src = os.path.join(work, "snapstore-src")
            os.makedirs(src)
            root = os.path.dirname(HERE)
            archive = subprocess.run(["git", "-C", root, "archive", a.snapstore_at, "snapstore"],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
            competitors.SNAPSTORE_SRC = src
            commit = subprocess.run(["git", "-C", root, "rev-parse", a.snapstore_at],
                                    capture_output=True, text=True, check=True).stdout.strip()
            self.notes.append(f"snapstore measured at commit {commit[:12]} (`--snapstore-at {a.snapstore_at}`).")
        else:
            self.notes.append("snapstore measured from the checkout as it was (working tree).")
        runs = a.runs
        try:
            tree = os.path.join(work, "stdlib")
            log(f"building stdlib corpus from {corpora.stdlib_dir()}")
            corpora.build_stdlib(tree)
            n, size = corpora.tree_stats(tree)
            self.corpora_meta["stdlib"] = f"{n} files, {fmt_bytes(size)} (from {corpora.stdlib_dir()})"
            if not a.quick:  # (the copy just written is in the page cache anyway)
                corpora.warm(tree)
            if a.heavy_only:  # (the stdlib tree is the x10 corpora's source)
                self.heavy(work, tree)
                return
            comps = self.make(tree, os.path.join(work, "state-stdlib"))
            editor = corpora.Editor(tree, a.seed)
            init_runs = a.initial_runs if a.initial_runs else runs
            self.initial(comps, "stdlib", init_runs, warmup=not a.quick,
                         pairs=("cli",) if a.quick else ("cli", "lib"))
            self.start_service(comps, "stdlib")
            try:
                self.no_change(comps, "stdlib", runs)
                for n in (1, 10, 100):
                    self.edits(comps, "stdlib", editor, n, runs)
                self.status(comps, "stdlib", editor, runs)
                self.diff_and_restore(comps, "stdlib", editor, runs)
                if a.session_steps:
                    self.session(comps, "stdlib", editor, a.session_steps)
                if not a.no_peers:  # (before the replay, which deletes and renames the editor's files)
                    peers.run_peers(self, comps, "stdlib", tree, os.path.join(work, "state-stdlib"), editor, runs)
                if a.replay_steps:
                    replay.run_replay(self, comps, "stdlib", tree, a.replay_steps, a.seed)
                self.corpora_meta["bigfile"] = "stdlib + one 200 MB file of seeded random bytes"
                self.bigfile(comps, editor, runs)
            finally:
                self.stop_service(comps, "stdlib")
                for c in comps.values():
                    c.close()
            if a.resolve_checkpoints:
                self.resolve(work)
            if not a.quick and not a.no_heavy:
                self.heavy(work, tree)
        finally:
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)

    def heavy(self, work: str, src: str) -> None:
        a = self.args
        for corpus, unique in (("stdlib-x10", False), ("stdlib-x10u", True)):
            tree = os.path.join(work, corpus)
            log(f"building {corpus}")
            corpora.build_x10(src, tree, unique)
            n, size = corpora.tree_stats(tree)
            self.corpora_meta[corpus] = f"{n} files, {fmt_bytes(size)}"
            corpora.warm(tree)
            comps = self.make(tree, os.path.join(work, f"state-{corpus}"), with_lib=not a.heavy_cli_only)
            pairs = ("cli",) if a.heavy_cli_only else ("cli", "lib")
            self.initial(comps, corpus, a.heavy_runs, warmup=False, pairs=pairs)
            self.start_service(comps, corpus)
            try:
                self.no_change(comps, corpus, max(a.heavy_runs, 5), pairs=pairs)
            finally:
                self.stop_service(comps, corpus)
                for c in comps.values():
                    c.close()
            shutil.rmtree(tree, ignore_errors=True)
            shutil.rmtree(os.path.join(work, f"state-{corpus}"), ignore_errors=True)
        self.notes.append(
            f"Heavy corpora (stdlib-x10, stdlib-x10u): initial checkpoint {a.heavy_runs} runs without a "
            "separate warm-up run (the tree was just written and read once, so the page cache is warm; "
            "each run is a fresh store), to keep `make bench` under ~25 minutes"
            + ("; CLI contestants only" if a.heavy_cli_only else "") + "."
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="stdlib only, 3 runs, short session (< 2 min)")
    p.add_argument("--out", help="write the markdown report here (e.g. docs/benchmarks.md)")
    p.add_argument("--json", help="JSON output (default benchmarks/results/latest.json; quick.json with --quick)")
    p.add_argument("--runs", type=int, help="runs per figure (default 5; 3 with --quick)")
    p.add_argument("--initial-runs", type=int, help="runs of the stdlib initial checkpoint")
    p.add_argument("--heavy-runs", type=int, default=3, help="initial-checkpoint runs on x10 corpora")
    p.add_argument("--heavy-cli-only", action="store_true", help="x10 corpora: CLI contestants only")
    p.add_argument("--no-heavy", action="store_true", help="skip stdlib-x10 and stdlib-x10u")
    p.add_argument("--heavy-only", action="store_true", help="only stdlib-x10 and stdlib-x10u")
    p.add_argument("--session-steps", type=int, help="checkpoints in the agent session (200; 20 quick)")
    p.add_argument("--replay-steps", type=int, default=150, help="steps of the edit-history replay")
    p.add_argument("--resolve-checkpoints", type=int, default=10_000,
                   help="checkpoints in the store whose resolve latency is measured")
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--no-peers", action="store_true", help="skip restic and borg (benchmarks.peers)")
    p.add_argument("--snapstore-at", metavar="REV",
                   help="measure snapstore as of git revision REV (exported), not the working tree")
    p.add_argument("--workdir", default="/tmp/snapstore-bench")
    p.add_argument("--keep", action="store_true", help="keep the corpora and stores")
    args = p.parse_args(argv)
    if args.runs is None:
        args.runs = 3 if args.quick else 5
    if args.initial_runs is None and args.quick:
        args.initial_runs = 1
    if args.session_steps is None:
        args.session_steps = 10 if args.quick else 200
    if args.json is None:
        args.json = os.path.join(HERE, "results", "quick.json" if args.quick else "latest.json")

    bench = Bench(args)
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    load_start = os.getloadavg()
    floor_times = floors(os.path.dirname(os.path.abspath(args.workdir)))
    bench.run()
    meta = {
        "started": started,
        "mode": "quick" if args.quick else "full",
        "runs": args.runs,
        "seed": args.seed,
        "elapsed_s": time.perf_counter() - t0,
        "machine": machine(),
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "floors": floor_times,
        "corpora": bench.corpora_meta,
        "notes": bench.notes,
    }
    if args.quick:
        bench.notes.append(
            f"Quick mode: stdlib only, {args.runs} runs ({args.initial_runs} for the initial "
            f"checkpoint, CLI contestants only; no warm-up run for the initial and bigfile figures, 2 bigfile runs with the CLI contestants "
            f"only, no `git gc` at all), a "
            f"{args.session_steps}-checkpoint session."
        )
    print(render_text(bench.rows, bench.facts, meta["floors"]))
    for note in bench.notes:
        print(f"note: {note}")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        f.write(to_json(bench.rows, bench.facts, meta) + "\n")
    if args.out:
        from .mdfile import write_generated

        write_generated(args.out, render_markdown(bench.rows, bench.facts, meta) + "\n", "benchmarks.run")
    log(f"done in {meta['elapsed_s']:.0f} s; JSON in {args.json}" + (f", markdown in {args.out}" if args.out else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
