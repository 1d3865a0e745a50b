"""A watched checkpoint's shared-mapping scan: made inline by a library checkpoint, or taken
from a thread the service began it in before the checkpoint (tree/watcher.py ``begin_scan``,
ops/snapshot/incremental.py ``settle``).

What must hold: the scan a checkpoint takes is one begun for it (after the request), never one
left by an earlier checkpoint; a file found mapped only by that scan is re-stat'ed and read
in the same checkpoint, as with a scan made inline; when such a file cannot be patched in, the
checkpoint is taken again by a full walk.  Each checkpoint is compared with a full walk of the
same tree (``plain.diff``), as tests/test_watch_trust.py does.  The tests of the threaded scan
begin it as the service does (``watcher.begin_scan()`` just before the checkpoint).
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from platform_marks import needs_proc_maps

from snapstore.store import Store
from snapstore.testing import build_tree

pytest.importorskip("inotify_simple")


def _same(plain: Store, cp_id: str) -> list[tuple[str, bytes]]:
    """What differs between checkpoint ``cp_id`` and a full walk of the tree now."""
    return [(c.status, c.path) for c in plain.diff(cp_id)]


@pytest.fixture
def not_racy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file read counts as read well after its last change: the stat cache vouches for
    any file whose stat did not move, as it would for a file mapped long ago."""
    from snapstore.tree import statcache

    monkeypatch.setattr(statcache, "now_ns", lambda: time.time_ns() + 10_000_000_000)


def _scan_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads each mapping scan ran in (the real scan, recorded)."""
    from snapstore.tree import watcher

    names: list[str] = []
    real = watcher.mapped_for_write

    def recorded(*args: Any) -> Any:
        names.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(watcher, "mapped_for_write", recorded)
    return names


@contextmanager
def _watched(tmp_path: Path, size: int) -> Iterator[tuple[Path, Store, Store]]:
    """A tree with ``db.bin`` (``size`` zero bytes), a watching Store whose state has been
    patched once, and a Store that walks; both closed after."""
    root = tmp_path / "t"
    build_tree(root, {"db.bin": bytes(size), "other.txt": b"o\n"})
    Store.init(root).close()
    watched, plain = Store.open(root, watch=True), Store.open(root)
    try:
        watched.snapshot("start")  # (a walk)
        watched.snapshot("patched")
        yield root, watched, plain
    finally:
        watched.close()
        plain.close()


def _map(path: Path, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size)  # MAP_SHARED, writable
    finally:
        os.close(fd)  # the mapping keeps the file open: IN_CLOSE_WRITE only comes at munmap


@needs_proc_maps
@pytest.mark.parametrize("begun", [False, True], ids=["library", "service"])
def test_a_file_mapped_between_two_checkpoints_is_read_by_the_second_from_its_own_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_racy: None, begun: bool
):
    """Mapped (and written through) after a patched checkpoint: the next checkpoint's patch
    does not know it (the last scan found nothing), its own scan finds it, and the checkpoint
    holds the write.  ``Store(watch=True)`` outside the service makes each scan inline, in the
    calling thread (a scan thread competed with the checkpoint for the interpreter and made
    the library loop slower); a scan ``begun`` before the checkpoint, as the service begins
    it, runs in the watcher's thread and is taken after the reads."""
    threads = _scan_threads(monkeypatch)
    with _watched(tmp_path, 16384) as (root, watched, plain):
        watcher = watched.context.watcher
        assert watcher is not None and watcher.last_mapped == set()
        m = _map(root / "db.bin", 16384)
        try:
            for i in range(3):
                time.sleep(0.02)  # a later clock tick (on disk the write stamps a new mtime)
                m[i * 100 : i * 100 + 6] = b"mmap %d" % i
                m.flush()  # msync: no write(), no event
                if begun:
                    watcher.begin_scan()
                cp = watched.snapshot(f"mapped write {i}")
                assert watched.read_bytes(cp.id, "db.bin")[i * 100 : i * 100 + 6] == b"mmap %d" % i, i
                assert _same(plain, cp.id) == [], i
        finally:
            m.close()
        status = watched.watch_status()
        assert status is not None and status["walks"] == 1 and status["patched"] == 4
        assert len(threads) == 5 and threads[:2] == ["MainThread"] * 2, threads  # (the walk's, the first patch's)
        if begun:
            assert all(name.startswith("snapstore-mapping-scan") for name in threads[2:]), threads
        else:
            assert set(threads) == {"MainThread"}, threads
            assert not [t.name for t in threading.enumerate() if t.name.startswith("snapstore-mapping-scan")]
        assert not watcher.scan_begun()


@needs_proc_maps
def test_a_scan_begun_for_a_checkpoint_that_failed_is_not_taken_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_racy: None
):
    """A checkpoint that fails after its scan began (as the service begins it) leaves no scan
    behind: the next one scans afresh (after the mapping made in between) and holds the write
    through it."""
    from snapstore.ops.snapshot import read

    with _watched(tmp_path, 16384) as (root, watched, plain):
        watcher = watched.context.watcher
        assert watcher is not None
        real = read.read_changed

        def failing(*args: Any, **kwargs: Any) -> Any:
            raise OSError("the disk went away")

        monkeypatch.setattr(read, "read_changed", failing)
        (root / "other.txt").write_bytes(b"changed\n")
        scans = watcher.mapping_scans
        watcher.begin_scan()
        with pytest.raises(Exception, match="disk went away"):
            watched.snapshot("fails after its scan began")
        assert watcher.mapping_scans == scans + 1  # (it had begun)
        assert not watcher.scan_begun()
        monkeypatch.setattr(read, "read_changed", real)
        m = _map(root / "db.bin", 16384)
        try:
            time.sleep(0.02)
            m[:6] = b"mapped"
            m.flush()
            cp = watched.snapshot("after the failure")
            assert watched.read_bytes(cp.id, "db.bin")[:6] == b"mapped"
            assert _same(plain, cp.id) == []
            assert watcher.mapping_scans == scans + 2  # its own scan, not the failed one's
        finally:
            m.close()


@needs_proc_maps
def test_a_mapped_file_that_is_gone_when_the_scan_is_taken_makes_the_checkpoint_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_racy: None
):
    """The scan finds a newly mapped file whose name is deleted once the events are read
    (its event still queued; the scan is made before the read): the patch cannot say, so the
    checkpoint is taken again by a full walk, which equals a walk of the tree."""
    with _watched(tmp_path, 8192) as (root, watched, plain):
        watcher = watched.context.watcher
        assert watcher is not None
        m = _map(root / "db.bin", 8192)
        try:
            m[:4] = b"gone"
            m.flush()
            real = type(watcher).take

            def then_unlinked(self: Any) -> Any:
                got = real(self)
                if (root / "db.bin").exists():
                    os.unlink(root / "db.bin")  # (after the scan found it and the events were read)
                return got

            monkeypatch.setattr(type(watcher), "take", then_unlinked)
            walks = watcher.walks
            cp = watched.snapshot("mapped, then deleted")
            assert watcher.walks == walks + 1
            assert _same(plain, cp.id) == []
            assert b"db.bin" not in {e.path for e in watched.entries(cp.id)}
        finally:
            m.close()


@needs_proc_maps
def test_a_mapped_file_s_one_link_is_stat_ed_once_and_again_after_it_gains_one_in_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, not_racy: None
):
    """A file mapped by its one name outside the tree is stat'ed by the first scan only
    (platform.maps: MapsCache.sole); once it gains a link in the tree (an event there, then
    a walk) the scans stat it again and search the tree for it, so a write through the mapping
    that moves no mtime (a page already dirty) is in the next checkpoint."""
    from snapstore.platform import maps

    root = tmp_path / "t"
    build_tree(root, {"other.txt": b"o\n"})
    db = tmp_path / "elsewhere.db"
    db.write_bytes(bytes(8192))
    Store.init(root).close()
    watched, plain = Store.open(root, watch=True), Store.open(root)
    stats: list[bytes] = []
    real = maps._sole_link

    def counted(path: bytes, dev: int, ino: int) -> bool:
        if path == os.fsencode(db):
            stats.append(path)
        return real(path, dev, ino)

    monkeypatch.setattr(maps, "_sole_link", counted)
    m = _map(db, 8192)
    try:
        watched.snapshot("start")  # (a walk: it forgets what the scans learnt)
        watched.snapshot("patched")
        assert stats
        stated = len(stats)
        watched.snapshot("patched again")
        watched.snapshot("and again")
        assert len(stats) == stated
        os.link(db, root / "linked.db")
        m[:6] = b"first!"  # (the first write to the page: a new mtime)
        cp = watched.snapshot("linked")
        assert watched.read_bytes(cp.id, "linked.db")[:6] == b"first!"
        m[6:12] = b"second"  # the page is dirty already: no fault, no new mtime, no event
        cp = watched.snapshot("written again")
        assert watched.read_bytes(cp.id, "linked.db")[:12] == b"first!second"
        assert _same(plain, cp.id) == []
    finally:
        m.close()
        watched.close()
        plain.close()


@needs_proc_maps
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_s_scan_runs_in_a_thread_of_its_own(tmp_path: Path):
    """The scan's thread does not survive a fork: a child that scans with its parent's
    watcher starts a thread of its own instead of waiting for the parent's forever."""
    import signal

    from snapstore.tree.watcher import Watcher

    root = tmp_path / "t"
    build_tree(root, {"db.bin": bytes(4096)})
    watcher = Watcher(str(root))
    m = _map(root / "db.bin", 4096)
    try:
        watcher.begin_scan()
        assert watcher.mapped_for_write()[0] == {b"db.bin"}  # (the parent's thread)
        watcher.begin_scan()  # (and one begun, still to be taken, when the process forks)
        pid = os.fork()
        if pid == 0:  # the child: exits 0 once its scan is answered
            code = 1
            try:
                signal.alarm(20)
                code = 0 if watcher.mapped_for_write()[0] == {b"db.bin"} else 2
                watcher.begin_scan()
                code = code or (0 if watcher.mapped_for_write()[0] == {b"db.bin"} else 3)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert watcher.mapped_for_write()[0] == {b"db.bin"}  # (the parent's own, begun before)
    finally:
        m.close()
        watcher.close()
