"""Corpora built at run time from this machine's Python standard library, and seeded edits.

- ``stdlib``: a copy of the standard library directory (``sysconfig``'s ``stdlib``) without
  ``site-packages``: ~7,700 files, ~250 MB, with ``__pycache__`` and the static libpython.
- ``stdlib-x10``: ten copies side by side (identical content: dedup matters).
- ``stdlib-x10u``: ten copies, each file made unique by an appended line (no dedup possible).
- ``bigfile``: the stdlib tree plus one 200 MB file of seeded random bytes.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sysconfig

BIGFILE_NAME = "bench-bigfile.bin"
BIGFILE_SIZE = 200 << 20


def stdlib_dir() -> str:
    return sysconfig.get_paths()["stdlib"]


def _ignore_site_packages(src: str, names: list[str]) -> list[str]:
    return ["site-packages"] if os.path.realpath(src) == os.path.realpath(stdlib_dir()) else []


def build_stdlib(dst: str) -> None:
    shutil.copytree(stdlib_dir(), dst, symlinks=True, ignore=_ignore_site_packages)


def build_x10(src: str, dst: str, unique: bool) -> None:
    """Ten copies of ``src`` in ``dst/copy0..copy9``; with ``unique`` every file gets its own line."""
    os.makedirs(dst)
    for k in range(10):
        target = os.path.join(dst, f"copy{k}")
        if not unique:
            shutil.copytree(src, target, symlinks=True)
            continue
        for dirpath, dirs, files in os.walk(src):
            rel = os.path.relpath(dirpath, src)
            out_dir = os.path.normpath(os.path.join(target, rel))
            os.makedirs(out_dir, exist_ok=True)
            for name in files:
                s = os.path.join(dirpath, name)
                d = os.path.join(out_dir, name)
                if os.path.islink(s):
                    os.symlink(os.readlink(s), d)
                    continue
                with open(s, "rb") as fin, open(d, "wb") as f:
                    shutil.copyfileobj(fin, f, 1 << 20)
                    f.write(f"\n# unique copy {k} of {rel}/{name}\n".encode())
                shutil.copymode(s, d)
            dirs.sort()


def tree_stats(root: str) -> tuple[int, int]:
    """(files, bytes) below ``root``."""
    n = size = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                n += 1
                size += os.lstat(p).st_size
    return n, size


def warm(root: str) -> None:
    """Read every file once so all competitors start with a warm page cache."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.islink(p):
                continue
            try:
                with open(p, "rb") as f:
                    while f.read(1 << 20):
                        pass
            except OSError:
                pass


class Editor:
    """Seeded edits of a tree: every edit picks files not edited before (fresh choices)."""

    def __init__(self, root: str, seed: int):
        self.root = root
        self.rng = random.Random(seed)
        self.counter = 0
        pool = []
        for dirpath, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".py") and "__pycache__" not in dirpath:
                    p = os.path.join(dirpath, name)
                    if not os.path.islink(p) and os.path.getsize(p) > 0:
                        pool.append(os.path.relpath(p, root))
        self.rng.shuffle(pool)
        self.pool = pool
        self.created: list[str] = []

    def _take(self) -> str:
        if not self.pool:
            raise RuntimeError("the corpus ran out of files to edit")
        return self.pool.pop()

    def edit(self, n: int) -> dict[str, bytes]:
        """Insert one line at a random place in ``n`` fresh files; returns their old contents."""
        old = {}
        for _ in range(n):
            rel = self._take()
            p = os.path.join(self.root, rel)
            with open(p, "rb") as f:
                data = f.read()
            old[rel] = data
            lines = data.splitlines(keepends=True)
            self.counter += 1
            at = self.rng.randrange(len(lines) + 1)
            lines.insert(at, f"# bench edit {self.counter}\n".encode())
            with open(p, "wb") as f:
                f.write(b"".join(lines))
            self.pool.insert(0, rel)  # may be edited again, much later
        return old

    def new_files(self, n: int) -> list[str]:
        made = []
        for _ in range(n):
            self.counter += 1
            src = os.path.join(self.root, self.rng.choice(self.pool))
            rel = os.path.join(os.path.dirname(os.path.relpath(src, self.root)), f"bench_new_{self.counter}.py")
            with open(src, "rb") as f:
                body = f.read()
            start = self.rng.randrange(max(1, len(body) // 2))
            text = f"# new file {self.counter}\n".encode() + body[start : start + self.rng.randrange(1000, 20000)]
            with open(os.path.join(self.root, rel), "wb") as f:
                f.write(text)
            made.append(rel)
            self.created.append(rel)
        return made

    def delete(self, n: int) -> list[str]:
        gone = []
        for _ in range(n):
            rel = self._take()
            os.unlink(os.path.join(self.root, rel))
            gone.append(rel)
        return gone

    def bulk(self) -> int:
        """A formatter-like change over one package: quotes normalised, a trailer appended."""
        dirs: dict[str, list[str]] = {}
        for rel in self.pool:
            dirs.setdefault(os.path.dirname(rel), []).append(rel)
        choices = sorted(d for d, fs in dirs.items() if 30 <= len(fs) <= 400)
        target = self.rng.choice(choices) if choices else max(dirs, key=lambda d: len(dirs[d]))
        self.counter += 1
        for rel in dirs[target]:
            p = os.path.join(self.root, rel)
            with open(p, "rb") as f:
                data = f.read()
            data = data.replace(b"'", b'"') + f"# formatted {self.counter}\n".encode()
            with open(p, "wb") as f:
                f.write(data)
        return len(dirs[target])

    def write_bigfile(self) -> str:
        rel = BIGFILE_NAME
        gen = random.Random(self.rng.random())
        with open(os.path.join(self.root, rel), "wb") as f:
            for _ in range(BIGFILE_SIZE >> 20):  # in 1 MiB blocks: keep this process small
                f.write(gen.randbytes(1 << 20))
        return rel

    def flip_bigfile_byte(self) -> int:
        """Change one byte near the middle of the big file (a fresh offset each time)."""
        p = os.path.join(self.root, BIGFILE_NAME)
        offset = BIGFILE_SIZE // 2 + self.rng.randrange(-(1 << 20), 1 << 20)
        fd = os.open(p, os.O_RDWR)
        try:
            b = os.pread(fd, 1, offset)
            os.pwrite(fd, bytes([b[0] ^ 0xFF]), offset)
        finally:
            os.close(fd)
        return offset


def fresh_stdlib(work: str) -> str:
    """Empty the directory ``work`` and build the stdlib corpus in it; returns the tree's path."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tree = os.path.join(work, "stdlib")
    build_stdlib(tree)
    return tree


def interleaved_args(p: argparse.ArgumentParser, workdir: str) -> None:
    """The options of the interleaved before/after benchmarks (restore_profile, watch_bench)."""
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--snapstore-at", action="append", default=[], metavar="REV")
    p.add_argument("--workdir", default=workdir)
    p.add_argument("--seed", type=int, default=5)
