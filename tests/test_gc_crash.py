"""gc (with and without --compact) killed with SIGKILL at random moments leaves a valid store.

A template store holds four checkpoints of ~1,200 small files and two multi-chunk files; two
of the checkpoints are deleted, so gc has several thousand chunks to sweep (several batches) and
a file worth compacting.  Each trial copies the store, starts a real process that opens it and
runs gc, and, once the child says gc has begun, kills it after a random delay spread over the
time gc takes; only kills that found the child still running are counted.  Afterwards:
verify is clean, the surviving checkpoints read back byte-exact, and a second gc finishes.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time

import blake3
import pytest
from helpers import subprocess_env

from snapstore.storage import lmdb_generations, objects
from snapstore.store import Store
from snapstore.testing import random_bytes

TRIALS = 14  # per mode (x2)
N_FILES = 1200


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    base = tmp_path_factory.mktemp("gc-template")
    root = base / "tree"
    root.mkdir()
    expected: dict[str, dict[bytes, bytes]] = {}
    with Store.init(root) as store:
        ids = []
        for version in range(4):
            for i in range(N_FILES):
                d = root / f"d{i % 25}"
                d.mkdir(exist_ok=True)
                # A third of the files never change: the packs of the deleted versions then
                # mix live and dead chunks, so gc rewrites packs (format 2) under the kills.
                (d / f"f{i}").write_bytes(random_bytes(64 + i % 200, f"{version if i % 3 else 0}-{i}"))
            (root / "big1").write_bytes(random_bytes(600_000, f"big1-{version}"))
            (root / "big2").write_bytes(random_bytes(400_000, f"big2-{version % 2}"))
            cp = store.snapshot(f"v{version}")
            ids.append(cp.id)
        for cid in ids:
            with store.backend.read() as view:
                expected[cid] = {
                    e.path: blake3.blake3(objects.read_stream(view.get, e.ref)).digest()
                    for e in store.entries(cid)
                    if e.is_file
                }
        store.delete(ids[0])
        store.delete(ids[2])
        store.config_set("gc.repack-below", "0.9")
        store.config_set("gc.consolidate", "off")
        assert store.gc(dry_run=True).packs.packs_rewritten >= 1
        store.config_set("gc.consolidate", "full")
        assert store.gc(dry_run=True).consolidated.packs_rewritten >= 1
    survivors = {ids[1]: expected[ids[1]], ids[3]: expected[ids[3]]}
    return root / ".snapstore", survivors


def copy_store(src, dest_root):
    dest_root.mkdir()
    shutil.copytree(src, dest_root / ".snapstore")
    return dest_root


#: The child: opens the store, says "gc" on stdout right before gc begins, then runs it and
#: prints how long gc itself took.  The parent kills only after reading "gc", so every counted
#: kill landed inside gc, not during interpreter start-up.
_CHILD = r"""
import sys, time
from snapstore.store import Store
store = Store.open(".")
if sys.argv[1] == "repack":
    store.config_set("gc.consolidate", "off")
print("gc", flush=True)
start = time.monotonic()
store.gc(compact=sys.argv[1] == "compact")
print(time.monotonic() - start, flush=True)
"""


def gc_cmd(mode: str) -> list[str]:
    return [sys.executable, "-c", _CHILD, mode]


def check_store(root, survivors) -> None:
    with Store.open(root) as store:
        report = store.verify()
        assert report.ok, [str(p) for p in report.problems[:5]]
        assert {c.id for c in store.checkpoints(include_safety=True)} == set(survivors)
        with store.backend.read() as view:
            for cid, files in survivors.items():
                got = {
                    e.path: blake3.blake3(objects.read_stream(view.get, e.ref)).digest()
                    for e in store.entries(cid)
                    if e.is_file
                }
                assert got == files, cid
        # A later gc finishes the job and leaves only the current generation behind.
        store.gc(compact=True)
        gens = [e for e in os.listdir(store.store_dir) if e.startswith("gen-")]
        assert gens == [lmdb_generations.read_current(store.store_dir)[1]]
        assert store.gc().chunks_removed == 0
        assert store.verify().ok


@pytest.mark.parametrize("mode", ["repack", "consolidate", "compact"])
def test_gc_killed_at_random_moments_leaves_a_valid_store(template, tmp_path, mode):
    """repack: gc with consolidation off (packs rewritten by live fraction); consolidate: the
    default gc (every pack gathered in path order); compact: the default gc then --compact."""
    src, survivors = template
    # How long gc itself takes (to spread the kill times over it; not asserted).
    probe = copy_store(src, tmp_path / "probe")
    done = subprocess.run(gc_cmd(mode), cwd=probe, env=subprocess_env(), capture_output=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == b"gc"
    duration = float(done.stdout.splitlines()[1])
    check_store(probe, survivors)

    rng = random.Random({"repack": 11, "consolidate": 13, "compact": 7}[mode])
    killed = 0
    window = duration * 1.05  # shrinks whenever gc finished first: load makes one probe misleading
    for trial in range(TRIALS):
        root = copy_store(src, tmp_path / f"t{trial}")
        proc = subprocess.Popen(
            gc_cmd(mode), cwd=root, env=subprocess_env(), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"gc\n", proc.stderr.read() if proc.stderr else ""
        # gc has begun: the kill lands somewhere inside it (or just after it ended).
        time.sleep(rng.uniform(0, window))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        # Counted only if gc had not returned (the child prints its duration when it has).
        if proc.returncode == -signal.SIGKILL and not proc.stdout.read().strip():
            killed += 1
        else:
            window *= 0.6
        check_store(root, survivors)
        shutil.rmtree(root)
    # Many kills must land inside gc, or the test checks little.
    assert killed >= TRIALS // 3, killed
