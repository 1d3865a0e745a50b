"""Store generations: a long-lived Store in another process follows every compaction.

An agent keeps its Store open for hours while other processes run ``gc --compact``.  Its reads
must never be stale: after a compaction renamed CURRENT and a writer committed to the new
generation, the long-lived reader sees that commit.  Compactions are also SIGKILLed at random
moments under the reader; the store stays whole and old generations are deleted once nobody has
them open.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from helpers import subprocess_env

from snapstore.storage import lmdb_generations
from snapstore.store import Store
from snapstore.testing import random_bytes

#: The long-lived reader: for each expected (checkpoint id, file bytes' length) on stdin, it
#: reads the latest checkpoint and that file, and answers "ok" or what it saw instead.
_READER = r"""
import sys
from snapstore.store import Store
store = Store.open(sys.argv[1])
print("ready", flush=True)
for line in sys.stdin:
    want, size = line.split()
    latest = store.checkpoints()[0].id
    got = len(store.read_bytes("latest", "f")) if latest == want else -1
    print("ok" if latest == want and got == int(size) else f"stale {latest} {got}", flush=True)
"""

#: The compactor: SIGKILLs itself just before its K-th file-system step of the compaction
#: (fsync, rename, unlink, mkdir), so every kill lands at a distinct point of the protocol.
_COMPACTOR = r"""
import os, sys
from snapstore.store import Store
store = Store.open(sys.argv[1])
k, count = int(sys.argv[2]), [0]
def seam(real):
    def step(*args, **kwargs):
        count[0] += 1
        if count[0] == k:
            os.kill(os.getpid(), 9)
        return real(*args, **kwargs)
    return step
store.gc()
for name in ("fsync", "rename", "unlink", "mkdir"):
    setattr(os, name, seam(getattr(os, name)))
store.gc(compact=True)
print(count[0], flush=True)
"""


def _gens(store_dir) -> list[str]:
    return sorted(e for e in os.listdir(store_dir) if e.startswith("gen-"))


def _ask(reader: subprocess.Popen, cid: str, size: int) -> str:
    assert reader.stdin is not None and reader.stdout is not None
    reader.stdin.write(f"{cid} {size}\n".encode())
    reader.stdin.flush()
    return reader.stdout.readline().decode().strip()


def test_a_long_lived_reader_never_reads_stale_data_across_compactions(tree):
    with Store.init(tree) as store:
        for i in range(3):
            (tree / "f").write_bytes(random_bytes(200_000, i))
            store.snapshot(f"s{i}")
        reader = subprocess.Popen(
            [sys.executable, "-c", _READER, str(tree)], env=subprocess_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        try:
            assert reader.stdout is not None and reader.stdout.readline() == b"ready\n"
            assert _ask(reader, store.checkpoints()[0].id, 200_000) == "ok"
            for i in range(4):
                store.prune(keep_last=1)
                if i % 2:
                    store.gc(compact=True)  # this process compacts
                else:
                    done = subprocess.run(
                        [sys.executable, "-m", "snapstore", "gc", "--compact"], cwd=tree,
                        env=subprocess_env(), capture_output=True,
                    )
                    assert done.returncode == 0, done.stderr
                size = 1000 * (i + 1)
                (tree / "f").write_bytes(random_bytes(size, 100 + i))
                cp = store.snapshot(f"after compaction {i}")  # written to the new generation
                assert _ask(reader, cp.id, size) == "ok", i
        finally:
            assert reader.stdin is not None
            reader.stdin.close()
            reader.wait(timeout=60)
        assert reader.returncode == 0
        # The reader is gone: the next writer deletes every generation but the current one.
        store.snapshot("last")
        store_dir = store.store_dir
        current = lmdb_generations.read_current(store_dir)[1]
        assert _gens(store_dir) == [current]
        assert not os.path.exists(os.path.join(store_dir, "data.mdb"))  # generation 0 is gone
        assert store.verify().ok


def test_compactions_killed_at_random_moments_under_a_long_lived_reader(tree):
    with Store.init(tree) as store:
        reader = subprocess.Popen(
            [sys.executable, "-c", _READER, str(tree)], env=subprocess_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        killed = 0
        try:
            assert reader.stdout is not None and reader.stdout.readline() == b"ready\n"
            for trial in range(1, 12):
                for j in range(3):
                    (tree / "f").write_bytes(random_bytes(150_000, f"{trial}-{j}"))
                    store.snapshot(f"t{trial}-{j}")
                store.prune(keep_last=2)
                proc = subprocess.run(
                    [sys.executable, "-c", _COMPACTOR, str(tree), str(trial)],
                    env=subprocess_env(), capture_output=True, timeout=120,
                )
                if proc.returncode == -signal.SIGKILL:
                    killed += 1
                else:
                    assert proc.returncode == 0, proc.stderr
                size = 500 + trial
                (tree / "f").write_bytes(random_bytes(size, f"after-{trial}"))
                cp = store.snapshot(f"after {trial}")
                assert _ask(reader, cp.id, size) == "ok", trial
                assert store.verify().ok
        finally:
            assert reader.stdin is not None
            reader.stdin.close()
            reader.wait(timeout=60)
        assert reader.returncode == 0
        assert killed >= 6, killed  # the compaction has at least 6 steps to die before
        store.gc(compact=True)
        assert store.verify().ok
        assert _gens(store.store_dir) == [lmdb_generations.read_current(store.store_dir)[1]]


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("gen-1", 1),
        ("gen-42", 42),
        ("gen-123456789", 123456789),
        ("gen-0", None),  # generations start at 1
        ("gen-01", None),  # no leading zero: one name per number
        ("gen-1234567890", None),  # at most 9 digits
        ("gen-", None),
        ("gen-1\n", None),
        ("gen-1.tmp", None),
        ("xgen-1", None),
        ("GEN-1", None),
        ("gen-\u0661", None),  # a non-ASCII digit
        ("gen-+1", None),
    ],
)
def test_generation_names_are_parsed_strictly(name: str, number: int | None) -> None:
    assert lmdb_generations._gen_number(name) == number
