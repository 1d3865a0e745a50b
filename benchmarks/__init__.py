"""Benchmark harness (issue 5): snapstore against shadow git (CLI) and libgit2 (pygit2).

Run ``python -m benchmarks.run --quick`` (about two minutes) or ``make bench`` (the full set,
which rewrites docs/benchmarks.md).  See docs/benchmarks.md for the method.
"""

import os

# The timed rows measure checkpoints, not the detached maintenance pass a snapshot may start
# (maintenance.detach): on 2 cores it would run beside the next rows, ours and git's.  Its
# effect on size is reported by benchmarks.storage_v3 ("idle pass"), its time there too.
os.environ.setdefault("SNAPSTORE_MAINTENANCE_DETACH", "0")
# Likewise the service a plain CLI snapshot starts (service.autostart): the contestants say
# whether they run with a service (snap-svc, snap-auto) or without one (snap-cli).
os.environ.setdefault("SNAPSTORE_AUTOSTART", "0")
