"""Files that vanish, cannot be read, or change while a snapshot reads them."""

from __future__ import annotations

import errno
import os
import shutil

import pytest

from snapstore.errors import RefError
from snapstore.ops import snapshot
from snapstore.records.manifest import FILE, UNREADABLE
from snapstore.testing import build_tree, random_bytes
from snapstore.tree import scan

IS_ROOT = os.geteuid() == 0


def _deny_open(monkeypatch, target) -> None:
    """Make ``target`` unreadable: chmod 000, or (as root, who reads anything) fail os.open."""
    target = os.fsencode(target)
    if not IS_ROOT:
        os.chmod(target, 0)
        return
    real = os.open

    def fake(path, flags, *args, **kwargs):
        if not isinstance(path, int) and os.fsencode(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(snapshot.os, "open", fake)


def _deny_listing(monkeypatch, target) -> None:
    """Make directory ``target`` unlistable (no read bit, or as root a failing os.scandir)."""
    target = os.fsencode(target)
    if not IS_ROOT:
        os.chmod(target, 0o300)  # still traversable, so a store inside it stays usable
        return
    real = os.scandir

    def fake(path="."):
        if not isinstance(path, int) and os.fsencode(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(scan.os, "scandir", fake)


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
    real = os.scandir
    target = os.fsencode(tree / "gone")

    def scandir_after_delete(path="."):
        if not isinstance(path, int) and os.fsencode(path) == target:
            shutil.rmtree(path)
        return real(path)

    monkeypatch.setattr(scan.os, "scandir", scandir_after_delete)
    cp = store.snapshot("dir vanished")
    assert cp.stats["skipped"]["vanished"] == 1
    assert any("gone" in w for w in cp.warnings)
    assert {e.path for e in store.entries(cp.id)} == {b"a"}


def _append_after_read(monkeypatch, path, times):
    """After each of the first ``times`` reads of ``path``, append to it (a concurrent writer)."""
    calls = {"n": 0}
    real = snapshot._Reader._read_fd
    ino = os.stat(path).st_ino

    def read_fd(self, fd, expected):
        result = real(self, fd, expected)
        if os.fstat(fd).st_ino == ino and calls["n"] < times:
            calls["n"] += 1
            with open(path, "ab") as f:
                f.write(b"+more")
        return result

    monkeypatch.setattr(snapshot._Reader, "_read_fd", read_fd)
    return calls


@pytest.mark.parametrize("size", [100, snapshot.WHOLE_READ_MAX + 10], ids=["small", "streamed"])
def test_file_that_keeps_changing_is_never_stored_torn(tree, store, monkeypatch, size):
    original = random_bytes(size, 7)
    build_tree(tree, {"busy.log": original, "calm.txt": b"calm"})
    calls = _append_after_read(monkeypatch, tree / "busy.log", times=100)
    cp = store.snapshot("busy")
    assert calls["n"] == snapshot.READ_ATTEMPTS
    assert cp.stats["skipped"]["unreadable"] == 1
    assert any("busy.log" in w and "changing" in w for w in cp.warnings)
    entries = {e.path: e for e in store.entries(cp.id)}
    assert entries[b"busy.log"].kind == UNREADABLE
    assert entries[b"busy.log"].ref == b""
    assert store.read_bytes(cp.id, "calm.txt") == b"calm"
    # no stored file content is any of the versions the file went through
    with store.backend.read() as view:
        statcache_keys = [k for k, _ in view.items("statcache")]
    assert b"busy.log" not in statcache_keys


@pytest.mark.parametrize("size", [100, snapshot.WHOLE_READ_MAX + 10], ids=["small", "streamed"])
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
