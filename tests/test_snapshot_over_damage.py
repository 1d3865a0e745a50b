"""A checkpoint is still taken when its parent's manifest is damaged, and it does not share the
damage: an agent that checkpoints after every tool call must not be stopped by old damage."""

from __future__ import annotations

import pytest

from snapstore.records.checkpoint import path_prefix
from snapstore.storage import objects
from snapstore.store import Store
from snapstore.testing import build_tree
from tests.helpers import run_snapstore

EDITED = "pkg3/module_0003.py"


def files(n: int = 300) -> dict[str, bytes]:
    """Enough files for a manifest of several leaves."""
    return {f"pkg{i % 7}/module_{i:04d}.py": f"value = {i}\n".encode() * 3 for i in range(n)}


def leaves(store: Store, mid: bytes) -> list[bytes]:
    with store.backend.read() as view:
        return objects.leaf_ids(view.get, mid)


def damage(store: Store, cid: bytes, how: str) -> None:
    with store.backend.write() as batch:
        if how == "missing":
            batch.delete("chunks", cid)
        else:
            value = bytearray(batch.get("chunks", cid) or b"")
            value[len(value) // 2] ^= 0x55
            batch.put("chunks", cid, bytes(value))


def two_checkpoints(tree) -> tuple[Store, bytes, list[bytes]]:
    """Checkpoints A and B (one file edited); returns the store, B's manifest and the leaves
    B changed."""
    build_tree(tree, files())
    store = Store.init(tree)
    a = store.snapshot("A")
    (tree / EDITED).write_bytes(b"value = 'B'\n")
    b = store.snapshot("B")
    changed = [c for c in leaves(store, b.manifest) if c not in set(leaves(store, a.manifest))]
    assert changed
    return store, b.manifest, changed


@pytest.mark.parametrize("how", ["missing", "flip"])
def test_a_snapshot_over_a_parent_with_a_damaged_manifest_is_taken_and_reads_back(tree, how):
    store, _, changed = two_checkpoints(tree)
    damage(store, changed[0], how)
    store.close()
    (tree / EDITED).write_bytes(b"value = 'C'\n")
    (tree / "new.py").write_bytes(b"new = 1\n")
    done = run_snapstore("snapshot", "-m", "C", cwd=tree)
    assert done.returncode == 0, done.stderr
    err = done.stderr.decode()
    assert err.count("\n") == 1 and err.startswith("snapstore: warning: the parent checkpoint"), err
    assert "damaged" in err and "Traceback" not in err
    with Store.open(tree) as store:
        c = store.resolve("latest")
        assert c.message == "C"
        # Counted against an empty tree, and every path is in the path index (a superset).
        assert c.stats["added"] == len(files()) + 1
        with store.backend.read() as view:
            for path in (b"new.py", b"pkg0/module_0000.py"):
                named = {cid for _, cid in view.items("paths", prefix=path_prefix(path))}
                assert bytes.fromhex(c.id) in named, path
        problems = store.verify().problems
        assert problems and all(p.checkpoint != c.id for p in problems)
        want = {**files(), EDITED: b"value = 'C'\n", "new.py": b"new = 1\n"}
        assert {e.path.decode(): store.read_bytes(c.id, e.path) for e in store.entries(c.id)} == want


def test_a_snapshot_over_damage_stores_again_the_damaged_chunks_its_manifest_shares(tree):
    """B's changed leaf is a delta on A's, which is damaged, and so is a leaf A, B and C all
    hold: C's snapshot finds the damage when it counts its changes, and stores its manifest's
    chunks again where the store cannot read them back, which mends A's and B's shared leaf."""
    store, b_manifest, changed = two_checkpoints(tree)
    a = store.resolve("latest~1")
    a_leaves = leaves(store, a.manifest)
    [base] = [c for c in a_leaves if c not in set(leaves(store, b_manifest))]
    # A leaf away from the edited one: the leaves next to a change may be cut again around it
    # (manifest_codec), and their bytes hold mtimes, so which ones are re-cut varies by run.
    far = [c for i, c in enumerate(a_leaves) if abs(i - a_leaves.index(base)) >= 2]
    assert far, len(a_leaves)
    shared = far[0]
    with store.backend.read() as view:
        stored = objects.load_chunk(view.get, shared)
    damage(store, base, "flip")
    damage(store, shared, "flip")
    store.close()
    (tree / EDITED).write_bytes(b"value = 'C'\n")
    done = run_snapstore("snapshot", "-m", "C", cwd=tree)
    assert done.returncode == 0, done.stderr
    assert b"damaged" in done.stderr
    with Store.open(tree) as store:
        c = store.resolve("latest")
        assert shared in leaves(store, c.manifest)
        problems = store.verify().problems
        assert problems and all(p.checkpoint != c.id for p in problems), problems
        with store.backend.read() as view:
            assert objects.load_chunk(view.get, shared) == stored  # mended for A and B too
        assert store.read_bytes(c.id, EDITED) == b"value = 'C'\n"
        # (Not a path lookup in A: finding a path bisects A's leaves by their first paths, and
        # may read A's damaged leaf on the way, which nothing here mends.)
