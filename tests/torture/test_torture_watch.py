"""Watch vs walk: every checkpoint taken through a watching Store equals the tree as a full walk
finds it, whatever the inotify limits (issue 22, class 1).

Random edit sequences (create, rewrite, append, truncate, same-size rewrites with the mtime set
back, delete, rename files and directories, hard links made in the tree, from a cache outside
it into the tree and from new files out of it, writes through every kind of link, writes through
live shared mappings with msync and no write(), chmod, symlinks, a file swapped for a directory)
run in phases: plain; watch-limit exhaustion (the watching Store is opened with
``fs.inotify.max_user_watches`` just above what this user already holds, so part of the tree is
blind, and stays so for a while, then the limit is restored and the watches retried); queue
overflow (a Store whose inotify instance was made under a tiny ``max_queued_events``, with
bursts of edits; without root, bursts past the default queue).

After each step one checkpoint is taken through the watching Store and compared with the tree
twice: byte for byte with what is on disk now (``read_tree``), and with a full walk by a Store
that does not watch (``diff`` against the checkpoint).  Any difference is a divergence.

Known blind spot, not exercised (docs/reliability.md): a hard link made from outside the tree
to a file the watcher already examined with one link, then written through, gives no event and
no trace on the tree's path until the file is examined again (an event naming it, or the
periodic walk).  Links out of the tree are made here only to files made in the same step.
"""

from __future__ import annotations

import mmap
import os
import random
import shutil
from pathlib import Path

import pytest
from inotify_limits import limited, skip_unless_settable, watches_in_use
from torture_tally import FULL, record, scaled

from snapstore.store import Store
from snapstore.testing import build_tree, diff_trees, read_tree, tree_from_store

pytest.importorskip("inotify_simple")

CATEGORY = "watch vs walk"
#: Seeds (one test each, so xdist spreads them) and steps per seed: 4 x 300 under
#: ``make torture``, one short run in the normal suite.
SEEDS = scaled(1, int(os.environ.get("SNAPSTORE_WATCH_SEEDS", "4")))
STEPS = scaled(60, 300)

PHASES = (("plain", 0.3), ("watch limit", 0.3), ("plain", 0.1), ("overflow", 0.2), ("plain", 0.1))


def _root_can_set(name: str) -> bool:
    try:
        skip_unless_settable(name)
    except pytest.skip.Exception:
        return False
    return True


class Tree:
    """The tree being edited, with what lives outside it (links, a cache) and live mappings."""

    def __init__(self, base: Path, rng: random.Random) -> None:
        self.root, self.outside, self.cache = base / "t", base / "outside", base / "cache"
        self.outside.mkdir()
        self.cache.mkdir()
        build_tree(self.root, {f"d{i}/s{j}/f{k}.txt": b"%d %d %d\n" % (i, j, k)
                               for i in range(4) for j in range(3) for k in range(2)})
        self.rng = rng
        self.maps: list[tuple[int, mmap.mmap]] = []  # (fd, mapping): the fd only for fstat
        self.n = 0

    def files(self) -> list[Path]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d != ".snapstore")
            out += [Path(dirpath) / f for f in sorted(filenames) if not os.path.islink(Path(dirpath) / f)]
        return out

    def dirs(self) -> list[Path]:
        out = [self.root]
        for dirpath, dirnames, _ in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d != ".snapstore")
            out += [Path(dirpath) / d for d in dirnames]
        return out

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def close_maps(self) -> None:
        for fd, m in self.maps:
            m.close()
            os.close(fd)
        self.maps.clear()

    # -- edits: each returns its name ------------------------------------------------------

    def edit(self, burst: bool) -> str:
        ops = [
            "new", "new", "write", "write", "append", "truncate", "same-size", "delete", "rename",
            "mkdir", "rmtree", "rename-dir", "link-in", "write-link", "cache-in", "link-out-new",
            "write-outside", "unlink-outside", "mmap", "mmap", "unmap", "chmod", "symlink", "swap",
        ]
        op = self.rng.choice(ops + ["burst"] * 3 if burst else ops)
        files = self.files()
        if not files and op not in ("new", "mkdir", "cache-in", "link-out-new", "symlink", "burst"):
            op = "new"
        getattr(self, "_" + op.replace("-", "_"))(files)
        return op

    def _new(self, files: list[Path]) -> None:
        (self.rng.choice(self.dirs()) / self.fresh("n")).write_bytes(b"new %d\n" % self.n * self.rng.randint(1, 40))

    def _write(self, files: list[Path]) -> None:
        self.rng.choice(files).write_bytes(b"w%d\n" % self.rng.randint(0, 10**6) * self.rng.randint(1, 60))

    def _append(self, files: list[Path]) -> None:
        with open(self.rng.choice(files), "ab") as f:
            f.write(b"more %d\n" % self.rng.randint(0, 10**6))

    def _truncate(self, files: list[Path]) -> None:
        f = self.rng.choice(files)
        os.truncate(f, self.rng.randint(0, max(0, f.stat().st_size)))

    def _same_size(self, files: list[Path]) -> None:
        f = self.rng.choice(files)
        data, st = f.read_bytes(), f.stat()
        with open(f, "r+b") as out:  # in place: a hard link or a mapping keeps seeing it
            out.write(bytes((b + 1) % 256 for b in data))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))

    def _delete(self, files: list[Path]) -> None:
        self.rng.choice(files).unlink()

    def _rename(self, files: list[Path]) -> None:
        f = self.rng.choice(files)
        target = self.rng.choice(files) if self.rng.random() < 0.3 else self.rng.choice(self.dirs()) / self.fresh("m")
        if target != f:
            f.rename(target)

    def _mkdir(self, files: list[Path]) -> None:
        d = self.rng.choice(self.dirs()) / self.fresh("dir")
        d.mkdir()
        for _ in range(self.rng.randint(0, 2)):
            (d / self.fresh("x")).write_bytes(b"inner\n")
            if self.rng.random() < 0.5:
                d = d / self.fresh("sub")
                d.mkdir()

    def _rmtree(self, files: list[Path]) -> None:
        dirs = self.dirs()[1:]
        if dirs:
            shutil.rmtree(self.rng.choice(dirs))

    def _rename_dir(self, files: list[Path]) -> None:
        dirs = self.dirs()
        src = self.rng.choice(dirs[1:] or [None])
        if src is None:
            return
        parents = [d for d in dirs if d != src and src not in d.parents]
        src.rename(self.rng.choice(parents) / self.fresh("r"))

    def _link_in(self, files: list[Path]) -> None:
        os.link(self.rng.choice(files), self.rng.choice(self.dirs()) / self.fresh("h"))

    def _write_link(self, files: list[Path]) -> None:
        linked = [f for f in files if f.stat().st_nlink > 1] or files
        with open(self.rng.choice(linked), "r+b") as f:  # in place, through this one name
            f.seek(self.rng.randint(0, 20))
            f.write(b"L%d" % self.rng.randint(0, 999))

    def _cache_in(self, files: list[Path]) -> None:
        cached = sorted(self.cache.iterdir())
        if not cached or self.rng.random() < 0.4:
            src = self.cache / self.fresh("c")
            src.write_bytes(b"cached %d\n" % self.n)
        else:
            src = self.rng.choice(cached)
        os.link(src, self.rng.choice(self.dirs()) / self.fresh("from-cache"))

    def _link_out_new(self, files: list[Path]) -> None:
        f = self.rng.choice(self.dirs()) / self.fresh("o")
        f.write_bytes(b"linked out %d\n" % self.n)
        os.link(f, self.outside / self.fresh("out"))

    def _write_outside(self, files: list[Path]) -> None:
        outside = sorted(self.outside.iterdir()) + sorted(self.cache.iterdir())
        if not outside:
            return self._link_out_new(files)
        with open(self.rng.choice(outside), "r+b") as f:
            if self.rng.random() < 0.5:
                f.seek(0, os.SEEK_END)
            f.write(b"O%d\n" % self.rng.randint(0, 999))

    def _unlink_outside(self, files: list[Path]) -> None:
        outside = sorted(self.outside.iterdir())
        if outside:
            self.rng.choice(outside).unlink()

    def _mmap(self, files: list[Path]) -> None:
        if len(self.maps) < 3 and (not self.maps or self.rng.random() < 0.5):
            f = self.rng.choice([f for f in files if f.stat().st_size > 0] or [None])
            if f is None:
                return
            fd = os.open(f, os.O_RDWR)
            self.maps.append((fd, mmap.mmap(fd, os.fstat(fd).st_size)))
        fd, m = self.rng.choice(self.maps)
        size = min(len(m), os.fstat(fd).st_size)  # (a page past the end would be SIGBUS)
        if size:
            at = self.rng.randrange(size)
            data = b"M%d" % self.rng.randint(0, 99)
            m[at : at + len(data[: size - at])] = data[: size - at]
            m.flush()  # msync; no write(): no event until the mapping goes

    def _unmap(self, files: list[Path]) -> None:
        if self.maps:
            fd, m = self.maps.pop(self.rng.randrange(len(self.maps)))
            m.close()
            os.close(fd)

    def _chmod(self, files: list[Path]) -> None:
        f = self.rng.choice(files)
        f.chmod(0o755 if f.stat().st_mode & 0o100 == 0 else 0o644)

    def _symlink(self, files: list[Path]) -> None:
        link = self.rng.choice(self.dirs()) / "link"
        if link.is_symlink():
            link.unlink()
        if not link.exists():
            link.symlink_to(f"target{self.rng.randint(0, 99)}")

    def _swap(self, files: list[Path]) -> None:
        f = self.rng.choice(files)
        f.unlink()
        f.mkdir()
        (f / "x").write_bytes(b"x\n")

    def _burst(self, files: list[Path]) -> None:
        d = self.rng.choice(self.dirs())  # a watched one: ~4 events a file, past a small queue
        made = [d / self.fresh("b") for _ in range(150)]
        for f in made:
            f.write_bytes(b"burst\n")
        for f in made[self.rng.randint(0, 3) :]:
            f.unlink()

class Run:
    """One seed's run: the watching Store of the current phase, the figures, the divergences."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.plain = Store.open(tree.root)
        self.watched: Store | None = None
        self.figures = {"steps": 0, "checkpoints": 0, "divergences": 0, "overflows": 0, "blind_dirs_seen": 0,
                        "checkpoints_with_blind_dirs": 0, "walks": 0, "patched": 0, "links_restatted": 0,
                        "mapped_restatted": 0}  # fmt: skip
        self.problems: list[str] = []

    def reopen(self) -> None:
        """A new watching Store (a new inotify instance, under whatever limits hold now)."""
        self.close_watched()
        self.watched = Store.open(self.tree.root, watch=True)

    def close_watched(self) -> None:
        if self.watched is not None:
            status = self.watched.watch_status() or {}
            for key in ("overflows", "walks", "patched", "links_restatted", "mapped_restatted"):
                self.figures[key] += int(status.get(key, 0))
            self.watched.close()
            self.watched = None

    def step(self, label: str, burst: bool) -> None:
        assert self.watched is not None
        ops = [self.tree.edit(burst) for _ in range(self.tree.rng.randint(1, 3))]
        cp = self.watched.snapshot(f"{label}: {' '.join(ops)}")
        self.figures["steps"] += 1
        self.figures["checkpoints"] += 1
        status = self.watched.watch_status() or {}
        if status.get("blind_dirs"):
            self.figures["blind_dirs_seen"] += int(status["blind_dirs"])
            self.figures["checkpoints_with_blind_dirs"] += 1
        on_disk, walked = self.differences(cp.id)
        if on_disk or walked:
            self.figures["divergences"] += 1
            self.problems.append(f"step {self.figures['steps']} ({label}: {ops}): {on_disk[:3]} {walked[:3]}")


    def close(self) -> None:
        self.close_watched()
        self.plain.close()
        self.tree.close_maps()

    def report(self, category: str, label: str) -> dict[str, int]:
        """Record the figures, print them, and fail on any divergence."""
        f = self.figures
        record(category, f["checkpoints"], f["divergences"], **{k: v for k, v in f.items() if k != "checkpoints"})
        print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in f.items()))
        assert not self.problems, "\n".join(self.problems[:10])
        if FULL:
            assert f["checkpoints"] >= STEPS
        return f

    def differences(self, cp_id: str) -> tuple[list[str], list[tuple[str, bytes]]]:
        """How checkpoint ``cp_id`` differs from the tree on disk, and from a full walk."""
        assert self.watched is not None
        on_disk = diff_trees(read_tree(self.tree.root), tree_from_store(self.watched, cp_id))
        return on_disk, [(c.status, c.path) for c in self.plain.diff(cp_id)]


def _phase(run: Run, name: str, steps: int) -> None:
    """``steps`` steps under phase ``name`` (see PHASES)."""
    if name == "watch limit" and _root_can_set("max_user_watches"):
        inside = max(1, steps // 2)
        run.close_watched()  # (its watches would be counted as someone else's)
        # Room for a few watches only: most of the tree is blind from the start, new directories too.
        margin = run.tree.rng.randint(2, 8)  # (drawn here: the seed's sequence stays as it was)
        with limited("max_user_watches", lambda: watches_in_use() + margin):
            run.reopen()
            for _ in range(inside):
                run.step(name, burst=False)
        for _ in range(steps - inside):  # the limit is back: watches are retried and added
            run.step(name + " (restored)", burst=False)
        return
    if name == "overflow" and _root_can_set("max_queued_events"):
        with limited("max_queued_events", 64):  # read when the inotify instance is made
            run.reopen()
    elif name == "overflow" or run.watched is None:
        run.reopen()  # (a burst past the default queue, 16384 events, overflows it)
    for _ in range(steps):
        run.step(name, burst=name == "overflow")


@pytest.mark.parametrize("seed", range(SEEDS))
def test_watched_checkpoints_equal_full_walks(tmp_path: Path, seed: int):
    tree = Tree(tmp_path, random.Random(seed))
    Store.init(tree.root).close()
    run = Run(tree)
    try:
        for name, share in PHASES:
            _phase(run, name, max(1, round(STEPS * share)))
    finally:
        run.close()
    run.report(CATEGORY, f"watch vs walk, seed {seed}")
