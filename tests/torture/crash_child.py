"""Child process of the crash trials: run one operation, optionally killing itself at a seam.

    python crash_child.py OP MODE

OP: snapshot | restore | undo | gc | gc-compact | revert | maintain.  MODE: ``none`` (the parent may kill it on a
timer), ``apply:K:before|after`` (SIGKILL just before / after the K-th LMDB write transaction),
``step:K`` (before restore step K), ``rename:before|after`` (around compaction's rename of CURRENT).
Prints ``go`` when the store is open, then ``done APPLIES SECONDS``.  Small batch sizes push
small inputs through the paths large ones take (many transactions, streamed files).
"""

import os
import sys
import time

from snapstore.ops import gc, maintenance, restore
from snapstore.ops.snapshot import read as snapshot_read
from snapstore.ops.snapshot import write as snapshot_write
from snapstore.storage import lmdb_backend, lmdb_compact
from snapstore.store import Store

CONVERSATION = [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "done"}]


def die() -> None:
    os.kill(os.getpid(), 9)


def main() -> None:
    op, mode = sys.argv[1], sys.argv[2]
    snapshot_write.BATCH_BYTES = 32 << 10
    snapshot_read.WHOLE_READ_MAX = 64 << 10
    snapshot_write.GROUP_BYTES = 64 << 10
    gc.BATCH = 64
    maintenance.STEP_BYTES = 8 << 10  # many steps, each its own transaction under the lock
    store = Store.open(".")
    count = [0]
    real_apply = lmdb_backend.LmdbBackend._apply
    k, when = -1, ""
    if mode.startswith("apply:"):
        _, k_text, when = mode.split(":")
        k = int(k_text)

    def apply(self, batch):
        count[0] += 1
        if count[0] == k and when == "before":
            die()
        real_apply(self, batch)
        if count[0] == k and when == "after":
            die()

    lmdb_backend.LmdbBackend._apply = apply
    if mode.startswith("step:"):
        step = int(mode[5:])

        def hook(i):
            if i == step:
                die()

        restore.step_hook = hook
    if mode.startswith("rename:"):
        real_rename = lmdb_compact.os.rename
        where = mode[7:]

        def rename(src, dst, *args, **kwargs):
            if where == "before":
                die()
            real_rename(src, dst, *args, **kwargs)
            if where == "after":
                die()

        lmdb_compact.os.rename = rename
    print("go", flush=True)
    start = time.perf_counter()
    if op == "snapshot":
        store.snapshot("B", conversation=CONVERSATION, tags=["B"])
    elif op == "restore":
        store.restore("A")
    elif op == "undo":
        store.undo()
    elif op in ("gc", "gc-compact"):
        store.gc(compact=op == "gc-compact")
    elif op == "revert":
        store.revert("B")
    elif op == "repair":
        store.repair()
    elif op == "maintain":  # what the detached process runs: passes until none is due
        if not store.maintain_all():
            raise SystemExit("nothing to maintain")
    else:
        raise SystemExit(f"unknown op {op}")
    print(f"done {count[0]} {time.perf_counter() - start:.6f}", flush=True)


if __name__ == "__main__":
    main()
