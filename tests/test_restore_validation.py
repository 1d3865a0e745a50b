"""Every field of every target entry is validated before the first write (issue 16.3)."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from restore_helpers import plant_checkpoint, read_tree

from snapstore.errors import CorruptError, UnsafePathError
from snapstore.ops.restore import apply as apply_mod
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, Entry
from snapstore.storage.objects import chunk_id
from snapstore.store import Store

REF = chunk_id(b"pwned\n")


def _first() -> Entry:
    # Sorts before every bad entry below: without validation up front it would be written first.
    return Entry(b"a_first.txt", FILE, 0o100644, 6, 0, REF)


BAD = {
    "nul-in-symlink-target": (Entry(b"z", SYMLINK, 0o120777, 4, 0, b"ab\x00cd"), UnsafePathError),
    "empty-symlink-target": (Entry(b"z", SYMLINK, 0o120777, 0, 0, b""), UnsafePathError),
    "huge-symlink-target": (Entry(b"z", SYMLINK, 0o120777, 5000, 0, b"x" * 5000), UnsafePathError),
    "negative-size": (Entry(b"z", FILE, 0o100644, -1, 0, REF), CorruptError),
    "huge-size": (Entry(b"z", FILE, 0o100644, 1 << 63, 0, REF), CorruptError),
    "negative-mode": (Entry(b"z", FILE, -1, 6, 0, REF), CorruptError),
    "mode-of-a-directory-on-a-file": (Entry(b"z", FILE, 0o040755, 6, 0, REF), CorruptError),
    "setuid-in-an-exact-mode": (Entry(b"z", EXEC, 0o104755, 6, 0, REF), CorruptError),
    "mode-beyond-the-bits": (Entry(b"z", FILE, 0o77777, 6, 0, REF), CorruptError),
    "directory-with-a-reference": (Entry(b"z", DIR, 0o040755, 0, 0, b"x"), CorruptError),
    "huge-time": (Entry(b"z", FILE, 0o100644, 6, 1 << 63, REF), CorruptError),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_an_invalid_entry_is_refused_before_anything_changes(tmp_path: Path, name: str):
    bad, error = BAD[name]
    root = tmp_path / "t"
    root.mkdir()
    (root / "keep.txt").write_bytes(b"mine\n")
    with Store.init(root) as store:
        store.snapshot("honest")
        before = read_tree(root)
        ref = plant_checkpoint(store, [_first(), bad])
        with pytest.raises(error):
            store.restore(ref)
        assert read_tree(root) == before
        assert store.pending_restore() is None
        store.snapshot("still works")


def _journal_to(store: Store, target: str, before: str, steps: list) -> None:
    value = msgpack.packb(
        {"kind": "restore", "target": bytes.fromhex(target), "before": bytes.fromhex(before),
         "paths": None, "time_ns": 1, "pid": 1, "steps": steps},
        use_bin_type=True,
    )
    with store.backend.write() as batch:
        batch.put("journal", b"current", value)


def test_a_journal_to_a_hostile_checkpoint_never_bricks_the_store(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "keep.txt").write_bytes(b"mine\n")
    with Store.init(root) as store:
        honest = store.snapshot("honest")
        ref = plant_checkpoint(store, [Entry(b"z", SYMLINK, 0o120777, 4, 0, b"a\x00b")])
        _journal_to(store, ref, honest.id, [["symlink", b"z"]])
        before = read_tree(root)
        # Readers work; writers refuse with the error's own class (not an internal error).
        assert {c.message for c in store.checkpoints()} == {"honest", "hostile"}
        assert store.verify() is not None
        assert "interrupted" in (store.pending_restore() or "")
        with pytest.raises(UnsafePathError):
            store.snapshot("x")
        assert read_tree(root) == before
        assert store.recover(mode="abandon").pending
        store.snapshot("works again")
        assert read_tree(root) == before


def test_any_exception_while_replaying_is_one_clear_error(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    root.mkdir()
    (root / "a.txt").write_bytes(b"A\n")
    with Store.init(root) as store:
        a = store.snapshot("A")
        (root / "a.txt").write_bytes(b"B\n")
        b = store.snapshot("B")
        _journal_to(store, a.id, b.id, [["write", b"a.txt"]])

        def broken(self, *args, **kwargs):
            raise ValueError("something no one expected")

        monkeypatch.setattr(apply_mod.Applier, "stage", broken)  # writing a.txt's new content
        with pytest.raises(CorruptError, match="snapstore recover"):
            store.snapshot("x")
        monkeypatch.undo()
        assert store.pending_restore() is not None
        assert store.recover().pending  # once the cause is gone, recovery finishes
        assert (root / "a.txt").read_bytes() == b"A\n"
        assert store.operations()[0].target == a.id


APPLIED_BAD = {
    "not-a-map": [1, 2],
    "a-directory-above-the-tree": {"dirs": [b"../outside"], "ids": []},
    "an-absolute-directory": {"dirs": [b"/etc"], "ids": []},
    "a-file-index-past-the-steps": {"dirs": [], "ids": [[5, 1, 1]]},
    "a-wrong-type": {"dirs": [], "ids": [["0", 1, 1]]},
    "an-extra-field": {"dirs": [], "ids": [], "run": b"rm -rf"},
}


@pytest.mark.parametrize("name", sorted(APPLIED_BAD))
def test_a_damaged_applied_mark_is_refused_and_touches_nothing(tmp_path: Path, name: str):
    """The applied mark (ops/restore/settle.py) is store input like the rest of the journal:
    a damaged one is a clear CorruptError for writers, readers go on, nothing outside moves."""
    root = tmp_path / "t"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_bytes(b"x\n")
    (root / "a.txt").write_bytes(b"A\n")
    with Store.init(root) as store:
        a = store.snapshot("A")
        (root / "a.txt").write_bytes(b"B\n")
        b = store.snapshot("B")
        value = msgpack.packb(
            {"kind": "restore", "target": bytes.fromhex(a.id), "before": bytes.fromhex(b.id), "paths": None,
             "time_ns": 1, "pid": 1, "boot": "another-boot", "steps": [["write", b"a.txt"]],
             "applied": APPLIED_BAD[name]},
            use_bin_type=True,
        )
        with store.backend.write() as batch:
            batch.put("journal", b"current", value)
        before = read_tree(root)
        assert {c.message for c in store.checkpoints()} == {"A", "B"}
        with pytest.raises(CorruptError):
            store.snapshot("x")
        assert read_tree(root) == before
        assert read_tree(outside) == {"x": ("file", b"x\n", False)}
