"""Concurrency: 4 processes snapshotting, restoring, undoing, compacting (``gc --compact``),
editing, listing, diffing and verifying one tree and store at once, each also holding one
long-lived Store that must never read stale data (~5 s in ``make test``, 60 s in ``make torture``).

Every command's outcome is classified.  Allowed: success; a writer refused with exit 5 and a
"locked" message; a restore or undo stopped with exit 9 (ConflictError) because another process
edited the tree under it (the designed behaviour, counted separately); an undo with nothing to
undo (exit 4).  Never allowed: a traceback, an internal error (exit 70), a reader refused, any
other error, a worker that does not finish (a hang).  Afterwards the store verifies clean, no
temp file is left, and every file in the tree and in every checkpoint is whole (each file
carries the BLAKE3 of its body, so a half-written file cannot pass).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import blake3
import pytest
from torture_tally import record, scaled

from snapstore.storage.lock import WriterLock
from snapstore.store import Store
from snapstore.testing import read_tree, tree_from_store

WORKER = str(Path(__file__).with_name("concurrency_worker.py"))
REPO = Path(__file__).resolve().parents[2]
SECONDS = scaled(5, 60)
WORKERS = 4


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SNAPSTORE_STORE", None)
    env.pop("SNAPSTORE_DEBUG", None)
    return env


def _whole(data: bytes) -> bool:
    head, sep, body = data.partition(b"\n")
    return sep == b"\n" and head == b"SELF " + blake3.blake3(body).hexdigest().encode()


def _self_checking(i: int) -> bytes:
    body = f"initial {i}\n".encode() * (i + 1)
    return b"SELF " + blake3.blake3(body).hexdigest().encode() + b"\n" + body


def _classify(cmd: str, code: int, err: str) -> str:
    if "Traceback" in err or code == 70:
        return "failure"
    if code == 0 or (cmd == "diff" and code == 1):
        return "ok"
    if code == 5 and cmd in ("snapshot", "restore", "undo", "gc") and "locked" in err:
        return "refused (locked)"
    if code == 9 and cmd in ("restore", "undo"):
        return "conflict (tree edited under a restore)"
    if code == 4 and cmd == "undo" and "nothing to undo" in err:
        return "ok"
    return "failure"


def test_four_processes_on_one_tree_and_store(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    (root / ".gitignore").write_bytes(b"*.tmp-edit\n")
    for i in range(24):
        (root / f"d{i % 4}").mkdir(exist_ok=True)
        (root / f"d{i % 4}/f{i // 4}.txt").write_bytes(_self_checking(i))
    with Store.init(root) as store:
        store.snapshot("base", tags=["base"])
        store.snapshot("second")
    procs = []
    for w in range(WORKERS):
        out = tmp_path / f"w{w}.json"
        cmd = [sys.executable, WORKER, str(root), str(SECONDS), str(w + 1), str(out)]
        procs.append((subprocess.Popen(cmd, env=_env(), stderr=subprocess.PIPE), out))
    counts: dict[str, int] = {}
    ok_by_cmd: dict[str, int] = {}
    failures: list[str] = []
    for proc, out in procs:
        try:
            _, err = proc.communicate(timeout=SECONDS + 120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            failures.append(f"worker {proc.pid} hung (did not finish in {SECONDS + 120} s)")
            continue
        if proc.returncode != 0:
            failures.append(f"worker exited {proc.returncode}: {err.decode(errors='replace')[-2000:]}")
            continue
        for cmd, code, text in json.loads(out.read_text()):
            verdict = _classify(cmd, code, text)
            counts[verdict] = counts.get(verdict, 0) + 1
            if verdict == "ok":
                ok_by_cmd[cmd] = ok_by_cmd.get(cmd, 0) + 1
            if verdict == "failure":
                failures.append(f"{cmd} exited {code}: {text.strip()[:300]}")

    # The aftermath: a valid store, whole files everywhere, no temp files.
    final_problems: list[str] = []
    proc = subprocess.run(
        [sys.executable, "-m", "snapstore", "verify", "-q"], cwd=root, env=_env(),
        capture_output=True, timeout=300,
    )
    if proc.returncode != 0:
        final_problems.append(f"verify exited {proc.returncode}: {proc.stderr[-500:]!r}")
    leftovers = [p for p in root.rglob("*") if ".snapstore-tmp." in p.name]
    if leftovers:
        final_problems.append(f"temp files left: {leftovers[:5]}")
    for path, data in read_tree(root).items():
        if path != b".gitignore" and isinstance(data, bytes) and not _whole(data):
            final_problems.append(f"half-written file in the tree: {path!r}")
    with Store.open(root) as store:
        cps = store.checkpoints(include_safety=True)
        for cp in cps:
            for path, data in tree_from_store(store, cp.id).items():
                if path != b".gitignore" and isinstance(data, bytes) and not _whole(data):
                    final_problems.append(f"half-written file {path!r} in checkpoint {cp.short_id}")
        store.restore("latest")
        if read_tree(root) != tree_from_store(store, "latest"):
            final_problems.append("a final restore of latest did not give latest back")
    failures += final_problems
    commands = sum(counts.values())
    record(
        "concurrency", commands + 1, len(failures),
        commands=commands, checkpoints=len(cps), **{k: v for k, v in counts.items() if k != "failure"},
        **{"held-reader": ok_by_cmd.get("held-reader", 0), "compactions": ok_by_cmd.get("gc", 0)},
    )
    assert not failures, "\n".join(failures[:15])
    assert counts.get("ok", 0) > 0
    # Compactions ran under the long-lived readers, and those were checked.
    assert ok_by_cmd.get("gc", 0) > 0 and ok_by_cmd.get("held-reader", 0) > 0, ok_by_cmd


@pytest.mark.torture_case("concurrency")
def test_readers_never_wait_for_the_writer_lock(tmp_path):
    root = tmp_path / "tree"
    root.mkdir()
    (root / "a.txt").write_bytes(b"a\n")
    with Store.init(root) as store:
        store.snapshot("A")
    lock = WriterLock(str(root / ".snapstore" / "lock"))
    with lock.held():
        for argv in (["list"], ["diff"], ["verify"], ["show"], ["cat", "latest", "a.txt"], ["oplog"]):
            proc = subprocess.run(
                [sys.executable, "-m", "snapstore", "--lock-timeout", "0", *argv], cwd=root,
                env=_env(), capture_output=True, timeout=60,
            )
            assert proc.returncode in (0, 1), (argv, proc.stderr)
        for argv in (["snapshot"], ["restore", "latest"], ["undo"]):
            proc = subprocess.run(
                [sys.executable, "-m", "snapstore", "--lock-timeout", "0", *argv], cwd=root,
                env=_env(), capture_output=True, timeout=60,
            )
            assert proc.returncode == 5, (argv, proc.stderr)
            lines = proc.stderr.decode().splitlines()
            assert len(lines) == 1 and "locked" in lines[0] and str(os.getpid()) in lines[0]
