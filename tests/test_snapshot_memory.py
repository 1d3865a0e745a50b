"""What an initial checkpoint holds while it runs: machine-independent bounds (issue 11, req. 9).

The snapshot pipeline must hold, per file, only what the manifest needs (the entry) plus the
walk's record of files not yet read; everything else is bounded by the pipeline's sizes.  The
peak is measured with tracemalloc (Python allocations: the same on every machine) on a
generated tree, with the pipeline's group and batch sizes made small so that the bytes in
flight are negligible next to what is held per file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from helpers import subprocess_env
from platform_marks import needs_inotify

from snapstore.ops import snapshot
from snapstore.ops.snapshot import read as snapshot_read
from snapstore.ops.snapshot import write as snapshot_write
from snapstore.store import Store

FILES = 4000
#: Measured 660-690 B/file when written (the walk's records of the files not yet read, the
#: entries, the manifest being encoded).  Before: ~1,570 B/file: every walk record, every
#: chunk id claimed, every stat-cache value and every entry's manifest encoding were held to
#: the end, and each file read allocated a 1 MiB buffer to find its end.
INITIAL_PEAK_BYTES_PER_FILE = 900

_CHILD = r"""
import json, os, sys, tracemalloc, shutil
from snapstore.ops.snapshot import write as snapshot_write
from snapstore.store import Store

# Bytes in flight (groups, writer batches) small next to FILES x what a file needs.
snapshot_write.GROUP_BYTES = snapshot_write.BATCH_BYTES = 64 << 10
n, work = int(sys.argv[1]), sys.argv[2]
root = os.path.join(work, "t")
for i in range(n):
    p = os.path.join(root, f"dir{i % 40:02d}", f"sub{i % 7}", f"module_{i:06d}.py")
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(f"# file {i}\n" + f"print({i})\n" * (i % 50))

def initial(store):
    Store.init(root, store=store).close()
    with Store.open(root, store=store) as s:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        cp = s.snapshot("initial")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert cp.stats["files"] == n and cp.stats["files_read"] == n
    return (peak - base) / n

initial(os.path.join(work, "warm"))  # imports and every code path are warm from here on
print(json.dumps({"initial": initial(os.path.join(work, "store"))}))
"""


def test_initial_checkpoint_peak_per_file(tmp_path):
    r = subprocess.run(
        [sys.executable, "-c", _CHILD, str(FILES), str(tmp_path)],
        capture_output=True,
        env=subprocess_env(),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    print(f"initial checkpoint, peak bytes per file: {got}")
    assert got["initial"] <= INITIAL_PEAK_BYTES_PER_FILE, got


def _tree(root: Path, n: int) -> None:
    for i in range(n):
        p = root / f"d{i % 5}" / f"f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"file {i}\n".encode() * (i % 9 + 1))


def test_checkpoint_transaction_holds_no_stat_cache_entries(tmp_path, monkeypatch):
    """The stat-cache entries of the files read reach the store through the writer while the
    files are read, not all at once in the checkpoint's transaction (a value and a dirty LMDB
    page share per file, held to the end)."""
    root = tmp_path / "t"
    _tree(root, 300)
    store = Store.init(root)
    backend = store.context.backend
    real = type(backend).write
    batches: list[tuple[int, bool]] = []  # (stat-cache puts, holds the checkpoint record)

    def write(self):
        cm = real(self)

        class Spy:
            def __enter__(self):
                self.batch = cm.__enter__()
                return self.batch

            def __exit__(self, *exc):
                tables = {t for t, _, _, _ in self.batch.operations()}
                puts = sum(t == "statcache" and v is not None for t, _, v, _ in self.batch.operations())
                batches.append((puts, "checkpoints" in tables))
                return cm.__exit__(*exc)

        return Spy()

    monkeypatch.setattr(type(backend), "write", write)
    store.snapshot("initial")
    monkeypatch.undo()
    final = [puts for puts, checkpoint in batches if checkpoint]
    assert final == [0], batches
    assert sum(puts for puts, _ in batches) == 300
    with backend.read() as view:
        assert view.count("statcache") == 300
    store.close()


def test_dedup_holds_only_chunk_ids_in_flight(tmp_path, monkeypatch):
    """Once the writer has committed a chunk (or the store had it), its claim is released: the
    set of claimed ids does not grow with the tree."""
    root = tmp_path / "t"
    _tree(root, 400)
    (root / "copy").mkdir()
    for i in range(50):  # chunks the store will already have when these are read
        (root / "copy" / f"f{i}.txt").write_bytes(f"file {i}\n".encode() * (i % 9 + 1))
    made: list[snapshot_write.Dedup] = []
    real_init = snapshot_write.Dedup.__init__

    def init(self, backend):
        real_init(self, backend)
        made.append(self)

    monkeypatch.setattr(snapshot_write.Dedup, "__init__", init)
    monkeypatch.setattr(snapshot_write, "BATCH_BYTES", 1)  # one commit per group
    store = Store.init(root)
    cp = store.snapshot("initial")
    assert cp.stats["files_read"] == 450
    assert len(made) == 1 and not made[0]._claimed
    store.close()


def test_stat_cache_entry_never_precedes_the_chunks_of_its_stream(tmp_path, monkeypatch):
    """A file whose only chunk another batch has claimed (and not yet queued) must not have its
    stat-cache entry queued first: a crash in between would leave an entry naming a stream the
    store lacks, and the next snapshot would trust it.  Made deterministic: the batch that
    claims the chunk waits until the main thread has handled the other batch."""
    root = tmp_path / "t"
    root.mkdir()
    same = b"the same content in two files\n" * 40
    (root / "a.txt").write_bytes(same)
    (root / "b.txt").write_bytes(same)
    monkeypatch.setattr(snapshot_write, "BATCH_FILES", 1)  # one file per batch: two batches
    monkeypatch.setattr(snapshot_read, "INLINE_FILES", 0)  # through the pool (inline has no batches)
    store = Store.init(root)
    queued: list[tuple[bool, list[tuple[str, bytes, bytes]]]] = []  # in the writer's order

    def logged(replace: bool):
        def put(self, ops):
            queued.append((replace, ops))
            self.queue.put((ops, replace))

        return put

    monkeypatch.setattr(snapshot_write.Writer, "put_new", logged(False))
    monkeypatch.setattr(snapshot_write.Writer, "put", logged(True))
    handled = threading.Event()  # the main thread has handled the first batch to finish
    real_release = snapshot_read._release

    def release(held, consumed, writer):
        out = real_release(held, consumed, writer)
        handled.set()
        return out

    monkeypatch.setattr(snapshot_read, "_release", release)
    claimer: list[str] = []
    real_new_ids = snapshot_write.Dedup.new_ids

    def new_ids(self, ids):
        new = real_new_ids(self, ids)
        if new and not claimer:
            claimer.append(threading.current_thread().name)
            assert handled.wait(60), "the other batch was never handled"
        return new

    monkeypatch.setattr(snapshot_write.Dedup, "new_ids", new_ids)
    _, _, result = snapshot.take(store.context, message="two", workers=2)
    assert result.files_read == 2 and claimer
    chunk_at = next(i for i, (_, ops) in enumerate(queued) if any(t == "chunks" for t, _, _ in ops))
    cache_at = [i for i, (_, ops) in enumerate(queued) for t, _, _ in ops if t == "statcache"]
    assert len(cache_at) == 2 and min(cache_at) > chunk_at, queued
    store.close()


#: Python bytes a watching Store keeps per file after its walk and a few 1-file checkpoints (the
#: resident service's state: walk records, entries, stat cache, ordered chunks, manifest codec).
#: Measured 1,143 at 5,000 files (1,256 before the codec stopped keeping a record per entry and
#: the order was kept in copy-on-write chunks); docs/benchmarks-million.md has the parts.
KEPT_BYTES_PER_FILE = 1_200

_KEPT = r"""
import gc, json, os, sys, time, tracemalloc
from snapstore.store import Store
n, root = int(sys.argv[1]), sys.argv[2]
for i in range(n):
    p = os.path.join(root, f"d{i // 500:03d}", f"f{i:06d}.txt")
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(f"file {i}\n")
Store.init(root).close()
with Store.open(root) as s:
    s.snapshot("initial")
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
store = Store.open(root, watch=True)
store.snapshot("walk", skip_unchanged=True)
for k in range(3):
    with open(os.path.join(root, "d001", f"f{500 + k:06d}.txt"), "a") as f:
        f.write("edit\n")
    time.sleep(0.05)
    store.snapshot(f"edit {k}")
gc.collect()
print(json.dumps({"kept": (tracemalloc.get_traced_memory()[0] - base) / n}))
"""


@needs_inotify  # (the bound is the inotify watcher's state; the polling source keeps a stat per entry more)
def test_a_watching_stores_kept_state_per_file(tmp_path):
    """The 1M-file rows' memory (issue 40): what a watching Store keeps between checkpoints,
    per file, in Python allocations (machine-independent: tracemalloc, not RSS)."""
    r = subprocess.run([sys.executable, "-c", _KEPT, "5000", str(tmp_path / "t")], capture_output=True, env=subprocess_env(), timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    print(f"kept bytes per file: {got}")
    assert got["kept"] <= KEPT_BYTES_PER_FILE, got
