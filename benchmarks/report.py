"""Targets, the stdout table, the JSON document and the markdown page."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata

from .measure import Series, fmt_bytes, fmt_seconds
from .report_issue11 import floors_line, issue11_targets, resolve_lines

KIB = 1024
MB = 1000 * 1000

# (corpus, scenario, pair) -> maximum ratio snapstore/competitor (time)
RATIO_TARGETS: dict[tuple[str, str, str], float] = {
    ("stdlib", "initial", "cli"): 0.10,
    ("stdlib", "no-change", "cli"): 1.0,
    ("stdlib", "edit-1", "cli"): 1.0,
    ("stdlib", "edit-100", "cli"): 0.5,
    ("stdlib", "restore-100", "cli"): 1.0,
    ("stdlib", "diff-100", "cli"): 1.0,
    ("bigfile", "edit-1-byte", "cli"): 0.05,
    ("stdlib-x10", "initial", "cli"): 0.10,
    ("stdlib-x10u", "initial", "cli"): 0.10,
    ("stdlib-x10", "no-change", "cli"): 1.0,
    ("stdlib", "no-change", "lib"): 0.5,
    # issue 11: with the resident service (CLI) and the watcher (library)
    ("stdlib", "no-change", "svc"): 0.4,
    ("stdlib", "edit-1", "svc"): 0.4,
    ("stdlib", "edit-100", "svc"): 0.5,
    ("stdlib", "restore-100", "svc"): 1.0,
    ("stdlib", "diff-100", "svc"): 0.5,
    ("stdlib", "replay", "svc"): 0.5,
    ("stdlib-x10", "no-change", "svc"): 0.05,
    ("stdlib", "no-change", "watch"): 0.05,
    ("stdlib", "edit-1", "watch"): 0.1,
}
MODES = {"cli": "CLI", "svc": "CLI + service", "lib": "library", "watch": "library, watch=True",
         # snapstore beside the backup tools (benchmarks.peers)
         "cli-restic": "CLI", "cli-borg": "CLI", "svc-restic": "CLI + service", "svc-borg": "CLI + service"}

BIGFILE_BYTES_TARGET = 256 * KIB
RSS_TARGET = 100 * MB


@dataclass
class Row:
    corpus: str
    scenario: str
    label: str
    pair: str  # "cli", "svc", "lib" or "watch" (see MODES)
    snap: Series
    other: Series
    other_name: str
    extra: dict = field(default_factory=dict)

    def ratio(self) -> float | None:
        a, b = self.snap.median(), self.other.median()
        if not self.snap.ok or not self.other.ok or not b:
            return None
        return a / b

    def target(self) -> float | None:
        return RATIO_TARGETS.get((self.corpus, self.scenario, self.pair))

    def verdict(self) -> str:
        t = self.target()
        if t is None:
            return ""
        if self.snap.na:
            return "n/a (not built)"
        r = self.ratio()
        if r is None:
            return "n/a"
        ok = r <= t
        if self.scenario == "edit-1-byte" and self.pair == "cli":
            nb = self.extra.get("snap_new_bytes")
            ok = ok and nb is not None and nb < BIGFILE_BYTES_TARGET
        return "met" if ok else "MISSED"

    def target_text(self) -> str:
        t = self.target()
        if t is None:
            return ""
        text = f"<= {t:g}x"
        if self.scenario == "edit-1-byte" and self.pair == "cli":
            text += ", < 256 KiB"
        return text

    def to_json(self) -> dict:
        return {
            "corpus": self.corpus,
            "scenario": self.scenario,
            "label": self.label,
            "pair": self.pair,
            "snapstore": self.snap.to_json(),
            self.other_name: self.other.to_json(),
            "ratio": self.ratio(),
            "target_max_ratio": self.target(),
            "verdict": self.verdict(),
            **({"extra": self.extra} if self.extra else {}),
        }


def _span(s: Series) -> str:
    if s.na:
        return s.na
    if not s.seconds:
        return "-"
    return f"{fmt_seconds(s.median())} ({fmt_seconds(min(s.seconds))}-{fmt_seconds(max(s.seconds))})"


def _rss(s: Series) -> str:
    return f"{max(s.rss_kib) / 1024:.0f} MiB" if s.rss_kib else "-"


def table_rows(rows: list[Row]) -> list[list[str]]:
    out = []
    for r in rows:
        ratio = r.ratio()
        out.append(
            [
                r.corpus,
                r.label,
                MODES.get(r.pair, r.pair),
                _span(r.snap),
                f"{r.other_name}: {_span(r.other)}",
                f"{ratio:.2f}x" if ratio is not None else "n/a",
                f"{_rss(r.snap)} / {_rss(r.other)}",
                r.target_text(),
                r.verdict(),
            ]
        )
    return out


HEADER = ["corpus", "scenario", "mode", "snapstore median (min-max)", "competitor median (min-max)",
          "ratio", "peak RSS snap / other", "target", "verdict"]


def summary_targets(rows: list[Row], facts: dict) -> list[list[str]]:
    """Targets that are not a time ratio of one row."""
    out = []
    sb = facts.get("stdlib_initial_bytes")
    if sb:
        snap, git_loose, git_gc = sb["snap_cli"], sb["git_loose"], sb["git_gc"]
        out.append(
            [
                "stored bytes after initial (stdlib)",
                f"snapstore {fmt_bytes(snap)}; git {fmt_bytes(git_loose)} loose, {fmt_bytes(git_gc)} after gc",
                "<= git after gc",
                "n/a (no gc in --quick)" if git_gc is None else "met" if snap <= git_gc else "MISSED",
            ]
        )
    peaks = [
        (max(r.snap.rss_kib) * 1024, f"{r.corpus} {r.label} ({r.pair})")
        for r in rows
        if r.snap.rss_kib and ("initial" in r.scenario or "edit" in r.scenario
                               or "no-change" in r.scenario or "session" in r.scenario)
    ]
    if peaks:
        peak, where = max(peaks)
        out.append(
            [
                "peak RSS of any snapstore checkpoint",
                f"{peak / MB:.0f} MB ({where})",
                "<= 100 MB",
                "met" if peak <= RSS_TARGET else "MISSED",
            ]
        )
    return out


def render_text(rows: list[Row], facts: dict, floors: dict | None = None) -> str:
    body = [HEADER, *table_rows(rows)]
    widths = [max(len(r[i]) for r in body) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in body]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for name, value, target, verdict in summary_targets(rows, facts):
        lines.append(f"{name}: {value}  target {target}: {verdict}")
    for line in facts.get("sessions", []):
        lines.append(line)
    for name, limit, measured, verdict, bound in issue11_targets(rows, facts, floors or {}):
        lines.append(f"issue 11: {name}: {measured}  target {limit}: {verdict}" + (f" ({bound})" if bound else ""))
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(out)


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        git = "none"
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
            mem = f"{kib / (1 << 20):.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    libs = {}
    for dist in ("snapstore", "pygit2", "lmdb", "zstandard", "blake3", "pyfastcdc", "msgpack", "click"):
        try:
            libs[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            libs[dist] = "-"
    try:
        import pygit2

        libs["libgit2"] = pygit2.LIBGIT2_VERSION
    except ImportError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "git": git,
        "libraries": libs,
    }


def machine_line(m: dict) -> str:
    libs = ", ".join(f"{k} {v}" for k, v in m["libraries"].items())
    return (f"{m['cores']} cores, {m['cpu']}, {m['memory']} RAM, {m['os']}; Python {m['python']}; "
            f"{m['git']}; {libs}")


def to_json(rows: list[Row], facts: dict, meta: dict) -> str:
    doc = {
        **meta,
        "rows": [r.to_json() for r in rows],
        "summary_targets": [
            dict(zip(("target", "value", "limit", "verdict"), s, strict=False)) for s in summary_targets(rows, facts)
        ],
        "issue11_targets": [
            dict(zip(("scenario", "target", "measured", "verdict", "bound"), t, strict=True))
            for t in issue11_targets(rows, facts, meta.get("floors", {}))
        ],
        "facts": facts,
    }
    return json.dumps(doc, indent=1, default=str)


NOTES = """\
## Notes

- **Durability differs.** snapstore fsyncs its LMDB commit at the end of every checkpoint
  (`backend.sync()`); git by default does not fsync loose objects or the index (`core.fsync`
  is off, `core.fsyncObjectFiles` false), so a git checkpoint can be lost or left with empty
  objects by a power cut. The git figures are therefore for a weaker guarantee.
- **Bytecode caching on for snapstore's CLI.** The harness drops `PYTHONDONTWRITEBYTECODE` from
  the environment of `snapstore` processes, as a pip-installed package runs from compiled
  bytecode; with it set, every process recompiles every module (~40 ms more per command).
- **Auto gc is off in the shadow repositories** (`gc.auto=0`, `maintenance.auto=false`). Left on,
  `git commit` starts a detached `git gc --auto` once there are > 6,700 loose objects (the first
  checkpoint of a stdlib tree already has 7,700), which would run in the background during the
  next measurements. "after gc" figures come from `git gc -q` run on a copy of the repository.
- **Same trees, same operations.** All four contestants keep their own store outside one shared
  working tree (snapstore with `--store DIR`, git with a separate `GIT_DIR` and `core.worktree`),
  so neither sees the other's store. Each run applies one set of seeded edits to the tree, then
  every contestant checkpoints that same state, in an order that alternates from run to run
  (snap, git, snap-lib, pygit2 / git, snap, pygit2, snap-lib), so machine drift cancels.
  Edits pick files never edited before (seed fixed, `--seed`).
- **Warm page cache for all.** The tree is read once before the measurements, and every figure
  (except the heavy corpora's initial checkpoints, see below) has one unrecorded warm-up run.
- **CLI figures** are wall times of whole processes (`time.perf_counter` around `Popen` +
  `os.wait4`), peak RSS from `wait4`'s `ru_maxrss`; a git checkpoint is two processes
  (`git add -A`, `git commit`), its time is the sum and its RSS the larger of the two.
  **Library figures** time only the call (`Store.snapshot`, or pygit2's `index.add_all` +
  `index.write` + `write_tree` + `create_commit`), made by a child process that keeps the store
  open, as an agent would; that child is restarted for every scenario, so its peak RSS (which
  includes the interpreter and imports) is per scenario.
- **Peak RSS floor.** Linux carries a process's RSS high-water mark across `vfork`/`exec`, so a
  child's `ru_maxrss` is at least the harness's own peak RSS; the harness therefore never holds
  big buffers (the 200 MB file is written in 1 MiB blocks), keeping that floor at ~20-30 MB.
- **restore** sets the tree to the later checkpoint (the 100 edited files rewritten, untimed),
  then times the contestant's restore of the earlier one and checks the 100 files' bytes.
  git: `git reset --hard` + `git clean -fd`; pygit2: `reset(HARD)` + removal of untracked files;
  snapstore: `snapstore restore REF` / `Store.restore(ref)`.
- **diff**: CLI `git diff --stat A B` against `snapstore diff A B --stat` (both count lines);
  library: `Store.diff(a, b)` (the changed paths) against pygit2 `diff(a, b).deltas` (the same,
  from the trees, without reading contents). **status** (10 files edited, not
  checkpointed): `git status --porcelain`, pygit2 `status()`; `snapstore diff` /
  `Store.status()` (or `Store.diff("latest")`).
- **bigfile**: a 200 MB file of seeded random bytes is added to the stdlib tree and checkpointed
  (untimed); each run then flips one byte near its middle. "bytes" is what the checkpoint added:
  snapstore's `new_bytes` statistic; for git, the growth of the objects directory.
- **agent session**: 200 checkpoints (`--session-steps`) on the stdlib tree, continuing the same
  stores: each step makes a seeded mix of small edits (1-3 files, 65%), new files (15%),
  deletions (10%) or nothing (10%), and every 50th step is a bulk formatter-like change over
  one package (quotes normalised in every .py file of one directory, 30-400 files); then all
  contestants checkpoint.
  Reported: total checkpoint time and store growth (git: objects directory, then after `git gc`).
- **snap-svc** (CLI + service): the snap-cli commands, same arguments, on its own store, with
  `snapstore serve --detach` started after the initial checkpoint and `serve --stop` at the end;
  every figure checks with `serve --status` that its commands reached the service (a client
  falling back in-process would be reported as SERVICE CHECK FAILED). Its RSS column is the thin
  client's; the service's peak RSS is under "Agent session". **snap-watch**: the snap-lib child with
  `Store.open(root, watch=True)`; restarted per scenario like snap-lib, so each figure's warm-up run
  includes the watcher's first, full walk.
- **replay**: a seeded 150-step edit history on the stdlib tree (`--replay-steps`): each step edits
  1-5 .py files (1-3 lines changed, inserted or removed), and adds (8%), deletes (4%) or renames
  (4%) a file; every contestant checkpoints every step; the figure is the median per checkpoint.
- **resolve at 10,000 checkpoints** (`--resolve-checkpoints`): one real snapshot of a 50-file tree,
  then 9,999 checkpoint records written through the library (`build_record` and the `log` table);
  the references are resolved in one process with the store open.
- Operations that snapstore does not have yet are reported as "n/a (not built)"; they are
  measured automatically once `snapstore restore` / `snapstore diff` / `Store.restore` /
  `Store.diff` exist.
"""


def _load(meta: dict, key: str) -> str:
    vals = meta.get("load_average", {}).get(key)
    return "/".join(f"{v:.1f}" for v in vals) if vals else "?"


def _durability() -> str:
    from snapstore.storage import lmdb_durability

    return lmdb_durability.DEFAULT


def render_markdown(rows: list[Row], facts: dict, meta: dict) -> str:
    parts = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`python -m benchmarks.run --out docs/benchmarks.md`); "
        "`make bench-quick` runs a reduced set. A run rewrites the part between the two markers; write notes outside them.",
        "",
        f"**Machine:** {machine_line(meta['machine'])}; load average (1/5/15 min) "
        f"{_load(meta, 'start')} at the start, {_load(meta, 'end')} at the end (2 cores shared with "
        f"other sessions' work)",
        "",
        f"**Run:** {meta['started']}, mode `{meta['mode']}`, {meta['runs']} runs per figure "
        f"(median, min-max), seed {meta['seed']}, total {meta['elapsed_s']:.0f} s; load average "
        f"(1/5/15 min) {_load(meta, 'start')} at the start, {_load(meta, 'end')} at the end "
        f"(other work on the machine slows all contestants alike; the interleaving keeps the "
        f"ratios fair, the absolute times less so).",
        "",
        "**Durability:** every snapstore store used the default setting, "
        f"`storage.durability` = `{_durability()}` (what each setting syncs and may lose on a power "
        "failure: docs/reliability.md); git and pygit2 sync nothing by default.",
        "",
        "**Corpora:** " + "; ".join(f"`{k}` {v}" for k, v in meta["corpora"].items()),
        "",
        "## Results",
        "",
        "Ratio = snapstore median / competitor median (lower is better for snapstore). "
        "CLI rows compare `snapstore` processes with the git CLI (shadow git as Cline drives it); "
        "library rows compare in-process `snapstore.Store` calls with pygit2 (libgit2).",
        "",
        _md_table(HEADER, table_rows(rows)),
        "",
        "### Issue 11 targets (resident service, watcher, long history)",
        "",
        _md_table(["scenario", "target", "measured", "verdict", "what bounds a missed one"],
                  issue11_targets(rows, facts, meta.get("floors", {}))),
        "",
        floors_line(meta.get("floors", {})),
        "",
        *resolve_lines(facts),
        "### Other targets",
        "",
        _md_table(["target", "value", "limit", "verdict"], summary_targets(rows, facts)),
        "",
    ]
    if facts.get("sessions"):
        parts += ["### Agent session", "", *[f"- {s}" for s in facts["sessions"]], ""]
    if facts.get("bytes"):
        parts += ["### Bytes on disk", "", *[f"- {s}" for s in facts["bytes"]], ""]
    parts.append(NOTES)
    if meta.get("notes"):
        parts += [*[f"- {n}" for n in meta["notes"]], ""]
    return "\n".join(parts)
