"""Format 1 -> 2: a format-1 store works as before, `upgrade` converts it, crash-safely."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from snapstore.errors import CorruptError
from snapstore.storage import entries, packs
from snapstore.store import FORMAT_VERSION, Store
from snapstore.testing import build_tree, random_bytes, tree_from_store
from tests.helpers import run_snapstore, subprocess_env
from tests.test_packs import text


def make_v1_store(tree, steps: int = 3) -> tuple[Store, list[tuple[str, dict]]]:
    """A store whose meta says format 1, so every snapshot writes format-1 values."""
    store = Store.init(tree)
    with store.backend.write() as batch:
        batch.put("meta", b"format", b"1")
    history = []
    for step in range(steps):
        build_tree(
            tree,
            {
                **{f"src/m{i}.py": text(6_000 + i * 11, step * 100 + i) for i in range(40)},
                "bin/blob": random_bytes(150_000, step),
                "empty": b"",
            },
        )
        cp = store.snapshot(f"v{step}", conversation=[{"role": "user", "content": f"step {i}"} for i in range(step + 2)])
        history.append((cp.id, tree_from_store(store, cp.id)))
    return store, history


def kinds(store: Store) -> tuple[int, int]:
    """(format-1 values, format-2 entries) in the chunks table."""
    with store.backend.read() as view:
        values = [v for _, v in view.items("chunks")]
    packed = sum(1 for v in values if entries.is_entry(v))
    return len(values) - packed, packed


def test_a_format_1_store_reads_and_writes_format_1_until_upgraded(tree):
    store, history = make_v1_store(tree)
    with store:
        assert store.format_version == 1
        assert kinds(store)[1] == 0  # nothing packed
        with store.backend.read() as view:
            assert view.count("packs") == 0
        report = store.upgrade()
        assert (report.format_before, report.format_after) == (1, FORMAT_VERSION)
        assert report.chunks == kinds(store)[1] and kinds(store)[0] == 0
        assert store.format_version == FORMAT_VERSION
        for ref, spec in history:
            assert tree_from_store(store, ref) == spec
        assert store.verify().ok
        assert store.conversation(history[-1][0]) == [{"role": "user", "content": f"step {i}"} for i in range(4)]
        assert report.size_after < report.size_before
        assert store.upgrade().already


def test_the_cli_notes_a_format_1_store_and_upgrade_converts_it(tree):
    store, _ = make_v1_store(tree, steps=1)
    store.close()
    listed = run_snapstore("list", cwd=tree)
    assert listed.returncode == 0
    assert b"storage format 1" in listed.stderr and b"snapstore upgrade" in listed.stderr
    snap = run_snapstore("snapshot", "-q", "-m", "still works", cwd=tree, script=True)  # click-free path
    assert snap.returncode == 0 and b"storage format 1" in snap.stderr
    done = run_snapstore("upgrade", cwd=tree)
    assert done.returncode == 0, done.stderr
    assert b"from format 1 to 3" in done.stdout and done.stderr == b""
    assert run_snapstore("list", cwd=tree).stderr == b""
    again = run_snapstore("upgrade", cwd=tree)
    assert b"already in format 3" in again.stdout


def test_a_damaged_format_1_chunk_is_left_for_verify_and_the_rest_is_upgraded(tree):
    store, history = make_v1_store(tree, steps=1)
    with store:
        with store.backend.read() as view:
            cid, value = next(iter(view.items("chunks")))
        with store.backend.write() as batch:
            batch.put("chunks", cid, value[:1] + bytes(len(value) - 1))
        report = store.upgrade()
        assert kinds(store) == (1, report.chunks)
        problems = store.verify().problems
        assert problems and all(cid.hex() in p.id or cid.hex() in p.message for p in problems)


_CHILD = r"""
import sys
from snapstore.ops import upgrade
from snapstore.store import FORMAT_VERSION, Store
upgrade.STEP_BYTES = 64 * 1024  # many small steps, so a kill lands between and inside them
with Store.open(sys.argv[1]) as store:
    def progress(done, total):
        sys.stdout.write("step\n")
        sys.stdout.flush()
    store.upgrade(progress=progress)
sys.stdout.write("done\n")
"""


@pytest.mark.parametrize("kill_after", [1, 3, 6])
def test_upgrade_killed_at_any_step_leaves_a_working_store_and_resumes(tree, kill_after):
    store, history = make_v1_store(tree)
    store.close()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(tree)], stdout=subprocess.PIPE, env=subprocess_env()
    )
    assert child.stdout is not None
    seen = 0
    for line in child.stdout:
        seen += line == b"step\n"
        if seen >= kill_after:
            time.sleep(kill_after * 0.003)  # sometimes between steps, sometimes inside one
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with Store.open(tree) as store:
        unpacked, packed = kinds(store)
        assert unpacked and packed and store.format_version == 1  # killed half way
        for ref, spec in history:
            assert tree_from_store(store, ref) == spec
        assert store.verify().ok
        store.upgrade()
        assert kinds(store)[0] == 0 and store.format_version == FORMAT_VERSION
        for ref, spec in history:
            assert tree_from_store(store, ref) == spec
        assert store.verify().ok


def test_a_pack_that_does_not_read_back_stops_upgrade_before_anything_is_replaced(tree, monkeypatch):
    store, history = make_v1_store(tree, steps=1)
    real = packs.pack_ops

    def damaged(frames):
        ops = real(frames)
        return [(t, k, v[:-9] + bytes(9) if t == "packs" else v) for t, k, v in ops]

    monkeypatch.setattr(packs, "pack_ops", damaged)
    with store:
        before = kinds(store)
        with pytest.raises(CorruptError, match="did not read back|corrupt|decompress"):
            store.upgrade()
        assert kinds(store) == before and store.format_version == 1
        for ref, spec in history:
            assert tree_from_store(store, ref) == spec
