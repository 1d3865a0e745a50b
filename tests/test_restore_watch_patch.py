"""A watching Store (the service) patches its kept tree state from the restore's own steps.

After a restore the watcher's state (what the walk found, each directory's listing) must be what
a full walk of the tree finds, and the record after the restore must not list again the
directories the restore wrote into when the restore's steps say what they hold now.  Counts go
through seams (``scan.scan_dir``, ``scan.walk``), never timings.
"""

from __future__ import annotations

import mmap
import os
import random
import shutil
import time
from pathlib import Path

import pytest
from helpers import assert_state_is_a_walk as _assert_state_is_a_walk
from platform_marks import needs_inotify, needs_proc_maps
from restore_helpers import read_tree, write_tree

from snapstore.store import Store
from snapstore.tree import scan, statcache

pytest.importorskip("inotify_simple")


def _lay(root: Path, spec: dict[str, object]) -> None:
    """Make the tree exactly ``spec`` (the store's directory kept)."""
    for p in root.iterdir():
        if p.name == ".snapstore":
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    write_tree(root, spec)


class _Listed:
    """Counts directories listed (by walks and by the watcher's patches)."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        real = scan.scan_dir

        def counting(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(scan, "scan_dir", counting)


def _files(tag: bytes, n: int, rng: random.Random | None = None) -> dict[str, object]:
    spec: dict[str, object] = {f"d{i % 5}/f{i:03d}.txt": tag + b" %d\n" % i for i in range(n)}
    spec |= {f"d{d}/keep.txt": b"kept\n" for d in range(5)}  # every directory stays non-empty
    if rng is not None:
        for path in rng.sample(sorted(spec), len(spec) // 3):
            if not path.endswith("keep.txt"):
                del spec[path]
    return spec


@pytest.fixture
def watching(tree: Path, monkeypatch):
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)
    with Store.init(tree):
        pass
    s = Store.open(tree, watch=True)
    try:
        yield s
    finally:
        s.close()


def test_a_restore_that_creates_and_deletes_files_lists_no_directory_again(tree: Path, watching, monkeypatch):
    """Files rewritten, created and deleted in directories that stay: the record after the
    restore takes the watcher's state as the restore patched it, with no listing."""
    store = watching
    _lay(tree, _files(b"A", 60))
    store.snapshot("A", tags=["A"])
    a = read_tree(tree)
    _lay(tree, _files(b"B", 80, random.Random(1)))  # rewrites, deletions, new files
    store.snapshot("B", tags=["B"])
    b = read_tree(tree)
    listed = _Listed(monkeypatch)
    store.restore("A")
    assert read_tree(tree) == a
    assert listed.n == 0
    _assert_state_is_a_walk(store, tree)  # (its walk lists every directory)
    listed.n = 0
    store.restore("B")
    assert read_tree(tree) == b
    assert listed.n == 0
    _assert_state_is_a_walk(store, tree)
    with Store.open(tree) as plain:
        assert plain.diff(store.checkpoints(include_safety=True)[0].id) == []


def _random_tree(rng: random.Random, i: int, stable: bool) -> dict[str, object]:
    """Files in a few directories, some nested, some directories appearing or going (unless
    ``stable``), a symlink now and then, an executable, an ignore file and what it ignores:
    every kind of step a restore makes."""
    spec: dict[str, object] = {}
    names = ["a", "b", "c", "a/x", "a/x/y", "e"]
    for d in names if stable else rng.sample(names, rng.randint(1, 5)):
        if stable:
            spec[f"{d}/keep.txt"] = b"kept\n"
        for k in range(rng.randint(0, 4)):
            spec[f"{d}/f{k}.txt"] = b"%d %d\n" % (i, rng.randint(0, 2))
    if rng.random() < 0.3:
        spec[".gitignore"] = b"*.log\n"
    if rng.random() < 0.3:
        spec["a/x.log"] = b"log %d\n" % i
    if rng.random() < 0.3:
        spec["link"] = ("link", f"target{rng.randint(0, 2)}")
    if rng.random() < 0.3:
        spec["run.sh"] = ("exec", b"#!/bin/sh\n")
    if rng.random() < 0.2:
        spec["empty"] = None
    return spec


@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_after_random_restores_the_watchers_state_is_a_walk(tree: Path, watching, seed: int, stable: bool):
    rng = random.Random(seed)
    store = watching
    ids = []
    for i in range(6):
        _lay(tree, _random_tree(rng, i, stable))
        ids.append(store.snapshot(f"state {i}").id)
    for _ in range(12):
        target = rng.choice(ids)
        store.restore(target)
        _assert_state_is_a_walk(store, tree)
        with Store.open(tree) as plain:  # (not diff(target): a restore leaves ignored files be)
            assert plain.diff(store.checkpoints(include_safety=True)[0].id) == []


def test_the_stat_cache_forgets_the_files_a_restore_deleted(tree: Path, watching):
    """The exact patch lists nothing, so no listing reports the deleted files gone: the
    restore's own commit drops their stat-cache values (none is left behind for ever)."""
    store = watching
    _lay(tree, _files(b"A", 30))
    store.snapshot("A", tags=["A"])
    _lay(tree, _files(b"B", 40))  # ten more files, which A does not have
    store.snapshot("B")
    extra = [f"d{i % 5}/f{i:03d}.txt".encode() for i in range(30, 40)]
    with store.backend.read() as view:
        assert all(view.get("statcache", statcache.key(p)) is not None for p in extra)
    store.restore("A")
    store.snapshot("after", skip_unchanged=True)
    with store.backend.read() as view:
        assert [p for p in extra if view.get("statcache", statcache.key(p)) is not None] == []


# -- the shared-mapping scan: the safety checkpoint's serves the record after ---------------------


class _Scans:
    """Counts the watcher's scans for files mapped shared and writable."""

    def __init__(self, store: Store, monkeypatch) -> None:
        self.n = 0
        watcher = store.context.watcher
        assert watcher is not None
        real = watcher.mapped_for_write

        def counting():
            self.n += 1
            return real()

        monkeypatch.setattr(watcher, "mapped_for_write", counting)


def _two_states(store: Store, tree: Path) -> None:
    """Checkpoints A and B, both with the same db.bin (a restore between them leaves it be)."""
    _lay(tree, _files(b"A", 30) | {"db.bin": bytes(8192)})
    store.snapshot("A", tags=["A"])
    _lay(tree, _files(b"B", 40, random.Random(2)) | {"db.bin": bytes(8192)})
    store.snapshot("B", tags=["B"])


@needs_proc_maps
def test_the_record_after_a_restore_takes_the_safety_checkpoints_mapping_scan(tree: Path, watching, monkeypatch):
    """Nothing but the restore's own events since the safety checkpoint scanned the mappings
    (under the same writer lock): the record after scans none again."""
    store = watching
    _two_states(store, tree)
    scans = _Scans(store, monkeypatch)
    store.restore("A")
    assert scans.n == 1  # the safety checkpoint's
    store.snapshot("next", skip_unchanged=True)
    assert scans.n == 2  # every checkpoint after scans again


def test_another_process_working_during_the_restore_makes_the_record_after_scan(tree: Path, watching, monkeypatch):
    from snapstore.ops import restore as restore_mod

    store = watching
    _two_states(store, tree)
    scans = _Scans(store, monkeypatch)

    def meddle(i: int) -> None:
        if i == 0:
            (tree / "d0/keep.txt").write_bytes(b"someone else\n")

    monkeypatch.setattr(restore_mod, "step_hook", meddle)
    store.restore("A")
    assert scans.n == 2
    latest = store.checkpoints(include_safety=True)[0]
    assert store.read_bytes(latest.id, "d0/keep.txt") == b"someone else\n"


@needs_proc_maps
@pytest.mark.parametrize("unmap", [False, True])
def test_a_file_mapped_during_a_restore_is_in_the_next_checkpoint(tree: Path, watching, monkeypatch, unmap: bool):
    """Mapped shared and writable while the restore ran (after the safety checkpoint's scan)
    and written through the mapping: the next checkpoint has the writes, whether the file is
    still mapped then (its scan finds it) or was unmapped (its IN_CLOSE_WRITE names it)."""
    from snapstore.ops import restore as restore_mod

    store = watching
    _two_states(store, tree)
    held: list[mmap.mmap] = []

    def meddle(i: int) -> None:
        if i == 0:
            fd = os.open(tree / "db.bin", os.O_RDWR)
            held.append(mmap.mmap(fd, 8192))
            os.close(fd)  # (no event until the mapping goes)
            time.sleep(0.02)  # a later clock tick
            held[0][0:4] = b"w1!!"
            held[0].flush()

    monkeypatch.setattr(restore_mod, "step_hook", meddle)
    try:
        store.restore("A")
        monkeypatch.setattr(restore_mod, "step_hook", None)
        time.sleep(0.02)
        held[0][100:104] = b"w2!!"
        held[0].flush()
        if unmap:
            held.pop().close()
        cp = store.snapshot("after the mapped writes")
        data = store.read_bytes(cp.id, "db.bin")
        assert (data[0:4], data[100:104]) == (b"w1!!", b"w2!!")
        with Store.open(tree) as plain:
            assert plain.diff(cp.id) == []
    finally:
        for m in held:
            m.close()


@needs_proc_maps
def test_a_file_mapped_at_the_safety_checkpoint_is_read_again_by_the_record_after(tree: Path, watching, monkeypatch):
    """Mapped before the restore and written through the mapping while it ran (no event, maybe
    no new mtime): the record after reads it again, and so does the next checkpoint."""
    from snapstore.ops import restore as restore_mod

    store = watching
    _two_states(store, tree)
    fd = os.open(tree / "db.bin", os.O_RDWR)
    m = mmap.mmap(fd, 8192)
    os.close(fd)
    m[0:4] = bytes(4)  # its content as A has it (the restore leaves it be), its page dirty
    m.flush()

    def meddle(i: int) -> None:
        if i == 0:
            m[0:4] = b"w1!!"  # (the page is dirty already: the mtime may stay)
            m.flush()

    monkeypatch.setattr(restore_mod, "step_hook", meddle)
    try:
        store.restore("A")
    finally:
        monkeypatch.setattr(restore_mod, "step_hook", None)
    try:
        latest = store.checkpoints(include_safety=True)[0]
        assert store.read_bytes(latest.id, "db.bin")[0:4] == b"w1!!"
        m[0:4] = b"w2!!"
        m.flush()
        cp = store.snapshot("after")
        assert store.read_bytes(cp.id, "db.bin")[0:4] == b"w2!!"
    finally:
        m.close()


@needs_inotify
def test_a_restore_that_removes_directories_lists_none_again(tree: Path, watching, monkeypatch):
    """A directory (with a subdirectory) whose files the target does not have, and an empty
    directory the target does not keep: the restore removes them and the state forgets them,
    listing nothing; a directory that keeps an ignored file stays, and is listed again."""
    store = watching
    base = _files(b"A", 20) | {".gitignore": b"*.log\n"}
    _lay(tree, base)
    store.snapshot("A", tags=["A"])
    _lay(tree, base | {"gone/f.txt": b"f\n", "gone/sub/g.txt": b"g\n", "empty": None, "d1/more.txt": b"m\n"})
    store.snapshot("B", tags=["B"])
    listed = _Listed(monkeypatch)
    store.restore("A")
    assert not (tree / "gone").exists() and not (tree / "empty").exists()
    assert listed.n == 0
    _assert_state_is_a_walk(store, tree)
    listed.n = 0
    store.restore("B")  # (directories made: the fallback lists them)
    _assert_state_is_a_walk(store, tree)
    (tree / "gone/sub/keep.log").write_bytes(b"ignored\n")
    store.snapshot("B with an ignored file")
    listed.n = 0
    store.restore("A")
    assert (tree / "gone/sub/keep.log").exists()
    assert listed.n > 0  # gone/sub is still there: listed again
    _assert_state_is_a_walk(store, tree)
    with Store.open(tree) as plain:
        assert plain.diff(store.checkpoints(include_safety=True)[0].id) == []
