"""The stored fingerprint of the last manifest (ops.snapshot.encode.LAST_MANIFEST) only skips work.

A CLI process takes one snapshot per Store; when its entries are those of the manifest the last
one wrote, and that manifest is the parent's, the id is reused without encoding.  Every answer
must be the one a store without the record computes.
"""

from __future__ import annotations

import os
from pathlib import Path

from snapstore.ops.snapshot.encode import LAST_MANIFEST
from snapstore.records import manifest as manifest_mod
from snapstore.store import Store


def _snap(root: Path, store_dir: Path, message: str, *, forget: bool = False) -> str:
    with Store.open(root, store=store_dir) as store:  # a fresh Store: no in-memory memo
        if forget:
            with store.backend.write() as batch:
                batch.delete("meta", LAST_MANIFEST)
        return store.snapshot(message).manifest


def test_fresh_stores_agree_with_a_store_that_never_reuses(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    (root / "d").mkdir(parents=True)
    for i in range(30):
        (root / "d" / f"f{i}").write_text(f"{i}\n")
    Store.init(root, store=tmp_path / "a").close()
    Store.init(root, store=tmp_path / "b").close()
    encodes = {"n": 0}
    real = manifest_mod.write_manifest

    def counting(*args, **kwargs):
        encodes["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(manifest_mod, "write_manifest", counting)
    steps = [
        lambda: None,
        lambda: (root / "d" / "f1").write_text("changed\n"),
        lambda: None,
        lambda: os.chmod(root / "d" / "f2", 0o755),
        lambda: (root / "empty").mkdir(),
        lambda: os.symlink("d/f3", root / "link"),
        lambda: (root / "d" / "f1").write_text("1\n"),  # back to an earlier tree
        lambda: (root / "d" / "f4").unlink(),
        lambda: None,
    ]
    reused = 0
    for i, step in enumerate(steps):
        step()
        before = encodes["n"]
        a = _snap(root, tmp_path / "a", f"s{i}")
        reused += encodes["n"] == before
        b = _snap(root, tmp_path / "b", f"s{i}", forget=True)
        assert a == b, f"step {i}"
    assert reused == 2  # the two unchanged steps encoded nothing


def test_a_fingerprint_of_a_deleted_checkpoint_is_not_trusted(tmp_path: Path):
    """Same entries as the recorded manifest, but that manifest is not the parent's (its
    checkpoint was deleted and gc removed its chunks): the manifest is written again."""
    root = tmp_path / "t"
    root.mkdir()
    (root / "f").write_text("one\n")
    Store.init(root, store=tmp_path / "s").close()
    _snap(root, tmp_path / "s", "one")
    (root / "f").write_text("two, and longer\n")
    (root / "g").write_text("new\n")
    two = _snap(root, tmp_path / "s", "two")
    with Store.open(root, store=tmp_path / "s") as store:
        store.delete("latest")
        store.gc()
    again = _snap(root, tmp_path / "s", "two again")
    assert again == two  # the same entries give the same id...
    with Store.open(root, store=tmp_path / "s") as store:
        assert store.verify().ok  # ...and its chunks are stored again
        assert store.read_bytes("latest", "f") == b"two, and longer\n"
