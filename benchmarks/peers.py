"""restic and borg beside snapstore on the stdlib corpus (issue 24 req 5): backup tools are the
other way people keep versions without git, and their users' complaints (slow snapshots of
big trees, repositories that grow) are the ones snapstore answers.

Each is driven as its users drive it, from the command line, unencrypted (snapstore does not
encrypt either): ``restic backup .`` into a local repository, ``borg create REPO::N .``.  They
join four rows, in one interleaved run with snapstore through its service and with shadow git:
the initial checkpoint, a no-change one, one after editing 1 file and one after editing 100,
and the bytes on disk.  Missing (no restic or borg on the PATH) means their rows say so; `make
bench` installs both with apt-get when root, as the UI tests do with chromium.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from .measure import Series, disk_bytes, output, run

#: Rows: scenario, label, files edited before each run (None: the initial checkpoint).
SCENARIOS = (("initial", "initial checkpoint", None), ("no-change", "no-change checkpoint", 0),
             ("edit-1", "checkpoint after editing 1 file", 1), ("edit-100", "checkpoint after editing 100 files", 100))


class Backup:
    """A backup tool with one repository, snapshotting ``tree``."""

    name = "backup"
    family = "backup"

    def __init__(self, tree: str, repo: str):
        self.tree, self.repo = tree, repo
        self.n = 0

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def close(self) -> None:
        pass

    def disk_bytes(self) -> int:
        return disk_bytes(self.repo)


class Restic(Backup):
    name = "restic"

    def env(self) -> dict[str, str]:
        return {**os.environ, "RESTIC_PASSWORD": "bench", "RESTIC_CACHE_DIR": self.repo + ".cache",
                "RESTIC_PROGRESS_FPS": "0.01"}

    def setup(self) -> None:
        shutil.rmtree(self.repo, ignore_errors=True)
        shutil.rmtree(self.repo + ".cache", ignore_errors=True)
        output(["restic", "init", "--quiet", "--repo", self.repo], env=self.env())

    def checkpoint(self, msg: str) -> tuple[float, int]:
        p = run(["restic", "backup", "--quiet", "--repo", self.repo, "--tag", "bench", "."], cwd=self.tree, env=self.env())
        return p.seconds, p.rss_kib


class Borg(Backup):
    name = "borg"

    def env(self) -> dict[str, str]:
        return {**os.environ, "BORG_PASSPHRASE": "", "BORG_BASE_DIR": self.repo + ".base",
                "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes", "BORG_RELOCATED_REPO_ACCESS_IS_OK": "yes"}

    def setup(self) -> None:
        shutil.rmtree(self.repo, ignore_errors=True)
        shutil.rmtree(self.repo + ".base", ignore_errors=True)
        output(["borg", "init", "--encryption", "none", self.repo], env=self.env())

    def checkpoint(self, msg: str) -> tuple[float, int]:
        self.n += 1
        p = run(["borg", "create", f"{self.repo}::c{self.n}", "."], cwd=self.tree, env=self.env())
        return p.seconds, p.rss_kib


def available(state: str, tree: str) -> tuple[list[Backup], list[str]]:
    """The peers on the PATH, and a note for each one that is not."""
    found: list[Backup] = []
    notes = []
    for cls, exe in ((Restic, "restic"), (Borg, "borg")):
        if shutil.which(exe) is None:
            notes.append(f"no {exe} on the PATH: no {cls.name} rows (make bench installs it with apt-get when root)")
        else:
            found.append(cls(tree, os.path.join(state, cls.name)))
    return found, notes


def run_peers(bench: Any, comps: dict, corpus: str, tree: str, state: str, editor: Any, runs: int) -> None:
    """Add the peer rows: each scenario interleaves snap-svc, git-cli and every peer (each peer's
    repository made fresh for its initial checkpoint)."""
    peers, notes = available(state, tree)
    bench.notes.extend(notes)
    if not peers:
        return
    svc = comps.get("snap-svc")
    git = comps["git-cli"]
    for peer in peers:
        peer.setup()
    initial = {p.name: Series() for p in peers}
    for p in peers:  # a fresh repository each run: the initial checkpoint of a tree they never saw
        for i in range(max(1, runs // 2)):
            if i:
                p.setup()
            seconds, rss = p.checkpoint("initial")
            initial[p.name].add(seconds, rss, p.disk_bytes())
    snap_initial = next((r.snap for r in bench.rows if r.corpus == corpus and r.scenario == "initial" and r.pair == "cli"), None)
    for p in peers:
        if snap_initial is not None:
            bench.add_row(corpus, "initial", "initial checkpoint", f"cli-{p.name}", snap_initial, initial[p.name], p.name)
    for scenario, label, edits in SCENARIOS[1:]:
        contestants: list[Any] = ([svc] if svc is not None else []) + [git, *peers]
        series = {c.name: Series() for c in contestants}
        for i in range(runs):
            if edits:
                editor.edit(edits)
            for c in contestants if i % 2 == 0 else contestants[::-1]:
                seconds, rss = c.checkpoint(f"peers {scenario} {i}")
                series[c.name].add(seconds, rss or 0, None)
        if svc is not None:
            for p in peers:
                bench.add_row(corpus, scenario, label, f"svc-{p.name}", series["snap-svc"], series[p.name], p.name)
    sizes = ", ".join(f"{p.name} {p.disk_bytes() / 2**20:.1f} MiB" for p in peers)
    bench.facts["bytes"].append(f"{corpus} peers' repositories at the end: {sizes}; snap-svc {comps['snap-svc'].disk_bytes() / 2**20:.1f} MiB" if svc else sizes)
    for p in peers:
        p.close()
