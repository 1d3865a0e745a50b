"""A watching Store never vouches for what it cannot see (issue 22, class 1).

Every checkpoint taken through the watcher must equal a full walk of the same quiescent tree
(``plain.diff(checkpoint)`` walks the tree with a Store that does not watch), whatever the
inotify limits: directories whose watch could not be added are walked at every checkpoint until
a watch is added, files with more than one hard link and files mapped shared and writable are
re-stat'ed at every checkpoint, and without any inotify instance every snapshot walks.

The limits are the real sysctls (``fs.inotify.max_user_watches``, ``max_user_instances``), set
when running as root and always restored (tests/inotify_limits.py); the tests that need them
skip with the reason otherwise.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from inotify_limits import limited, watches_in_use
from platform_marks import needs_inotify, needs_proc_maps

from snapstore.store import Store
from snapstore.testing import build_tree

pytest.importorskip("inotify_simple")

REPO = Path(__file__).resolve().parents[1]


def _same(plain: Store, cp_id: str) -> list[tuple[str, bytes]]:
    """What differs between checkpoint ``cp_id`` and a full walk of the tree now."""
    return [(c.status, c.path) for c in plain.diff(cp_id)]


def _dirs_tree(root: Path, n: int) -> None:
    build_tree(root, {f"d{i}/sub/f{i}.txt": b"f %d\n" % i for i in range(n)})


def _edit_all(root: Path, n: int, round_: int) -> None:
    for i in range(n):
        (root / f"d{i}" / "sub" / f"f{i}.txt").write_bytes(b"round %d of %d\n" % (round_, i))
        if i % 3 == round_ % 3:
            (root / f"d{i}" / f"new{round_}.txt").write_bytes(b"new\n")


@needs_inotify
def test_directories_past_max_user_watches_are_walked_at_every_checkpoint(tmp_path: Path):
    n = 30
    root = tmp_path / "t"
    _dirs_tree(root, n)
    Store.init(root).close()
    plain = Store.open(root)
    try:
        with limited("max_user_watches", lambda: watches_in_use() + 4):
            watched = Store.open(root, watch=True)
            status = watched.watch_status()
            assert status is not None and status["blind_dirs"] > 0, status
            assert f"walking those {status['blind_dirs']} unwatched directories" in status["mode"]
            watched.snapshot("start")
            for round_ in range(3):  # the watches stay refused: every checkpoint walks them
                _edit_all(root, n, round_)
                cp = watched.snapshot(f"round {round_}")
                assert _same(plain, cp.id) == [], round_
                assert watched.read_bytes(cp.id, f"d{n - 1}/sub/f{n - 1}.txt") == b"round %d of %d\n" % (round_, n - 1)
            assert watched.watch_status()["blind_dirs"] > 0
        # The limit is back: the next checkpoint adds the missing watches (and walks them once).
        _edit_all(root, n, 3)
        cp = watched.snapshot("watches added")
        assert _same(plain, cp.id) == []
        status = watched.watch_status()
        assert status["blind_dirs"] == 0 and status["mode"].startswith("watching"), status
        _edit_all(root, n, 4)
        cp = watched.snapshot("watched")
        assert _same(plain, cp.id) == []
        watched.close()
    finally:
        plain.close()


@needs_inotify
def test_directories_made_during_a_queue_overflow_are_watched_after_it(tmp_path: Path):
    root = tmp_path / "t"
    build_tree(root, {"busy/a.txt": b"a\n", "b.txt": b"b\n"})
    Store.init(root).close()
    with limited("max_queued_events", 16):  # the queue's size is fixed when the instance is made
        watched = Store.open(root, watch=True)
    plain = Store.open(root)
    try:
        watched.snapshot("start")
        for k in range(40):  # ~120 events: the queue overflows
            (root / "busy" / f"f{k}").write_bytes(b"%d\n" % k)
        (root / "made-meanwhile" / "deeper").mkdir(parents=True)  # its event is lost
        cp = watched.snapshot("after the overflow")  # a full walk
        assert watched.watch_status()["overflows"] >= 1
        assert _same(plain, cp.id) == []
        for i in range(2):
            (root / "made-meanwhile" / "deeper" / "late.txt").write_bytes(b"late %d\n" % i)
            cp = watched.snapshot(f"patched {i}")
            assert _same(plain, cp.id) == [], i
            assert watched.read_bytes(cp.id, "made-meanwhile/deeper/late.txt") == b"late %d\n" % i
    finally:
        watched.close()
        plain.close()


@needs_inotify
def test_a_tree_with_no_watch_at_all_is_walked_at_every_checkpoint(tmp_path: Path, monkeypatch):
    """Every watch refused (the root's too): the whole tree is walked, every time (no sysctl
    needed: the refusal is simulated)."""
    import inotify_simple

    def refuse(self, path, mask):
        raise OSError(28, "No space left on device")

    root = tmp_path / "t"
    _dirs_tree(root, 5)
    Store.init(root).close()
    monkeypatch.setattr(inotify_simple.INotify, "add_watch", refuse)
    watched, plain = Store.open(root, watch=True), Store.open(root)
    try:
        assert watched.watch_status()["blind"] == ["."]
        assert "max_user_watches" in watched.watch_status()["mode"]
        watched.snapshot("start")
        for round_ in range(3):
            _edit_all(root, 5, round_)
            cp = watched.snapshot(f"round {round_}")
            assert _same(plain, cp.id) == [], round_
    finally:
        watched.close()
        plain.close()


def _linked_store(tmp_path: Path) -> tuple[Path, Path, Store, Store]:
    root, outside = tmp_path / "t", tmp_path / "outside"
    build_tree(root, {"a.txt": b"a\n", "src/b.txt": b"b\n", "src/c.txt": b"c\n"})
    outside.mkdir()
    os.link(root / "a.txt", outside / "a-link")  # a second link outside the tree
    os.link(root / "src" / "b.txt", root / "b-link")  # and one inside it
    Store.init(root).close()
    return root, outside, Store.open(root, watch=True), Store.open(root)


def test_writes_through_another_hard_link_are_in_the_next_checkpoint(tmp_path: Path):
    root, outside, watched, plain = _linked_store(tmp_path)
    try:
        watched.snapshot("start")
        watched.snapshot("patched from the events from now on")
        for i in range(3):
            with open(outside / "a-link", "ab") as f:  # no event in the tree at all
                f.write(b"outside %d\n" % i)
            with open(root / "b-link", "r+b") as f:  # an event naming b-link, not src/b.txt
                f.write(b"B%d" % i)
            cp = watched.snapshot(f"write {i}")
            assert _same(plain, cp.id) == [], i
            assert watched.read_bytes(cp.id, "a.txt").endswith(b"outside %d\n" % i)
            assert watched.read_bytes(cp.id, "src/b.txt").startswith(b"B%d" % i)
        assert watched.watch_status()["links_restatted"] >= 9  # three files, three times
    finally:
        watched.close()
        plain.close()


def test_a_link_made_while_watching_is_followed(tmp_path: Path):
    """A file that gains a link in the tree: its other link is examined too (then at every
    checkpoint), though no event names it."""
    root, outside, watched, plain = _linked_store(tmp_path)
    try:
        watched.snapshot("start")
        watched.snapshot("patched")
        os.link(root / "src" / "c.txt", root / "c-link")
        with open(root / "c-link", "ab") as f:
            f.write(b"through the new link\n")
        cp = watched.snapshot("linked")
        assert _same(plain, cp.id) == []
        assert watched.read_bytes(cp.id, "src/c.txt") == b"c\nthrough the new link\n"
        with open(root / "c-link", "ab") as f:
            f.write(b"again\n")
        cp = watched.snapshot("again")
        assert _same(plain, cp.id) == []
        # A file created in the tree and linked from outside before any checkpoint saw it.
        (root / "src" / "new.txt").write_bytes(b"new\n")
        os.link(root / "src" / "new.txt", outside / "new-link")
        cp = watched.snapshot("new")
        with open(outside / "new-link", "ab") as f:
            f.write(b"outside\n")
        cp = watched.snapshot("written outside")
        assert _same(plain, cp.id) == []
        assert watched.read_bytes(cp.id, "src/new.txt") == b"new\noutside\n"
    finally:
        watched.close()
        plain.close()


@pytest.fixture(params=["disk", "tmpfs"])
def any_fs(request, tmp_path: Path):
    """A directory on the tests' file system, or on tmpfs (/dev/shm), where a write to a mapped
    page keeps the mtime after the first one."""
    if request.param == "disk":
        yield tmp_path
        return
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm (tmpfs) here")
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="snapstore-test-"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_proc_maps
def test_writes_through_a_live_shared_mapping_are_in_the_next_checkpoint(any_fs: Path, monkeypatch):
    from snapstore.tree import statcache

    # Every file read counts as read well after its last change (not racy): the stat cache
    # vouches for any file whose stat did not move, as it would for a file mapped long ago.
    monkeypatch.setattr(statcache, "now_ns", lambda: time.time_ns() + 10_000_000_000)
    root = any_fs / "t"
    build_tree(root, {"db.bin": bytes(16384), "other.txt": b"o\n"})
    Store.init(root).close()
    watched, plain = Store.open(root, watch=True), Store.open(root)
    fd = os.open(root / "db.bin", os.O_RDWR)
    m = mmap.mmap(fd, 16384)  # MAP_SHARED, writable
    os.close(fd)  # the mapping keeps the file open: IN_CLOSE_WRITE only comes at munmap
    try:
        watched.snapshot("start")
        watched.snapshot("patched")
        for i in range(3):
            time.sleep(0.02)  # a later clock tick (on disk the write stamps a new mtime)
            m[i * 100 : i * 100 + 6] = b"mmap %d" % i
            m.flush()  # msync: no write(), no event
            cp = watched.snapshot(f"mapped write {i}")
            assert _same(plain, cp.id) == [], i
            assert watched.read_bytes(cp.id, "db.bin")[i * 100 : i * 100 + 6] == b"mmap %d" % i
        assert watched.watch_status()["mapped_restatted"] >= 3
    finally:
        m.close()
        watched.close()
        plain.close()


@needs_proc_maps
def test_a_mapping_made_through_another_name_is_followed(any_fs: Path, monkeypatch):
    """Mapped through a second link, which is then deleted (the maps file says "(deleted)"),
    and unmapped between two checkpoints (IN_CLOSE_WRITE names the deleted link)."""
    from snapstore.tree import statcache

    monkeypatch.setattr(statcache, "now_ns", lambda: time.time_ns() + 10_000_000_000)
    root = any_fs / "t"
    build_tree(root, {"f.bin": bytes(8192), "other.txt": b"o\n"})
    os.link(root / "f.bin", root / "h.bin")
    Store.init(root).close()
    watched, plain = Store.open(root, watch=True), Store.open(root)
    try:
        watched.snapshot("start")
        watched.snapshot("patched")
        fd = os.open(root / "h.bin", os.O_RDWR)
        m = mmap.mmap(fd, 8192)
        os.close(fd)

        def write(i: int, label: str) -> None:
            time.sleep(0.02)
            m[i * 10 : i * 10 + 2] = b"w%d" % i
            m.flush()
            cp = watched.snapshot(label)
            assert watched.read_bytes(cp.id, "f.bin")[i * 10 : i * 10 + 2] == b"w%d" % i, label
            assert _same(plain, cp.id) == [], label

        write(1, "mapped through h.bin")
        os.unlink(root / "h.bin")
        write(2, "h.bin deleted")
        write(3, "f.bin has one link now")
        time.sleep(0.02)
        m[40:43] = b"w4!"
        m.flush()
        m.close()  # its IN_CLOSE_WRITE names h.bin, which is gone
        cp = watched.snapshot("unmapped")
        assert watched.read_bytes(cp.id, "f.bin")[40:43] == b"w4!"
        assert _same(plain, cp.id) == []
    finally:
        watched.close()
        plain.close()


@needs_inotify
def test_without_an_inotify_instance_every_snapshot_walks(tmp_path: Path):
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n"})
    Store.init(root).close()
    with limited("max_user_instances", 0):
        s = Store.open(root, watch=True)  # inotify_init fails with EMFILE: no crash
        try:
            status = s.watch_status()
            assert status is not None and status["watching"] is False
            assert "every checkpoint walks the whole tree" in status["mode"]
            assert "max_user_instances" in status["mode"]
            (root / "a.txt").write_bytes(b"changed\n")
            cp = s.snapshot("walked")  # (tries to watch again, in vain)
            assert s.read_bytes(cp.id, "a.txt") == b"changed\n"
            assert s.watch_status()["watching"] is False
        except BaseException:
            s.close()
            raise
    try:
        (root / "a.txt").write_bytes(b"again\n")
        cp = s.snapshot("an instance is free again: watched from now on")
        assert s.read_bytes(cp.id, "a.txt") == b"again\n"
        assert s.watch_status()["watching"] is True
        (root / "a.txt").write_bytes(b"watched\n")
        cp = s.snapshot("patched")
        assert s.read_bytes(cp.id, "a.txt") == b"watched\n"
        assert s.watch_status()["patched"] == 1
    finally:
        s.close()


def _cli(*args: str, cwd: Path, client: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m snapstore`` (always in-process), or the client that goes through a service."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("SNAPSTORE_STORE", None)
    cmd = ["-c", "from snapstore.service.client import run; run()"] if client else ["-m", "snapstore"]
    return subprocess.run([sys.executable, *cmd, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


@needs_inotify
def test_the_service_serves_unwatched_when_no_inotify_instance_is_left(tmp_path: Path):
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a\n"})
    assert _cli("init", cwd=root).returncode == 0
    try:
        with limited("max_user_instances", 0):
            started = _cli("serve", "--detach", cwd=root)
            assert started.returncode == 0, started.stderr
            status = _cli("serve", "--status", cwd=root)  # (the service is up before the limit goes back)
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["watcher"]["watching"] is False, info
        assert "walks the whole tree" in info["watcher"]["mode"]
        (root / "a.txt").write_bytes(b"through the service\n")
        snap = _cli("snapshot", "-m", "served", cwd=root, client=True)
        assert snap.returncode == 0, snap.stderr
        assert json.loads(_cli("serve", "--status", cwd=root).stdout)["requests"] >= 1  # it served
        shown = _cli("cat", "latest", "a.txt", cwd=root)
        assert shown.stdout == "through the service\n", shown
        # The limit is back: the checkpoint above made the instance it could not make before.
        assert json.loads(_cli("serve", "--status", cwd=root).stdout)["watcher"]["watching"] is True
    finally:
        _cli("serve", "--stop", cwd=root)


@needs_proc_maps
def test_only_mapped_files_with_another_link_send_a_search_through_the_tree(tmp_path: Path):
    """A file mapped shared and writable by its one and only name outside the tree (a
    desktop's databases) cannot be in the tree: its inode is not searched for.  With a second
    link (which may be in the tree), or deleted, it is."""
    from snapstore.tree.watcher import mapped_for_write

    root = tmp_path / "t"
    root.mkdir()
    db = tmp_path / "elsewhere.db"
    db.write_bytes(bytes(4096))
    dev, ino = os.stat(db).st_dev, os.stat(db).st_ino
    fd = os.open(db, os.O_RDWR)
    m = mmap.mmap(fd, 4096)
    os.close(fd)
    try:
        _, inodes = mapped_for_write(os.fsencode(root), dev)
        assert ino not in inodes
        os.link(db, root / "linked.db")
        _, inodes = mapped_for_write(os.fsencode(root), dev)
        assert ino in inodes
        os.unlink(root / "linked.db")
        os.rename(db, tmp_path / "moved.db")  # the maps file names the current name
        _, inodes = mapped_for_write(os.fsencode(root), dev)
        assert ino not in inodes
        os.link(tmp_path / "moved.db", root / "again.db")
        os.unlink(tmp_path / "moved.db")  # the mapped name is "(deleted)": searched
        _, inodes = mapped_for_write(os.fsencode(root), dev)
        assert ino in inodes
    finally:
        m.close()


def test_writes_through_a_mapping_of_an_outside_link_are_in_the_next_checkpoint(tmp_path: Path, monkeypatch):
    from snapstore.tree import statcache

    monkeypatch.setattr(statcache, "now_ns", lambda: time.time_ns() + 10_000_000_000)
    root = tmp_path / "t"
    build_tree(root, {"db.bin": bytes(8192), "other.txt": b"o\n"})
    os.link(root / "db.bin", tmp_path / "outside.bin")
    Store.init(root).close()
    watched, plain = Store.open(root, watch=True), Store.open(root)
    fd = os.open(tmp_path / "outside.bin", os.O_RDWR)
    m = mmap.mmap(fd, 8192)
    os.close(fd)
    try:
        watched.snapshot("start")
        watched.snapshot("patched")
        for i in range(2):
            time.sleep(0.02)
            m[i * 10 : i * 10 + 2] = b"o%d" % i
            m.flush()
            cp = watched.snapshot(f"write {i}")
            assert watched.read_bytes(cp.id, "db.bin")[i * 10 : i * 10 + 2] == b"o%d" % i
            assert _same(plain, cp.id) == []
    finally:
        m.close()
        watched.close()
        plain.close()
