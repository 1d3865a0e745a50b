"""The in-process manifest memo must never change a result, only skip work."""

from __future__ import annotations

from pathlib import Path

from snapstore.records import manifest as manifest_mod
from snapstore.records import manifest_codec
from snapstore.store import Store


def _tree(root: Path, n: int = 300) -> None:
    for i in range(n):
        p = root / f"d{i % 7}" / f"f{i}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"file {i}\n".encode() * (i % 13 + 1))


def _count_encodings(monkeypatch) -> dict[str, int]:
    """Counts manifests encoded, whole (records.manifest) or through a codec (manifest_codec)."""
    calls = {"n": 0}
    for module in (manifest_mod, manifest_codec):
        real = module.write_manifest

        def counting(*args, _real=real, **kwargs):
            calls["n"] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, "write_manifest", counting)
    return calls


def test_memo_gives_the_manifest_a_fresh_store_computes(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    root.mkdir()
    _tree(root)
    agent = Store.init(root)
    agent.snapshot("a")
    calls = _count_encodings(monkeypatch)
    unchanged = agent.snapshot("b")
    assert calls["n"] == 0  # recognised as unchanged without encoding a manifest
    (root / "d3" / "f3.txt").write_bytes(b"changed\n")
    changed = agent.snapshot("c")
    assert calls["n"] == 1
    assert changed.stats["modified"] == 1 and unchanged.stats["modified"] == 0
    fresh = Store.open(root)  # a second Store has no memo: it must agree
    (root / "d3" / "f3.txt").write_bytes(b"changed again\n")
    by_fresh = fresh.snapshot("d")
    (root / "d3" / "f3.txt").write_bytes(b"changed\n")
    by_agent = agent.snapshot("e")  # parent is fresh's checkpoint: the memo must not apply
    assert by_agent.stats["modified"] == 1
    assert by_agent.manifest != by_fresh.manifest
    # A store that computes the manifest from scratch agrees with the agent's.
    assert fresh.snapshot("f").manifest == by_agent.manifest
    assert agent.snapshot("g").manifest == by_agent.manifest
    assert agent.read_bytes(by_agent.id, "d3/f3.txt") == b"changed\n"
    assert agent.verify().ok
    fresh.close()
    agent.close()


def test_the_stage_runs_on_a_context_without_a_store(tmp_path: Path, monkeypatch):
    """snapshot.take needs only a StageContext: its memo lives in ctx.manifest_memo, not on a Store."""
    from snapstore.ops import snapshot
    from snapstore.ops.context import StageContext
    from snapstore.ops.snapshot.encode import LAST_MANIFEST
    from snapstore.records.checkpoint import parse_record
    from snapstore.storage.memory import MemoryBackend

    root = tmp_path / "t"
    root.mkdir()
    _tree(root, 40)
    ctx = StageContext(MemoryBackend(), str(root))
    first_id, packed, first = snapshot.take(ctx, message="one")
    assert parse_record(first_id, packed).manifest == first.manifest_id
    assert ctx.manifest_memo.mid == first.manifest_id  # the manifest memo is kept in the context
    calls = _count_encodings(monkeypatch)
    again_id, again_packed, again = snapshot.take(ctx, message="two", skip_unchanged=True)
    assert again.reused and (again_id, again_packed) == (first_id, packed)
    assert calls["n"] == 0  # one dict comparison, no manifest encoded
    # Same store, no memo (a CLI process): the fingerprint of the entries stored with the last
    # manifest recognises them without encoding a manifest either.
    fresh = StageContext(ctx.backend, str(root))
    fresh_id, _, fresh_result = snapshot.take(fresh, message="three", skip_unchanged=True)
    assert fresh_result.reused and fresh_id == first_id and calls["n"] == 0
    # Without that record: the same answer the long way.
    with ctx.backend.write() as batch:
        batch.delete("meta", LAST_MANIFEST)
    fresh = StageContext(ctx.backend, str(root))
    fresh_id, _, fresh_result = snapshot.take(fresh, message="four", skip_unchanged=True)
    assert fresh_result.reused and fresh_id == first_id and calls["n"] == 1


def test_a_long_lived_store_counts_changes_as_the_diff_does(tmp_path: Path, monkeypatch):
    """From its third snapshot on, a Store counts added/modified/deleted from the entries its
    manifest codec re-encoded (nothing decoded): the counts must be the diff's."""
    from snapstore.ops.snapshot import counts as snapshot_counts

    root = tmp_path / "t"
    root.mkdir()
    _tree(root, 120)
    agent = Store.init(root)
    agent.snapshot("one")
    (root / "d0" / "f0.txt").write_bytes(b"two\n")
    agent.snapshot("two")  # fills the codec
    decoded = {"n": 0}
    real = snapshot_counts.against_parent

    def counting(*args, **kwargs):
        _, _, parent, mid = args[:4]
        decoded["n"] += parent is not None and parent.manifest != mid  # (an unchanged one decodes nothing)
        return real(*args, **kwargs)

    monkeypatch.setattr(snapshot_counts, "against_parent", counting)
    steps = [
        lambda: (root / "d1" / "f1.txt").write_bytes(b"modified\n"),
        lambda: (root / "d2" / "new.txt").write_bytes(b"added\n"),
        lambda: (root / "d3" / "f3.txt").unlink(),
        lambda: (root / "d4" / "f4.txt").chmod(0o755),
        lambda: [(root / "d5" / f"f{i}.txt").unlink() for i in (5, 12, 19)] and (root / "zz.txt").write_bytes(b"z"),
        lambda: None,
    ]
    for i, step in enumerate(steps):
        step()
        cp = agent.snapshot(f"step {i}")
        statuses = [c.status for c in agent.changes(cp.id)]
        counted = (cp.stats["added"], cp.stats["modified"], cp.stats["deleted"])
        assert counted == (statuses.count("A"), len(statuses) - statuses.count("A") - statuses.count("D"), statuses.count("D")), i
    assert decoded["n"] == 0  # every count came from the codec
    assert agent.verify().ok  # and every chunk a manifest names was stored
    agent.close()


def test_a_watching_snapshot_that_fails_midway_loses_no_change(tmp_path: Path, monkeypatch):
    """A watching Store patches its state's entries (the memo's dict) in place; a snapshot
    that fails after that must leave nothing that passes for the last manifest: the next one
    records the deletion the failed one saw."""
    import time

    from snapstore.ops.snapshot import read

    root = tmp_path / "t"
    root.mkdir()
    _tree(root)
    agent = Store.init(root)
    agent.close()
    agent = Store.open(root, watch=True)
    agent.snapshot("a")
    agent.snapshot("b")  # (the state and the memo are this context's now)
    (root / "d1" / "f1.txt").unlink()
    time.sleep(0.05)

    def failing(*args, **kwargs):
        raise RuntimeError("injected failure after the patch")

    monkeypatch.setattr(read, "read_changed", failing)
    try:
        agent.snapshot("fails")
    except RuntimeError:
        pass
    else:
        raise AssertionError("the injected failure did not happen")
    monkeypatch.undo()
    after = agent.snapshot("after", skip_unchanged=True)
    paths = {e.path for e in agent.entries(after.id)}
    assert b"d1/f1.txt" not in paths
    assert after.stats["deleted"] == 1
    agent.close()
