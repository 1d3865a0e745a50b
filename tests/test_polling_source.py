"""The portable event source (snapstore.platform.polling): the events it makes by comparing, in
the watcher's vocabulary, and its racily-clean rule."""

from __future__ import annotations

import os
import time
from pathlib import Path

from snapstore.platform import eventbits as ev
from snapstore.platform.polling import FINE_NS, PollingSource
from snapstore.testing import build_tree

TICK = 2 * FINE_NS / 1e9


def settled(root: Path) -> tuple[PollingSource, int]:
    source = PollingSource()
    wd = source.add_watch(os.fsencode(root))
    time.sleep(TICK)
    source.read()
    source.read()  # (older than a tick now: nothing racy)
    return source, wd


def test_names_that_come_go_and_change_are_events(tmp_path: Path):
    build_tree(tmp_path, {"a": b"a", "b": b"b", "sub/c": b"c"})
    source, wd = settled(tmp_path)
    (tmp_path / "a").write_bytes(b"longer")
    os.unlink(tmp_path / "b")
    (tmp_path / "new").mkdir()
    got = set(source.read())
    assert {(wd, ev.MODIFIED, b"a"), (wd, ev.DELETED, b"b"), (wd, ev.CREATED | ev.IS_DIR, b"new")} <= got
    assert all(name != b"sub" for _, _, name in got)  # (a directory's own watch reports its content)


def test_a_name_made_and_removed_between_two_reads_names_the_directory(tmp_path: Path):
    """No entry differs, but the directory's mtime moved: a walk records an empty directory's,
    so the watcher must look at it again (seen with a checkpoint after such a pair of edits)."""
    (tmp_path / "empty").mkdir()
    source = PollingSource()
    wd = source.add_watch(os.fsencode(tmp_path / "empty"))
    time.sleep(TICK)
    assert source.read() == []
    (tmp_path / "empty" / "tmp").write_bytes(b"gone soon")
    os.unlink(tmp_path / "empty" / "tmp")
    assert source.read() == [(wd, ev.MODIFIED, b"")]
    assert source.read() == []


def test_an_entry_replaced_by_another_of_the_same_name_is_deleted_and_created(tmp_path: Path):
    build_tree(tmp_path, {"x": b"file"})
    source, wd = settled(tmp_path)
    os.unlink(tmp_path / "x")
    (tmp_path / "x").mkdir()
    assert source.read() == [(wd, ev.DELETED, b"x"), (wd, ev.CREATED | ev.IS_DIR, b"x")]


def test_a_watched_directory_that_goes_says_so_and_its_watch_ends(tmp_path: Path):
    (tmp_path / "d").mkdir()
    source = PollingSource()
    wd = source.add_watch(os.fsencode(tmp_path / "d"))
    assert source.add_watch(os.fsencode(tmp_path / "d")) == wd  # (watched already: the same watch)
    os.rmdir(tmp_path / "d")
    assert source.read() == [(wd, ev.DELETED_SELF, b""), (wd, ev.IGNORED, b"")]
    assert source.read() == []


def test_a_file_changed_within_a_tick_of_the_last_look_is_named_again(tmp_path: Path):
    # A same-size rewrite in the same timestamp tick as a look leaves nothing to compare: the
    # file is named at the next read anyway, and no longer once it is older than a tick.
    build_tree(tmp_path, {"racy": b"one"})
    source = PollingSource()
    wd = source.add_watch(os.fsencode(tmp_path))
    assert (wd, ev.MODIFIED, b"racy") in source.read()  # (written just now: racy)
    time.sleep(TICK)
    source.read()
    assert source.read() == []


def test_serve_status_says_which_source_and_how_mapped_files_are_seen(tmp_path: Path, monkeypatch):
    from snapstore.platform import SWITCH, linux
    from snapstore.store import Store

    build_tree(tmp_path, {"a": b"a"})
    Store.init(tmp_path).close()
    for mode, source, sees in (("", "inotify", True), ("portable", "polling", False)):
        monkeypatch.setenv(SWITCH, mode)
        if source == "inotify" and not linux():
            continue  # (not Linux: only the portable source is there)
        with Store.open(tmp_path, watch=True) as s:
            status = s.watch_status()
            assert status is not None
            assert (status["events_from"], status["sees_mappings"]) == (source, sees)
            assert status["mapped_files"].startswith("weaker") == (not sees)
