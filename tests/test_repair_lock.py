"""``verify --repair`` and the writer lock (issue 38, class 16): the verify runs without the
lock (LMDB readers never block a writer), so an agent's hook can record a checkpoint meanwhile
on a store that needs no repair; the lock is taken only to repair, and what is repaired is what
is still damaged under the lock."""

from __future__ import annotations

from pathlib import Path

from snapstore.ops import repair, verify
from snapstore.store import Store
from snapstore.testing import build_tree
from tests.helpers import run_snapstore
from tests.test_repair import chunk_of, damage_frame, files


def snapshot_meanwhile(tree: Path) -> tuple[int, str]:
    """A real `snapshot` process that may wait 0.2 s for the writer lock."""
    done = run_snapstore("--lock-timeout", "0.2", "snapshot", "-m", "meanwhile", cwd=tree)
    return done.returncode, done.stderr.decode()


def test_a_snapshot_can_be_taken_while_verify_repair_reads_a_sound_store(tree):
    build_tree(tree, files())
    seen: list[tuple[int, str]] = []
    with Store.init(tree) as store:
        store.snapshot("A")
        (tree / "src/new.py").write_bytes(b"added\n")

        def progress(done: int, total: int) -> None:
            if not seen:  # in the middle of the verify: another process wants to write
                seen.append(snapshot_meanwhile(tree))

        report = store.repair(progress)
    assert seen and seen[0][0] == 0, seen
    assert report.ok and report.damaged == 0 and report.after is None
    with Store.open(tree) as store:
        assert [c.message for c in store.checkpoints()][0] == "meanwhile"


def test_with_damage_the_verify_runs_unlocked_and_the_repair_still_works(tree):
    build_tree(tree, files())
    seen: list[tuple[int, str]] = []
    with Store.init(tree) as store:
        a = store.snapshot("A")
        damage_frame(store, chunk_of(store, a.id, "src/m07.py"))

        def progress(done: int, total: int) -> None:
            if not seen:
                seen.append(snapshot_meanwhile(tree))

        report = store.repair(progress)
        assert report.ok and report.repaired >= 1
    assert seen and seen[0][0] == 0  # (the unlocked verify: the writer was not blocked)
    assert run_snapstore("verify", cwd=tree).returncode == 0


def test_only_what_is_still_damaged_under_the_lock_is_repaired(tree):
    build_tree(tree, files())
    with Store.init(tree) as store:
        a = store.snapshot("A")
        damage_frame(store, chunk_of(store, a.id, "src/m07.py"))
        stale = verify.run(store.backend, None, store.context.excluded)  # found without the lock
        assert repair.damaged_chunks(stale)
        assert store.repair().repaired >= 1  # another repair fixed it meanwhile
        with store._lock.held():
            again = repair.run(store.context, None, before=stale)
        assert again.damaged == 0 and again.repaired == 0 and again.after is None
