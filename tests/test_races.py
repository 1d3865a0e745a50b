"""Files that vanish, cannot be read, or change while a snapshot reads them."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from snapstore.errors import RefError
from snapstore.ops.snapshot import read as snapshot_read
from snapstore.records.manifest import FILE, UNREADABLE
from snapstore.storage import chunker, objects
from snapstore.testing import build_tree, random_bytes
from snapstore.tree import scan

IS_ROOT = os.geteuid() == 0


def _deny_open(monkeypatch, target) -> None:
    """Make ``target`` unreadable: chmod 000, or (as root, who reads anything) fail the
    snapshot reader's open seam for that one path (os.open itself is left alone)."""
    target = os.fsencode(target)
    if not IS_ROOT:
        os.chmod(target, 0)
        return
    real = snapshot_read._open

    def fake(root, rel, flags):
        if root + b"/" + rel == target:
            raise PermissionError(errno.EACCES, "Permission denied", target)
        return real(root, rel, flags)

    monkeypatch.setattr(snapshot_read, "_open", fake)


def _deny_listing(monkeypatch, target) -> None:
    """Make directory ``target`` unlistable (no read bit, or as root a failing listing through
    the scan's seam: os.scandir itself is left alone)."""
    if not IS_ROOT:
        os.chmod(target, 0o300)  # still traversable, so a store inside it stays usable
        return
    st = os.stat(target)
    real = scan._scandir

    def fake(fd):
        here = os.fstat(fd)
        if (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino):
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(fd)

    monkeypatch.setattr(scan, "_scandir", fake)


def test_unreadable_file_is_recorded_warned_and_counted(tree, store, monkeypatch):
    build_tree(tree, {"ok.txt": b"fine", "secret.txt": b"no access"})
    _deny_open(monkeypatch, tree / "secret.txt")
    try:
        cp = store.snapshot("unreadable")
    finally:
        os.chmod(tree / "secret.txt", 0o644)
    assert cp.stats["skipped"] == {"special": 0, "vanished": 0, "unreadable": 1}
    assert len(cp.warnings) == 1 and "secret.txt" in cp.warnings[0]
    kinds = {e.path: e.kind for e in store.entries(cp.id)}
    assert kinds == {b"ok.txt": FILE, b"secret.txt": UNREADABLE}
    assert store.read_bytes(cp.id, "ok.txt") == b"fine"
    with pytest.raises(RefError):
        store.read_bytes(cp.id, "secret.txt")
    # once readable again, the next snapshot stores it
    monkeypatch.undo()
    cp2 = store.snapshot("readable again")
    assert store.read_bytes(cp2.id, "secret.txt") == b"no access"


def test_unlistable_directory_is_recorded_warned_and_counted(tree, store, monkeypatch):
    build_tree(tree, {"ok.txt": b"fine", "locked/inner.txt": b"x"})
    _deny_listing(monkeypatch, tree / "locked")
    try:
        cp = store.snapshot("unlistable")
    finally:
        os.chmod(tree / "locked", 0o755)
    assert cp.stats["skipped"]["unreadable"] == 1
    assert any("locked" in w for w in cp.warnings)
    kinds = {e.path: e.kind for e in store.entries(cp.id)}
    assert kinds == {b"ok.txt": FILE, b"locked": UNREADABLE}


def test_file_vanishing_between_scan_and_read(tree, store, monkeypatch):
    build_tree(tree, {"stays": b"s", "goes": b"g", "dir/goes too": random_bytes(9000, 1)})
    real_walk = scan.walk

    def walk_then_delete(*args, **kwargs):
        found = real_walk(*args, **kwargs)
        os.unlink(tree / "goes")
        os.unlink(tree / "dir" / "goes too")
        return found

    monkeypatch.setattr(scan, "walk", walk_then_delete)
    cp = store.snapshot("vanishing")
    assert cp.stats["skipped"] == {"special": 0, "vanished": 2, "unreadable": 0}
    assert len(cp.warnings) == 2
    assert all("vanished" in w for w in cp.warnings)
    assert {e.path for e in store.entries(cp.id)} == {b"stays"}


def test_file_replaced_by_symlink_between_scan_and_read(tree, store, monkeypatch):
    build_tree(tree, {"f": b"content"})
    real_walk = scan.walk

    def walk_then_replace(*args, **kwargs):
        found = real_walk(*args, **kwargs)
        os.unlink(tree / "f")
        os.symlink("/etc/passwd", tree / "f")
        return found

    monkeypatch.setattr(scan, "walk", walk_then_replace)
    cp = store.snapshot("replaced")
    assert cp.stats["skipped"]["vanished"] == 1
    assert b"f" not in {e.path for e in store.entries(cp.id)}


def test_directory_vanishing_during_the_scan(tree, store, monkeypatch):
    build_tree(tree, {"a": b"a", "gone/x": b"x", "gone/y/z": b"z"})
    real = scan._open_dir

    def open_after_delete(name, dir_fd=None):
        if name == b"gone":
            shutil.rmtree(tree / "gone")
        return real(name, dir_fd)

    monkeypatch.setattr(scan, "_open_dir", open_after_delete)
    cp = store.snapshot("dir vanished")
    assert cp.stats["skipped"]["vanished"] == 1
    assert any("gone" in w for w in cp.warnings)
    assert {e.path for e in store.entries(cp.id)} == {b"a"}


def _append_after_read(monkeypatch, path, times):
    """After each of the first ``times`` reads of ``path``, append to it (a concurrent writer)."""
    calls = {"n": 0}
    real = snapshot_read.Reader._read_fd
    ino = os.stat(path).st_ino

    def read_fd(self, fd, expected, rel=b""):
        result = real(self, fd, expected, rel)
        if os.fstat(fd).st_ino == ino and calls["n"] < times:
            calls["n"] += 1
            with open(path, "ab") as f:
                f.write(b"+more")
        return result

    monkeypatch.setattr(snapshot_read.Reader, "_read_fd", read_fd)
    return calls


@pytest.mark.parametrize("size", [100, snapshot_read.WHOLE_READ_MAX + 10], ids=["small", "streamed"])
def test_file_that_keeps_changing_is_never_stored_torn(tree, store, monkeypatch, size):
    original = random_bytes(size, 7)
    build_tree(tree, {"busy.log": original, "calm.txt": b"calm"})
    calls = _append_after_read(monkeypatch, tree / "busy.log", times=100)
    cp = store.snapshot("busy")
    # Each read saw a different version (the original plus 0, 1, 2 appends).  Their chunks were
    # handed to the writer while being read, so they are in the store; what must hold is that
    # no checkpoint references any of them, and that gc removes them as garbage.
    versions = [original + b"+more" * k for k in range(snapshot_read.READ_ATTEMPTS)]
    torn_streams = {objects.chunk_id(v) for v in versions}
    torn_chunks = {objects.chunk_id(c) for v in versions for c in chunker.cut_buffer(v)}
    refs = {e.ref for c in store.checkpoints(include_safety=True) for e in store.entries(c.id)}
    assert not refs & torn_streams
    assert calls["n"] == snapshot_read.READ_ATTEMPTS
    assert cp.stats["skipped"]["unreadable"] == 1
    assert any("busy.log" in w and "changing" in w for w in cp.warnings)
    entries = {e.path: e for e in store.entries(cp.id)}
    assert entries[b"busy.log"].kind == UNREADABLE
    assert entries[b"busy.log"].ref == b""
    assert store.read_bytes(cp.id, "calm.txt") == b"calm"
    with store.backend.read() as view:
        statcache_keys = [k for k, _ in view.items("statcache")]
    assert b"busy.log" not in statcache_keys
    assert _present(store, torn_chunks)  # stored as orphans...
    store.gc()
    assert not _present(store, torn_chunks)  # ...and collected
    assert store.read_bytes(cp.id, "calm.txt") == b"calm"


def _present(store, chunk_ids) -> set[bytes]:
    ids = sorted(chunk_ids)
    return {i for i, p in zip(ids, store.backend.has_many("chunks", ids)) if p}


@pytest.mark.parametrize("size", [100, snapshot_read.WHOLE_READ_MAX + 10], ids=["small", "streamed"])
def test_file_that_changes_once_is_reread_and_stored_whole(tree, store, monkeypatch, size):
    original = random_bytes(size, 8)
    build_tree(tree, {"once.log": original})
    calls = _append_after_read(monkeypatch, tree / "once.log", times=1)
    cp = store.snapshot("changed once")
    assert calls["n"] == 1
    assert cp.warnings == ()
    assert cp.stats["skipped"]["unreadable"] == 0
    assert store.read_bytes(cp.id, "once.log") == original + b"+more"
    assert store.read_bytes(cp.id, "once.log") == (tree / "once.log").read_bytes()
    assert store.entries(cp.id)[0].size == size + 5


def test_unlistable_root_fails_instead_of_recording_an_empty_tree(tree, store, monkeypatch):
    from snapstore.errors import TreeIOError

    build_tree(tree, {"a": b"a"})
    store.snapshot("before")
    _deny_listing(monkeypatch, tree)
    try:
        with pytest.raises(TreeIOError):
            store.snapshot("root unreadable")
    finally:
        os.chmod(tree, 0o755)
    assert len(store.checkpoints()) == 1
