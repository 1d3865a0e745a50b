"""`verify --repair` over many small stores, killed or not: nothing readable before is
unreadable after (issue 36).

The stores agents make most are small: a few files of one chunk each, so a checkpoint's
content is one pack, and a repair that recovers every chunk of a damaged pack rebuilds it
byte-identical, with its id.  Each trial builds such a store (one or two checkpoints), damages
it one way, notes every file that reads back, runs ``crash_child.py repair`` (killed with
SIGKILL before or after its write, or on a timer, or left to finish), and checks:

* the tree is untouched (repair reads it, never writes it);
* every file that read back before reads back the same bytes after;
* a repair run to its end then leaves every file the tree still holds readable in the latest
  checkpoint (when that checkpoint's manifest reads: the tree cannot give a manifest back).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torture_tally import record, scaled

from snapstore.errors import SnapstoreError
from snapstore.storage import entries
from snapstore.store import Store
from snapstore.testing import build_tree, read_tree

CHILD = str(Path(__file__).with_name("crash_child.py"))
REPO = Path(__file__).resolve().parents[2]
TRIALS = scaled(8, 400)
SHARD = 50
DAMAGE = ("frame", "entry", "chunk-gone", "pack-gone")


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SNAPSTORE_STORE", None)
    return env


def _files(rng: random.Random) -> dict[str, bytes]:
    out = {}
    for _ in range(rng.choice([1, 1, 2, 3, 5])):
        size = rng.choice([1, 5, 40, 300, 2000, 9000, 70_000])
        data = rng.randbytes(size) if rng.random() < 0.5 else (b"line %d\n" % rng.randint(0, 99)) * (size // 8 + 1)
        out[f"d{rng.randint(0, 2)}/f{rng.randint(0, 9)}.txt"] = data
    return out


def _readable(store: Store) -> dict[tuple[str, bytes], bytes]:
    out: dict[tuple[str, bytes], bytes] = {}
    for cp in store.checkpoints(include_safety=True):
        try:
            listed = store.entries(cp.id)
        except SnapstoreError:
            continue
        for e in listed:
            if e.is_file:
                try:
                    out[(cp.id, e.path)] = store.read_bytes(cp.id, e.path)
                except SnapstoreError:
                    continue
    return out


def _damage(store: Store, rng: random.Random, kind: str) -> None:
    """One kind of damage to a chunk of the latest checkpoint's files (mostly: the damage the
    tree can mend) or to any chunk (a manifest's too)."""
    with store.backend.read() as view:
        cids = sorted(k for k, v in view.items("chunks") if entries.is_entry(v))
    held = sorted({e.ref for e in store.entries("latest") if e.is_file and e.ref in cids})
    cid = rng.choice(held if held and rng.random() < 0.7 else cids)
    with store.backend.write() as batch:
        value = batch.get("chunks", cid) or b""
        e = entries.parse(cid, value)
        if kind == "frame":
            pack = bytearray(batch.get("packs", e.pack) or b"")
            pack[e.frame_off + rng.randrange(e.frame_len)] ^= 1 << rng.randrange(8)
            batch.put("packs", e.pack, bytes(pack))
        elif kind == "entry":
            broken = bytearray(value)
            broken[rng.randrange(len(broken))] ^= 0x55
            batch.put("chunks", cid, bytes(broken))
        elif kind == "chunk-gone":
            batch.delete("chunks", cid)
        else:
            batch.delete("packs", e.pack)
    entries.clear_cache()


def _trial(tree: Path, rng: random.Random) -> str:
    first = _files(rng)
    build_tree(tree, first)
    with Store.init(tree) as store:
        store.snapshot("A")
        if rng.random() < 0.6:
            build_tree(tree, _files(rng))
            store.snapshot("B")
        _damage(store, rng, kind := rng.choice(DAMAGE[:1] * 3 + DAMAGE))
        before = _readable(store)
    on_disk = read_tree(tree)
    plan = rng.choice(["apply:1:before", "apply:1:after", "timer", "none"])
    proc = subprocess.Popen(
        [sys.executable, CHILD, "repair", plan if plan.startswith("apply") else "none"], cwd=tree,
        env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"go"
    if plan == "timer":
        time.sleep(rng.uniform(0, 0.15))
        proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err, err
    assert proc.returncode in (0, -signal.SIGKILL), (proc.returncode, err)
    assert read_tree(tree) == on_disk, "repair changed the tree"
    with Store.open(tree) as store:
        after = _readable(store)
        lost = {k for k in before if after.get(k) != before[k]}
        assert not lost, f"{kind}/{plan}: readable before, not after: {sorted(lost)[:3]}"
        store.repair()  # (finishes what a killed one left)
        after = _readable(store)
        assert {k: after.get(k) for k in before} == before
        latest = store.checkpoints()[0].id
        try:
            held = {e.path: e for e in store.entries(latest) if e.is_file}
        except SnapstoreError:
            return kind
        for path, data in on_disk.items():
            if isinstance(data, bytes) and path in held:
                assert store.read_bytes(latest, path) == data, f"{kind}/{plan}: {path!r} not mended"
    return kind


@pytest.mark.parametrize("shard", range(max(1, -(-TRIALS // SHARD))))
def test_repair_of_small_stores_never_loses_a_readable_file(tmp_path, shard):
    n = min(SHARD, TRIALS - shard * SHARD)
    rng = random.Random(3600 + shard)
    failures: list[str] = []
    kinds: dict[str, int] = {}
    for i in range(n):
        tree = tmp_path / f"t{i}"
        try:
            kind = _trial(tree, rng)
            kinds[kind] = kinds.get(kind, 0) + 1
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            failures.append(f"trial {i}: {type(exc).__name__}: {exc}")
        shutil.rmtree(tree, ignore_errors=True)
    record("repair: small stores", n, len(failures), **kinds)
    assert not failures, "\n".join(failures[:10])
