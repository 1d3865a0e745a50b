"""The watcher's state at a million files (issue 40, the 1M-file rows), bounded without timing.

A watching Store (the resident service) keeps the tree's state between checkpoints.  Two bounds
that do not depend on the machine:

* its memory per file (Python allocations, tracemalloc): what it keeps between checkpoints, the
  peak of its first (walking) checkpoint and of the one after (which fills the manifest codec),
  and what the walk holds once it is done (each record packed as it is found, no list of
  every file's record as objects).  The stat cache is read for the paths a checkpoint
  examines, never held whole, and the walk's records and the entries are kept packed
  (tree/packed.py: FoundMap, EntryMap);
* a 1-file checkpoint does no work per file or per directory of the tree: one lstat, no
  listing, no pass over the kept records or the directories' listings.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from helpers import subprocess_env

from snapstore.platform import linux
from snapstore.store import Store
from snapstore.testing import build_tree
from snapstore.tree import packed, rescan, scan

FILES = 30_000
#: Measured (30,000 files in directories of 1,000): kept ~355 B/file, peak of the two
#: checkpoints ~441, the walk's records once it is done ~207 (the entries kept packed,
#: tree.packed.EntryMap, and the ordered entries holding those packed values; the walk packs
#: each record as it finds it; the manifest codec keeps no chunk's bytes and its first fill
#: holds no record or chunk of every entry).  Before the packed entries (main at 6f197b9):
#: kept ~450, peak ~528; before that (main at e1ccf0a): kept ~554, peak ~679, walked ~385;
#: before the packed records and the stat cache read on demand, kept ~962.
KEPT_BYTES_PER_FILE = 400
PEAK_BYTES_PER_FILE = 490
WALKED_BYTES_PER_FILE = 260
#: The portable polling source (SNAPSTORE_PLATFORM=portable, or no inotify) keeps what it
#: compares for every entry between reads: a packed signature and the entry's name (~140 B a
#: file: kept ~701, peak ~827 B/file when written; 853 kept with a tuple signature).
POLLING_BYTES_PER_FILE = 0 if linux() else 150

_CHILD = r"""
import gc, json, os, sys, time, tracemalloc
from snapstore.store import Store
from snapstore.tree import statcache

statcache.now_ns = lambda: time.time_ns() + 10**10  # nothing racy: no file is read again
n, work = int(sys.argv[1]), sys.argv[2]
root, store = os.path.join(work, "t"), os.path.join(work, "store")
for d in range(0, n, 1000):
    os.makedirs(os.path.join(root, f"d{d // 1000:04d}"))
    for i in range(d, min(d + 1000, n)):
        with open(os.path.join(root, f"d{d // 1000:04d}", f"f{i:07d}.txt"), "w") as f:
            f.write(f"file {i}\n")
Store.init(root, store=store).close()
with Store.open(root, store=store) as s:  # the initial checkpoint (not measured)
    s.snapshot("initial")
from snapstore.tree import scan
real_walk, walk_end = scan.walk, []
def walk(*a, **k):  # what the walk's records hold once it is done (before the stat cache pairs them)
    got = real_walk(*a, **k)
    walk_end.append(tracemalloc.get_traced_memory()[0])
    return got
scan.walk = walk
gc.collect()
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
s = Store.open(root, store=store, watch=True)
s.snapshot("the service's first: a walk", skip_unchanged=True)
first_peak = tracemalloc.get_traced_memory()[1]
with open(os.path.join(root, "d0000", "f0000000.txt"), "a") as f:
    f.write("edit\n")
time.sleep(0.05)
s.snapshot("one file")  # (patched: the state and the manifest codec are all there now)
gc.collect()
kept, peak = tracemalloc.get_traced_memory()  # (the peak: of both checkpoints)
tracemalloc.stop()
assert s.watch_status()["patched"] == 1, s.watch_status()
assert len(walk_end) == 1, walk_end
print(json.dumps({"kept": (kept - base) / n, "peak": (peak - base) / n, "first_peak": (first_peak - base) / n, "walked": (walk_end[0] - base) / n}))
s.close()
"""


def test_the_watchers_state_memory_per_file(tmp_path: Path):
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(FILES), str(tmp_path)],
        capture_output=True, env=subprocess_env(), timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    print(f"bytes per file: {got}")
    assert got["kept"] <= KEPT_BYTES_PER_FILE + POLLING_BYTES_PER_FILE, got
    assert got["peak"] <= PEAK_BYTES_PER_FILE + POLLING_BYTES_PER_FILE, got
    assert got["walked"] <= WALKED_BYTES_PER_FILE + POLLING_BYTES_PER_FILE, got


class _CountingOs:
    """``os`` for tree.rescan, counting its lstat calls."""

    def __init__(self) -> None:
        import os

        self._os = os
        self.lstats = 0

    def lstat(self, path: bytes) -> object:
        self.lstats += 1
        return self._os.lstat(path)

    def __getattr__(self, name: str) -> object:
        return getattr(self._os, name)


class _CountingListings(dict):  # type: ignore[type-arg]
    """A state's listings, counting every look at one."""

    looks = 0

    def get(self, key, default=None):  # type: ignore[no-untyped-def, override]
        _CountingListings.looks += 1
        return super().get(key, default)

    def __getitem__(self, key):  # type: ignore[no-untyped-def]
        _CountingListings.looks += 1
        return super().__getitem__(key)

    def __iter__(self):  # type: ignore[no-untyped-def]
        _CountingListings.looks += len(self)
        return super().__iter__()


class _CountingFound(packed.FoundMap):
    """A state's records, counting the passes over all of them."""

    passes = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        _CountingFound.passes += 1
        return super().__iter__()

    def records(self):  # type: ignore[no-untyped-def]
        _CountingFound.passes += 1
        return super().records()

    def inodes(self):  # type: ignore[no-untyped-def]
        _CountingFound.passes += 1
        return super().inodes()


def test_a_one_file_checkpoint_does_nothing_per_file_or_directory(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    build_tree(root, {f"d{d:02d}/f{i:03d}.txt": b"%d %d\n" % (d, i) for d in range(60) for i in range(50)})
    Store.init(root).close()
    with Store.open(root, watch=True) as s:
        s.snapshot("first: a walk")
        state = s.context.tree_state
        assert state is not None
        counted = _CountingFound()
        counted._d = state.found._d  # type: ignore[attr-defined]
        state.found = counted
        state.listings = _CountingListings(state.listings)
        (root / "d07" / "f001.txt").write_bytes(b"warm\n")
        time.sleep(0.05)
        s.snapshot("second: patched, fills the manifest codec")
        assert s.context.tree_state.found is counted  # (the state kept, patched in place)
        fake_os = _CountingOs()
        monkeypatch.setattr(rescan, "os", fake_os)
        listed: list[int] = []
        real = scan._scandir
        monkeypatch.setattr(scan, "_scandir", lambda fd: listed.append(fd) or real(fd))
        (root / "d42" / "f017.txt").write_bytes(b"edited\n")
        time.sleep(0.05)
        _CountingListings.looks = _CountingFound.passes = 0
        cp = s.snapshot("one file")
        assert s.watch_status()["walks"] == 1 and s.watch_status()["patched"] == 2
        assert s.read_bytes(cp.id, "d42/f017.txt") == b"edited\n"
        assert fake_os.lstats == 1  # the edited file, not the 3,000 of the tree
        assert listed == []  # no directory listed again
        assert _CountingFound.passes == 0  # no pass over the kept records
        assert _CountingListings.looks <= 2, _CountingListings.looks  # not one per directory (61)
