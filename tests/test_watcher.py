"""The inotify watcher: the changes it reports, and when it says "walk everything"."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from platform_marks import needs_inotify

from snapstore.platform import polling
from snapstore.testing import build_tree

watcher_mod = pytest.importorskip("snapstore.tree.watcher")


def past_a_tick() -> None:
    """Wait out the polling source's racy window (snapstore.platform.polling): a file written
    within a timestamp tick of a look is named again at the next one, by design."""
    time.sleep(2 * polling.FINE_NS / 1e9)


@pytest.fixture
def watched(tmp_path: Path):
    root = tmp_path / "t"
    build_tree(root, {"a.txt": b"a", "src/b.py": b"b", "src/deep/c": b"c", ".git/HEAD": b"ref"})
    past_a_tick()
    w = watcher_mod.Watcher(str(root), consistency_interval=3600)
    w.watch_tree()
    first = w.take()
    assert first.full and first.reason == "start"
    yield root, w
    w.close()


def test_edits_creations_and_deletions_are_reported(watched):
    root, w = watched
    (root / "a.txt").write_bytes(b"changed")
    (root / "src" / "new.py").write_bytes(b"new")
    os.unlink(root / "src" / "deep" / "c")
    past_a_tick()
    changes = w.take()
    assert not changes.full
    assert {b"a.txt", b"src/new.py", b"src/deep/c"} <= changes.paths
    assert {b"src", b"src/deep"} <= changes.dirs
    assert w.take().paths == set()  # taken once


def test_a_new_directory_is_watched_and_walked(watched):
    root, w = watched
    (root / "pkg" / "sub").mkdir(parents=True)
    w.take()  # the creation: pkg is a new subtree
    (root / "pkg" / "sub" / "x.py").write_bytes(b"x")
    changes = w.take()
    assert b"pkg/sub/x.py" in changes.paths  # the new directory's directory is watched too


def test_renames_report_both_sides(watched):
    root, w = watched
    os.rename(root / "src" / "b.py", root / "b2.py")
    changes = w.take()
    assert {b"src/b.py", b"b2.py"} <= changes.paths
    assert {b"src", b""} <= changes.dirs


def test_git_and_excluded_paths_are_not_watched(watched):
    root, w = watched
    (root / ".git" / "HEAD").write_bytes(b"other")
    assert w.take().paths == set()


@needs_inotify
def test_overflow_asks_for_a_full_walk(tmp_path: Path):
    root = tmp_path / "t"
    build_tree(root, {"a": b"a", "b": b"b"})
    w = watcher_mod.Watcher(str(root), consistency_interval=3600)
    w.watch_tree()
    w.take()
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        pytest.skip("the event queue is too large to overflow quickly here")
    # Alternate two files: the kernel merges identical consecutive events.
    fds = [os.open(root / name, os.O_WRONLY) for name in ("a", "b")]
    try:
        for i in range(limit + 10):
            os.write(fds[i % 2], b"x")
    finally:
        for fd in fds:
            os.close(fd)
    changes = w.take()
    assert changes.full and changes.reason == "event queue overflow"
    assert w.overflows >= 1
    w.close()


def test_a_refused_watch_makes_its_directory_blind_until_a_retry_succeeds(watched, monkeypatch):
    root, w = watched
    real = w._source.add_watch

    def refuse(path: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(w._source, "add_watch", refuse)
    (root / "newdir" / "inner").mkdir(parents=True)
    for _ in range(3):  # every take names it again, with everything below it unwatched
        changes = w.take()
        assert not changes.full
        assert changes.blind == {b"newdir"}
        assert "walking those 1 unwatched directories" in w.status()["mode"]
    assert w.watch_failures >= 3 and w.status()["blind_dirs"] == 1
    monkeypatch.setattr(w._source, "add_watch", real)
    changes = w.take()  # retried: watched now, and walked this once more
    assert changes.blind == {b"newdir"} and not w.blind
    (root / "newdir" / "inner" / "x").write_bytes(b"x")
    changes = w.take()
    assert not changes.blind and b"newdir/inner/x" in changes.paths  # its events arrive


def test_periodic_consistency_check(watched):
    _, w = watched
    w.consistency_interval = 0
    assert w.take().reason == "periodic consistency check"


def test_unreliable_file_systems_are_named():
    from snapstore.platform import inotify

    assert inotify.UNRELIABLE_FS[0x6969] == "nfs"
    assert watcher_mod.watchable("/") is None or "gives no reliable" in watcher_mod.watchable("/")
