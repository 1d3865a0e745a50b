"""A file rewritten with the same bytes (a touch, a formatter that changes nothing, a checkout of
the same content) keeps its parent's entry, mtime included: a manifest records content changes,
not touches.  The stat cache still learns the new stat, so the next snapshot reads nothing.

Files are rewritten in place here: a rewrite through a new name (unlink, create) also changes
the directory's mtime, which the manifest records as seen (docs/format.md)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from helpers import call_cli

from snapstore.ops.snapshot import read as snapshot_read
from snapstore.records import manifest
from snapstore.store import Store
from snapstore.testing import build_tree
from snapstore.tree import statcache

SPEC = {f"src/m{i}.py": b"x = %d\n" % i for i in range(6)} | {"a.txt": b"hello\n", "docs/r.md": b"readme\n"}


@pytest.fixture(autouse=True)
def _settled(monkeypatch):
    # Files just written count as settled: a racy re-read would hide whether the stat cache
    # vouches for a touched file.
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)


def _tree(tmp_path: Path) -> Path:
    """The tree of :data:`SPEC`, with a store."""
    root = tmp_path / "t"
    build_tree(root, SPEC)
    Store.init(root).close()
    return root


def _touch(root: Path, *names: str) -> None:
    """Rewrite each file in place with its own bytes (a new mtime and ctime, the same content)."""
    time.sleep(0.01)  # (a new mtime whatever the file system's clock granularity)
    for name in names:
        path = root / name
        path.write_bytes(path.read_bytes())


def _reads(monkeypatch) -> list[bytes]:
    """The paths the snapshot's readers open from now on."""
    opened: list[bytes] = []
    real = snapshot_read._open
    monkeypatch.setattr(snapshot_read, "_open", lambda root, rel, *a: opened.append(rel) or real(root, rel, *a))
    return opened


def _entry(store: Store, ref: str, path: bytes) -> manifest.Entry:
    return next(e for e in store.entries(ref) if e.path == path)


def test_a_touched_file_keeps_its_parents_entry_through_the_cli(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    build_tree(root, SPEC)
    monkeypatch.setenv("SNAPSTORE_AUTOSTART", "0")
    assert call_cli(monkeypatch, ["init"], cwd=root).code == 0
    assert call_cli(monkeypatch, ["snapshot", "-m", "one"], cwd=root).code == 0
    _touch(root, "a.txt", "src/m3.py")
    out = call_cli(monkeypatch, ["snapshot", "-m", "two"], cwd=root)
    assert out.code == 0, out.err
    # An explicit snapshot still records a checkpoint: with nothing changed and nothing new.
    assert "+0 ~0 -0 files, 0 B new" in out.text, out.text
    with Store.open(root) as s:
        two, one = s.checkpoints()[:2]
        assert (two.message, one.message) == ("two", "one")
        assert two.manifest == one.manifest
        assert _entry(s, two.id, b"a.txt").mtime_ns != os.stat(root / "a.txt").st_mtime_ns
    skipped = call_cli(monkeypatch, ["snapshot", "--skip-unchanged", "-m", "three"], cwd=root)
    assert skipped.code == 0, skipped.err
    with Store.open(root) as s:
        assert [c.message for c in s.checkpoints()][:2] == ["two", "one"]


@pytest.mark.parametrize("watch", [False, True])
@pytest.mark.parametrize("pooled", [False, True])
def test_an_agents_checkpoint_after_a_touch_records_nothing(tmp_path: Path, monkeypatch, watch: bool, pooled: bool):
    """Nothing recorded, and the stat cache learnt the new stats all the same (the next
    checkpoint reads nothing)."""
    if pooled:
        monkeypatch.setattr(snapshot_read, "INLINE_FILES", 0)
    root = _tree(tmp_path)
    with Store.open(root, watch=watch) as s:
        one = s.snapshot("one")
        _touch(root, "a.txt", "docs/r.md")
        again = s.snapshot("after a tool call", skip_unchanged=True)
        assert again.reused and again.id == one.id
        assert [c.id for c in s.checkpoints()] == [one.id]
    opened = _reads(monkeypatch)
    with Store.open(root) as s:  # (a walk: the stat cache read from the table)
        assert s.snapshot("after the next one", skip_unchanged=True).reused and opened == []


@pytest.mark.parametrize("watch", [False, True])
@pytest.mark.parametrize("pooled", [False, True])
def test_the_stat_cache_learns_the_new_stat(tmp_path: Path, monkeypatch, watch: bool, pooled: bool):
    """The touched files are read once (their stat changed), then never again; the kept
    mtime survives the next snapshots (through the pool and its writer thread too)."""
    if pooled:
        monkeypatch.setattr(snapshot_read, "INLINE_FILES", 0)
    root = _tree(tmp_path)
    with Store.open(root, watch=watch) as s:
        one = s.snapshot("one")
        _touch(root, "a.txt", "src/m1.py", "src/m4.py")
        opened = _reads(monkeypatch)
        two = s.snapshot("two")
        assert sorted(opened) == [b"a.txt", b"src/m1.py", b"src/m4.py"]
        assert two.manifest == one.manifest
        opened.clear()
        three = s.snapshot("three")
        assert opened == [] and three.manifest == one.manifest
    opened.clear()
    with Store.open(root) as s:  # (a walk, the stat cache read from the table)
        assert s.snapshot("four").manifest == one.manifest
    assert opened == []


@pytest.mark.parametrize("watch", [False, True])
def test_a_same_size_content_change_is_recorded(tmp_path: Path, watch: bool):
    root = _tree(tmp_path)
    with Store.open(root, watch=watch) as s:
        one = s.snapshot("one")
        time.sleep(0.01)
        (root / "a.txt").write_bytes(b"HELLO\n")  # the same size
        _touch(root, "src/m2.py")
        two = s.snapshot("two", skip_unchanged=True)
        assert not two.reused and two.manifest != one.manifest
        assert s.read_bytes(two.id, "a.txt") == b"HELLO\n"
        new, old = _entry(s, two.id, b"a.txt"), _entry(s, one.id, b"a.txt")
        assert new.ref != old.ref and new.mtime_ns == os.stat(root / "a.txt").st_mtime_ns
        assert _entry(s, two.id, b"src/m2.py") == _entry(s, one.id, b"src/m2.py")  # (touched only)


@pytest.mark.parametrize("watch", [False, True])
@pytest.mark.parametrize("touched", [False, True])
def test_a_mode_change_is_recorded(tmp_path: Path, watch: bool, touched: bool):
    """A chmod (with the same bytes written again, or not) records the new mode."""
    root = _tree(tmp_path)
    with Store.open(root, watch=watch) as s:
        one = s.snapshot("one")
        if touched:
            _touch(root, "src/m0.py")
        os.chmod(root / "src/m0.py", 0o755)
        two = s.snapshot("two", skip_unchanged=True)
        assert not two.reused and two.manifest != one.manifest
        entry = _entry(s, two.id, b"src/m0.py")
        assert entry.kind == manifest.EXEC and entry.mode & 0o777 == 0o755
        assert entry.ref == _entry(s, one.id, b"src/m0.py").ref
        assert entry.mtime_ns == os.stat(root / "src/m0.py").st_mtime_ns


def _second_store(store: Path, tmp_path: Path) -> Path:
    """A copy of a store kept outside its tree (the same tree, checkpoints and stat cache)."""
    copy = tmp_path / "copy-store"
    shutil.copytree(store, copy)
    return copy


def test_watched_and_walked_snapshots_record_the_same_manifest(tmp_path: Path):
    """The same tree from the same parent, once through a watcher's patch (the parent's entries
    in memory) and once by a walk (the parent's entries looked up in the store)."""
    root = tmp_path / "t"
    build_tree(root, SPEC | {f"big/f{i:03d}.txt": b"%d\n" % i for i in range(300)})
    store = tmp_path / "store"
    Store.init(root, store=store).close()
    with Store.open(root, store=store, watch=True) as watched:
        one = watched.snapshot("one")  # (the watcher's state: the next one is patched)
        copy = _second_store(store, tmp_path)
        _touch(root, "a.txt", "src/m5.py", "big/f007.txt", "big/f250.txt")
        time.sleep(0.01)
        (root / "src/m0.py").write_bytes(b"x = 'changed'\n")
        (root / "big/new.txt").write_bytes(b"new\n")
        patched = watched.snapshot("two")
        assert watched.context.watcher is not None and watched.context.watcher.patched >= 1
        for path in (b"a.txt", b"big/f250.txt"):
            assert _entry(watched, patched.id, path) == _entry(watched, one.id, path)
    with Store.open(root, store=copy) as walked:
        assert walked.snapshot("two").manifest == patched.manifest


@pytest.mark.parametrize("watch", [False, True])
def test_a_restores_safety_checkpoint_after_a_same_content_rewrite_is_the_latest(tmp_path: Path, watch: bool):
    root = _tree(tmp_path)
    with Store.open(root, watch=watch) as s:
        x = s.snapshot("X")
        time.sleep(0.01)
        for i in range(3):
            (root / f"src/m{i}.py").write_bytes(b"y = %d\n" % i)
        y = s.snapshot("Y")
        _touch(root, *(f"src/m{i}.py" for i in range(6)))  # as a checkout of Y would lay it out
        report = s.restore(x.id)
        assert report.safety is not None and report.safety.id == y.id
        assert (root / "src/m1.py").read_bytes() == b"x = 1\n"
        s.undo()
        assert (root / "src/m1.py").read_bytes() == b"y = 1\n"
        assert s.diff(y.id) == []
