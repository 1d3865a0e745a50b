"""Crash consistency: real snapshot, restore, undo and gc processes killed with SIGKILL.

Each trial copies a prepared tree and store, starts ``crash_child.py`` and kills it either at a
seam (before or after the K-th LMDB write transaction, before restore step K, around
compaction's rename) or on a timer spread over the time an uninterrupted run takes.  Then:

* a reader (``snapstore list``) succeeds and leaves the tree alone; then the next writer
  (``snapstore snapshot``... here ``Store.recover``, which every writer runs first) finishes an
  interrupted restore;
* the store verifies clean;
* every checkpoint that exists reads back byte-exact and restores byte-exact;
* snapshot: the new checkpoint is whole or absent, and a fresh snapshot records the tree exactly;
* restore / undo: the tree is exactly its before or its after state.

``make test`` runs a bounded number of trials (snapshot and gc kills; tests/test_restore_crash.py
covers restore there); ``make torture`` runs 1,000 (every operation's trials are cut into shards of
at most 50, each its own test with its own seed, so that pytest-xdist spreads them over the cores).
``snapstore revert`` (of checkpoint B, with an unrecorded user edit elsewhere in the tree) is
killed the same way: the tree is exactly its before state or the merged after state.
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

from snapstore.store import Store
from snapstore.testing import Exec, Symlink, build_tree, random_bytes, read_tree, tree_from_store

CHILD = str(Path(__file__).with_name("crash_child.py"))
REPO = Path(__file__).resolve().parents[2]
CONVERSATION = [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "done"}]

TRIALS = {
    "snapshot": scaled(10, 300),
    "restore": scaled(0, 250),  # bounded runs: tests/test_restore_crash.py covers these
    "undo": scaled(0, 150),
    "gc": scaled(2, 150),
    "gc-compact": scaled(2, 150),
    "revert": scaled(0, 150),  # bounded runs: tests/test_revert_safety.py covers the apply
    "maintain": scaled(2, 150),
    "repair": scaled(2, 100),
}
#: Trials per test: a full run's trials are cut into shards (one test each) so that xdist can
#: run them on every core; a bounded run has one shard per operation.
SHARD = 50


def _shards(op: str) -> list[int]:
    return list(range(max(1, -(-TRIALS[op] // SHARD))))


def _shard_size(op: str, shard: int) -> int:
    return min(SHARD, TRIALS[op] - shard * SHARD) if TRIALS[op] else 0


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SNAPSTORE_STORE", None)
    return env


def _spec_a() -> dict:
    spec: dict = {}
    for i in range(120):
        spec[f"src/m{i % 7}/f{i}.py"] = f"# module {i}\n".encode() * (1 + i % 40)
    spec["bin/run"] = Exec(b"#!/bin/sh\necho run\n")
    spec["link"] = Symlink("src/m0/f0.py")
    spec["big.bin"] = random_bytes(300_000, "big-a")
    return spec


def _edit_to_b(root: Path) -> None:
    for i in range(0, 120, 3):
        (root / f"src/m{i % 7}/f{i}.py").write_bytes(random_bytes(500 + i * 37, f"b{i}"))
    for i in range(1, 120, 10):
        (root / f"src/m{i % 7}/f{i}.py").unlink()
    build_tree(root, {f"new/d{i}/n{i}.txt": random_bytes(3000, f"n{i}") for i in range(12)})
    (root / "big.bin").write_bytes(random_bytes(200_000, "big-a") + random_bytes(250_000, "big-b"))
    (root / "bin/run").chmod(0o644)
    os.unlink(root / "link")
    os.symlink("new", root / "link")


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Prepared trees: 'snap' (checkpoint A, tree at B), 'restore' (A, B; tree at B),
    'undo' (tree restored to A), 'gc' (A and C kept, X deleted: garbage to sweep)."""
    base = tmp_path_factory.mktemp("crash-templates")
    snap = base / "snap"
    build_tree(snap, _spec_a())
    with Store.init(snap) as store:
        store.snapshot("A", tags=["A"])
    spec_a = read_tree(snap)
    _edit_to_b(snap)
    spec_b = read_tree(snap)

    rest = base / "restore"
    shutil.copytree(snap, rest, symlinks=True)
    with Store.open(rest) as store:
        store.snapshot("B", tags=["B"], conversation=CONVERSATION)
    undo = base / "undo"
    shutil.copytree(rest, undo, symlinks=True)
    with Store.open(undo) as store:
        store.restore("A")
    assert read_tree(undo) == spec_a

    gct = base / "gc"
    build_tree(gct, _spec_a())
    with Store.init(gct) as store:
        store.snapshot("A", tags=["A"])
        build_tree(gct, {f"x/g{i}": random_bytes(900 + i, f"x{i}") for i in range(400)})
        build_tree(gct, {"x/huge": random_bytes(400_000, "x-huge")})
        x = store.snapshot("X", conversation=CONVERSATION)
        shutil.rmtree(gct / "x")
        _edit_to_b(gct)
        store.snapshot("C", tags=["C"])
        store.delete(x.id)
    maint = base / "maintain"  # 12 checkpoints of small edits (one deleted): small loose packs
    build_tree(maint, _spec_a())
    maint_specs = {}
    with Store.init(maint) as store:
        store.config_set("maintenance.auto", "false")
        for k in range(12):
            build_tree(maint, {f"src/m{k % 7}/f{k}.py": f"# edit {k}\n".encode() * (50 + k)})
            build_tree(maint, {f"big{k % 3}.bin": random_bytes(20_000, f"big-{k}")})
            cp = store.snapshot(f"M{k}")
            maint_specs[cp.id] = read_tree(maint)
        store.delete(next(iter(maint_specs)))
        del maint_specs[next(iter(maint_specs))]
        store.config_set("maintenance.auto", "true")
    rev = base / "revert"
    shutil.copytree(rest, rev, symlinks=True)
    with open(rev / "src/m2/f2.py", "ab") as f:  # B did not touch f2: the user's edit stays
        f.write(b"# the user's own line\n")
    probe = base / "revert-probe"
    shutil.copytree(rev, probe, symlinks=True)
    with Store.open(probe) as store:
        store.revert("B")
    spec_reverted = read_tree(probe)
    assert (probe / "src/m2/f2.py").read_bytes().endswith(b"# the user's own line\n")
    repair, repair_left = _damaged_copy(rest, base / "repair")
    return {
        "snap": snap, "restore": rest, "undo": undo, "gc": gct, "revert": rev,
        "maintain": maint, "maintain-specs": maint_specs, "repair": repair, "repair-left": repair_left,
        "A": spec_a, "B": spec_b, "revert-before": read_tree(rev), "revert-after": spec_reverted,
    }


def _problems(store: Store) -> set[tuple[str, str]]:
    return {(p.kind, p.id) for p in store.verify().problems}


def _damaged_copy(template: Path, tree: Path) -> tuple[Path, set[tuple[str, str]]]:
    """A copy of ``template`` (A and B, the tree at B) with a frame of B's content damaged (the
    tree holds it) and a chunk only A's version of a file had (the tree does not): the copy,
    and the problems a finished repair leaves (found on a probe copy)."""
    from snapstore.storage import entries

    shutil.copytree(template, tree, symlinks=True)
    with Store.open(tree) as store:
        a, b = store.resolve("A"), store.resolve("B")
        with store.backend.read() as view:  # (files of one chunk: their stream id is it)
            def one_chunk(ref: bytes) -> bool:
                return view.get("streams", ref) is None and view.get("chunks", ref) is not None

            in_a = {e.path: e.ref for e in store.entries(a.id) if e.kind <= 1 and one_chunk(e.ref)}
            edited = [(in_a[e.path], e.ref) for e in store.entries(b.id)
                      if e.path in in_a and in_a[e.path] != e.ref and e.kind <= 1 and one_chunk(e.ref)]
        only_a, in_b = edited[0][0], edited[-1][1]
        with store.backend.write() as batch:
            for cid in (only_a, in_b):
                value = batch.get("chunks", cid)
                assert value is not None
                if cid == in_b:  # its frame: every chunk in it is damaged
                    e = entries.parse(cid, value)
                    pack = bytearray(batch.get("packs", e.pack) or b"")
                    pack[e.frame_off + e.frame_len // 2] ^= 0x55
                    batch.put("packs", e.pack, bytes(pack))
                else:  # its entry
                    broken = bytearray(value)
                    broken[-3] ^= 0x55
                    batch.put("chunks", cid, bytes(broken))
    probe = tree.with_name(tree.name + "-probe")
    shutil.copytree(tree, probe, symlinks=True)
    with Store.open(probe) as store:
        assert _problems(store)
        store.repair()
        left = _problems(store)
    assert ("chunk", only_a.hex()) in left, left
    shutil.rmtree(probe)
    return tree, left


def _start(tree: Path, op: str, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, CHILD, op, mode], cwd=tree, env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    line = proc.stdout.readline()
    if line.strip() != b"go":
        proc.kill()
        raise AssertionError(f"child did not start: {proc.stderr.read()!r}")
    return proc


def _run(tree: Path, op: str, mode: str, kill_after: float | None):
    proc = _start(tree, op, mode)
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _calibrate(template: Path, tmp: Path, op: str) -> tuple[int, float]:
    probe = tmp / f"probe-{op}"
    shutil.copytree(template, probe, symlinks=True)
    code, out, err = _run(probe, op, "none", None)
    assert code == 0, err
    _, applies, seconds = out.split()[-3:]
    shutil.rmtree(probe)
    return int(applies), float(seconds)


def _modes(op: str, applies: int, seconds: float, n: int, seed: int, ends: bool = True):
    """n kill plans: (mode, kill_after) pairs spread over seams and over time."""
    rng = random.Random(seed)
    # The two ends first (in the first shard), whatever the timing: just before the first write
    # transaction, and just after the last one (for a snapshot, its checkpoint record).
    plans = [("apply:1:before", None), (f"apply:{applies}:after", None)][:n] if ends else []
    for i in range(len(plans), n):
        kind = i % 3
        if kind == 0:
            plans.append((f"apply:{rng.randint(1, applies)}:{rng.choice(['before', 'after'])}", None))
        elif kind == 1 and op in ("restore", "undo", "revert"):
            plans.append((f"step:{rng.randrange(0, 80)}", None))
        elif kind == 1 and op == "gc-compact":
            plans.append((f"rename:{rng.choice(['before', 'after'])}", None))
        else:
            plans.append(("none", rng.uniform(0, seconds * 1.2)))
    return plans


def _next_command_recovers(tree: Path) -> None:
    untouched = read_tree(tree)
    proc = subprocess.run(
        [sys.executable, "-m", "snapstore", "list", "--all"], cwd=tree, env=_env(),
        capture_output=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert read_tree(tree) == untouched, "a read-only command changed the tree"
    with Store.open(tree) as store:
        store.recover()
    assert not list(tree.rglob(".snapstore-tmp.*")), "temp files left behind"


def _check_verify(store: Store) -> None:
    report = store.verify()
    assert report.ok, [str(p) for p in report.problems[:5]]


def _run_trials(
    op: str, template: Path, tmp: Path, check, seed: int, shard: int = 0
) -> dict[str, int]:
    n = _shard_size(op, shard)
    if n <= 0:
        pytest.skip("full runs only (make torture); tests/test_restore_crash.py covers it here")
    applies, seconds = _calibrate(template, tmp, op)
    failures: list[str] = []
    outcomes: dict[str, int] = {}
    # Shard 0 keeps the seed the suite always used; the others get their own.
    plans = _modes(op, applies, seconds, n, seed + 1000 * shard, ends=shard == 0)
    for i, (mode, kill_after) in enumerate(plans):
        tree = tmp / f"{op}-{i}"
        shutil.copytree(template, tree, symlinks=True)
        try:
            code, out, err = _run(tree, op, mode, kill_after)
            assert b"Traceback" not in err, err
            assert code in (0, -signal.SIGKILL), (code, err)
            _next_command_recovers(tree)
            outcome = check(tree, completed=code == 0)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            failures.append(f"trial {i} ({mode}, {kill_after}): {type(exc).__name__}: {exc}")
        shutil.rmtree(tree, ignore_errors=True)
    category = {"gc-compact": "crash: gc --compact"}.get(op, f"crash: {op}")
    record(category, len(plans), len(failures), **outcomes)
    assert not failures, "\n".join(failures[:10])
    return outcomes


@pytest.mark.parametrize("shard", _shards("snapshot"))
def test_snapshot_killed_at_random_moments(templates, tmp_path, shard):
    spec_a, spec_b = templates["A"], templates["B"]

    def check(tree: Path, completed: bool) -> str:
        with Store.open(tree) as store:
            _check_verify(store)
            messages = [c.message for c in store.checkpoints(include_safety=True)]
            assert messages in (["A"], ["B", "A"]), messages
            assert tree_from_store(store, "A") == spec_a
            landed = messages[0] == "B"
            if completed:
                assert landed
            if landed:
                assert tree_from_store(store, "B") == spec_b
                assert store.conversation("B") == CONVERSATION
            assert read_tree(tree) == spec_b  # a snapshot never touches the tree
            # The next snapshot records the tree exactly (no stale cache, no missing chunk).
            store.snapshot("C", tags=["C"])
            assert tree_from_store(store, "C") == spec_b
            store.restore("A")
            assert read_tree(tree) == spec_a
            store.undo()
            assert read_tree(tree) == spec_b
            _check_verify(store)
        return "landed" if landed else "absent"

    outcomes = _run_trials("snapshot", templates["snap"], tmp_path, check, seed=101, shard=shard)
    if _shard_size("snapshot", shard) >= 6:
        assert outcomes.get("landed") and outcomes.get("absent"), outcomes


def _restore_check(spec_before, spec_after):
    def check(tree: Path, completed: bool) -> str:
        state = read_tree(tree)
        assert state in (spec_before, spec_after), "the tree is neither before nor after"
        if completed:
            assert state == spec_after
        with Store.open(tree) as store:
            _check_verify(store)
            if state == spec_after:  # the operation was logged (finished or recovered)
                assert store.operations()[0].kind in ("restore", "undo")
            assert tree_from_store(store, "A") == spec_a_of(store)
            store.restore("A")
            assert read_tree(tree) == spec_a_of(store)
            store.restore("B")
            assert read_tree(tree) == tree_from_store(store, "B")
        return "after" if state == spec_after else "before"

    return check


def spec_a_of(store: Store):
    return tree_from_store(store, "A")


@pytest.mark.parametrize("shard", _shards("restore"))
def test_restore_killed_at_random_moments(templates, tmp_path, shard):
    check = _restore_check(templates["B"], templates["A"])
    _run_trials("restore", templates["restore"], tmp_path, check, seed=202, shard=shard)


@pytest.mark.parametrize("shard", _shards("undo"))
def test_undo_killed_at_random_moments(templates, tmp_path, shard):
    check = _restore_check(templates["A"], templates["B"])
    _run_trials("undo", templates["undo"], tmp_path, check, seed=303, shard=shard)


@pytest.mark.parametrize(
    ("op", "shard"), [(op, s) for op in ("gc", "gc-compact") for s in _shards(op)]
)
def test_gc_killed_at_random_moments(templates, tmp_path, op, shard):
    spec_a = templates["A"]
    with Store.open(templates["gc"]) as store:
        spec_c = tree_from_store(store, "C")

    def check(tree: Path, completed: bool) -> str:
        with Store.open(tree) as store:
            _check_verify(store)
            assert [c.message for c in store.checkpoints(include_safety=True)] == ["C", "A"]
            assert tree_from_store(store, "A") == spec_a
            assert tree_from_store(store, "C") == spec_c
            report = store.gc(compact=op == "gc-compact")
            swept = report.chunks_removed == 0
            _check_verify(store)
            store.restore("A")
            assert read_tree(tree) == spec_a
        return "finished" if swept else "resumed"

    seed = 404 if op == "gc" else 505
    _run_trials(op, templates["gc"], tmp_path, check, seed=seed, shard=shard)


@pytest.mark.parametrize("shard", _shards("maintain"))
def test_maintenance_pass_killed_at_random_moments(templates, tmp_path, shard):
    specs = templates["maintain-specs"]

    def check(tree: Path, completed: bool) -> str:
        with Store.open(tree) as store:
            _check_verify(store)
            for cid, spec in specs.items():
                assert tree_from_store(store, cid) == spec
            left = store.maintain()  # the next pass picks up what is left
            _check_verify(store)
            store.gc()
            _check_verify(store)
            for cid, spec in specs.items():
                assert tree_from_store(store, cid) == spec
            store.restore(next(reversed(specs)))
            assert read_tree(tree) == specs[next(reversed(specs))]
        return "finished" if left is None else "resumed"

    _run_trials("maintain", templates["maintain"], tmp_path, check, seed=606, shard=shard)


@pytest.mark.parametrize("shard", _shards("revert"))
def test_revert_killed_at_random_moments(templates, tmp_path, shard):
    before, after = templates["revert-before"], templates["revert-after"]

    def check(tree: Path, completed: bool) -> str:
        state = read_tree(tree)
        assert state in (before, after), "the tree is neither before nor after the revert"
        if completed:
            assert state == after
        with Store.open(tree) as store:
            _check_verify(store)
            if state == after:
                store.undo()  # the revert is undoable like a restore, back to the user's tree
                assert read_tree(tree) == before
            store.restore("A")
            assert read_tree(tree) == templates["A"]
        return "after" if state == after else "before"

    _run_trials("revert", templates["revert"], tmp_path, check, seed=606, shard=shard)


@pytest.mark.parametrize("shard", _shards("repair"))
def test_repair_killed_at_random_moments(templates, tmp_path, shard):
    spec_b, left = templates["B"], templates["repair-left"]
    with Store.open(templates["repair"]) as store:
        damaged = _problems(store)

    def check(tree: Path, completed: bool) -> str:
        assert read_tree(tree) == spec_b  # repair reads the tree, never writes it
        with Store.open(tree) as store:
            now = _problems(store)
            assert now <= damaged, now - damaged
            if completed:
                assert now == left
            store.repair()  # finishes the job
            assert _problems(store) == left
            store.restore("B")
            assert read_tree(tree) == spec_b
        return "finished" if completed else ("untouched" if now == damaged else "repaired")

    _run_trials("repair", templates["repair"], tmp_path, check, seed=707, shard=shard)
