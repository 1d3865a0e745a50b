"""Bounded memory: snapshotting a 1 GiB file does not hold it in memory.

The snapshot runs in a fresh process that samples its anonymous RSS (``RssAnon`` in
/proc/self/status: the heap and buffers, not the page cache LMDB maps) and reports its peak;
the peak total RSS (``ru_maxrss``) is printed for information only.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import subprocess_env

from snapstore.testing import random_bytes

GiB = 1 << 30
MiB = 1 << 20
BLOCK = 8 * MiB

#: Peak RSS may grow by about this much while a 1 GiB file is snapshotted (the pipeline's
#: buffers: BATCH_BYTES per commit, QUEUE_ITEMS groups of GROUP_BYTES, the readers' groups).
RSS_BUDGET = 100 * MiB

_CHILD = r"""
import json, os, resource, sys, threading, time
from snapstore.store import Store

def anon_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0

root, size, big = sys.argv[1], int(sys.argv[2]), sys.argv[3]
peak = {"anon": 0}
done = threading.Event()

def sample():
    while not done.is_set():
        peak["anon"] = max(peak["anon"], anon_kib())
        time.sleep(0.005)

with Store.init(root) as store:
    store.snapshot("warm-up: empty tree")  # every import and code path is warm now
    os.rename(big, os.path.join(root, "big.bin"))  # the big file moves in now
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    anon_before = anon_kib()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    cp = store.snapshot("one big file")
    done.set()
    sampler.join()
    peak["anon"] = max(peak["anon"], anon_kib())
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ok = cp.stats["files"] == 1 and cp.stats["bytes"] == size
print(json.dumps({"before_kib": before, "after_kib": after, "anon_before_kib": anon_before,
                  "anon_peak_kib": peak["anon"], "ok": ok, "new_bytes": cp.stats["new_bytes"]}))
"""


@pytest.fixture(scope="module")
def big_snapshot(tmp_path_factory):
    """Snapshot a generated 1 GiB random file in a fresh process; returns its report."""
    tmp = tmp_path_factory.mktemp("rss")
    root = tmp / "tree"
    hidden = tmp / "big.bin"
    root.mkdir()
    with open(hidden, "wb") as f:
        for i in range(GiB // BLOCK):
            f.write(random_bytes(BLOCK, b"rss-%d" % i))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), str(GiB), str(hidden)],
        capture_output=True,
        env=subprocess_env(),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    report = json.loads(proc.stdout)
    report["rss_growth"] = (report["after_kib"] - report["before_kib"]) * 1024
    report["anon_growth"] = (report["anon_peak_kib"] - report["anon_before_kib"]) * 1024
    sys.stderr.write(
        f"\n1 GiB snapshot: peak RSS +{report['rss_growth'] / MiB:.1f} MiB "
        f"({report['before_kib'] / 1024:.1f} -> {report['after_kib'] / 1024:.1f} MiB), "
        f"anonymous RSS +{report['anon_growth'] / MiB:.1f} MiB\n"
    )
    return report


@pytest.mark.slow
def test_1_gib_file_is_stored(big_snapshot):
    assert big_snapshot["ok"]
    assert big_snapshot["new_bytes"] > GiB  # really stored (random data does not compress)


@pytest.mark.slow
def test_1_gib_snapshot_anonymous_memory_is_bounded(big_snapshot):
    """Anonymous memory (heap, buffers: RssAnon, sampled every 5 ms and at the end) stays in
    budget.  File pages of data.mdb mapped by LMDB are page cache, not counted: measuring
    anonymous memory directly replaces subtracting the map's RSS from the peak."""
    assert big_snapshot["anon_growth"] <= RSS_BUDGET, big_snapshot
