"""Memory per file of a snapshot: a machine-independent bound (Python allocations, tracemalloc).

A fresh process builds a tree of a few thousand small files, takes a first snapshot, then
measures the peak of Python allocations during (a) a no-change snapshot by a fresh Store (what
every CLI checkpoint does) and (b) the initial snapshot of a new store.  The peak divided by the
number of files is what a snapshot holds per file: the walk's records, the entries, the stat
cache comparison, the manifest.  At a million files every 100 bytes here are 100 MB.
"""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import subprocess_env

FILES = 4000
#: Measured ~800 B/file (no change) and ~2,000 B/file (initial, mostly the read pipeline's
#: results) when written; before the compact walk records, the cursor merge with the stat cache
#: and the manifest fingerprint the no-change figure was ~1,500 B/file.  Since the walk records
#: of files read are freed batch by batch and the stat cache goes out through the writer
#: (tests/test_snapshot_memory.py): ~580 (no change) and ~860 B/file (initial; 1,370 before).
NO_CHANGE_BYTES_PER_FILE = 900
INITIAL_BYTES_PER_FILE = 1300

_CHILD = r"""
import json, os, sys, time, tracemalloc, shutil
from snapstore.store import Store
from snapstore.tree import statcache

# Every read is recorded as long after the files were written: nothing is racy, so the
# no-change snapshot reads no file (the seam tests use for the racy rule).
statcache.now_ns = lambda: time.time_ns() + 10**10
n, work = int(sys.argv[1]), sys.argv[2]
root, store = os.path.join(work, "t"), os.path.join(work, "store")
for i in range(n):
    p = os.path.join(root, f"dir{i % 40:02d}", f"sub{i % 7}", f"module_{i:06d}.py")
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(f"# file {i}\nprint({i})\n")

def peak_per_file(fn):
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (peak - base) / n

def snapshot(message):
    with Store.open(root, store=store) as s:
        cp = s.snapshot(message)
        assert cp.stats["files"] == n
        return cp

Store.init(root, store=store).close()
snapshot("first")  # imports and every code path are warm from here on
no_change = peak_per_file(lambda: snapshot("no change"))
with Store.open(root, store=store) as s:
    assert s.resolve("latest").stats["files_read"] == 0
shutil.rmtree(store)
Store.init(root, store=store).close()
initial = peak_per_file(lambda: snapshot("initial"))
print(json.dumps({"no_change": no_change, "initial": initial}))
"""


def test_snapshot_memory_per_file(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(FILES), str(tmp_path)],
        capture_output=True,
        env=subprocess_env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    print(f"bytes per file: {got}")
    assert got["no_change"] <= NO_CHANGE_BYTES_PER_FILE, got
    assert got["initial"] <= INITIAL_BYTES_PER_FILE, got
