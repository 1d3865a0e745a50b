"""Restore at git's speed without losing a guarantee: what a fast restore must still do.

* the stat cache learns every file a restore wrote, so the next snapshot reads none back, and
  the write rule (statcache.written) never vouches for a file changed after the restore;
* durability is batched: one syncfs before the renames (no name points to unwritten data), one
  after (the names are durable before the journal is cleared), and the journal is durable
  before the first rename; without syncfs every temp file is fsynced;
* many files are written by a small thread pool;
* the safety checkpoint of an unchanged tree reads nothing.

Counts go through seams (snapshot_read._open, batch.syncfs, apply.rename, the backend's sync),
never timings.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from platform_marks import needs_syncfs
from restore_helpers import read_tree, write_tree

from snapstore.errors import ConflictError
from snapstore.ops.restore import apply as apply_mod
from snapstore.ops.restore import batch
from snapstore.ops.snapshot import read as snapshot_read
from snapstore.storage.backend import JOURNAL_KEY
from snapstore.store import Store
from snapstore.tree import statcache


def _spec(n: int, tag: bytes) -> dict[str, object]:
    spec: dict[str, object] = {f"d{i % 4}/f{i:02d}.txt": tag + b" %d\n" % i * (i + 1) for i in range(n)}
    spec["top.txt"] = tag
    return spec


@pytest.fixture
def two_states(tree: Path, store: Store):
    """Checkpoint A, then an edited tree B (rewrites, an addition, a deletion) checkpointed."""
    write_tree(tree, _spec(24, b"A"))
    store.snapshot("A", tags=["A"])
    after = read_tree(tree)
    write_tree(tree, _spec(20, b"B"))  # 20 rewritten, 4 left as in A
    (tree / "new/deep").mkdir(parents=True)
    (tree / "new/deep/added.txt").write_bytes(b"added\n")
    (tree / "top.txt").unlink()
    store.snapshot("B")
    return after


class _Opens:
    """Counts the files snapshots open to read (the snapshot_read._open seam)."""

    def __init__(self, monkeypatch) -> None:
        self.paths: list[bytes] = []
        real = snapshot_read._open

        def counting(root, rel, flags):
            self.paths.append(rel)
            return real(root, rel, flags)

        monkeypatch.setattr(snapshot_read, "_open", counting)


def _unvouched(tree: Path, paths: list[str]) -> int:
    """Files the write rule cannot vouch for on this file system (coarse timestamps)."""
    n = 0
    for p in paths:
        st = os.lstat(tree / p)
        n += not (st.st_ctime_ns > st.st_mtime_ns and st.st_mtime_ns % 1_000_000_000)
    return n


def test_next_snapshot_after_a_restore_reads_nothing(tree: Path, store: Store, two_states, monkeypatch):
    written = [p for p, v in two_states.items() if v[0] == "file" and p.startswith("d") and p < "d4"]
    written = [p for p in written if read_tree(tree).get(p) != two_states[p]] + ["top.txt"]
    # The files the restore leaves alone were written a moment ago by this test: racy by the
    # snapshot rule.  Without a margin the safety checkpoint settles them (restored files do not
    # depend on the margin: the write rule judges them).
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)
    store.restore("A")
    assert read_tree(tree) == two_states
    unvouched = _unvouched(tree, written)
    if unvouched == len(written):
        pytest.skip("this file system has no fine-grained timestamps: restored files are re-read")
    opens = _Opens(monkeypatch)
    cp = store.snapshot("after restore")
    assert len(opens.paths) == unvouched == 0
    assert cp.stats["files_read"] == 0
    # and what the cache vouched for is right: the checkpoint holds A's contents
    for p in written:
        assert store.read_bytes(cp.id, p) == two_states[p][1]


def test_a_file_changed_right_after_the_restore_is_read_again(tree: Path, store: Store, two_states, monkeypatch):
    store.restore("A")
    path = tree / "d1/f01.txt"
    old = path.read_bytes()
    new = bytes(b ^ 1 for b in old)  # same size, new content, written at once
    path.write_bytes(new)
    opens = _Opens(monkeypatch)
    cp = store.snapshot("after edit")
    assert b"d1/f01.txt" in opens.paths
    assert store.read_bytes(cp.id, "d1/f01.txt") == new


def _stat(mtime: int, ctime: int, size: int = 10, ino: int = 7) -> os.stat_result:
    fields = [0o100644, ino, 1, 1, 0, 0, size, mtime // 10**9, mtime // 10**9, ctime // 10**9]
    extra = {"st_atime_ns": mtime, "st_mtime_ns": mtime, "st_ctime_ns": ctime}
    return os.stat_result(fields, extra)


SID = bytes(range(32))
T = 1_700_000_000_123_456_789


def test_write_rule_vouches_only_for_settled_untouched_files():
    before = _stat(T, T)
    after = _stat(T, T + 4_000_000)  # renamed a tick after the last write
    value = statcache.written(before, after, SID)
    assert value is not None and statcache.lookup(value, after) == SID
    assert statcache.lookup(value, _stat(T + 4_000_000, T + 4_000_000)) is None  # written again
    # renamed in the tick of the last write: a later write could keep the mtime
    assert statcache.written(before, _stat(T, T), SID) is None
    # written by someone else between our last write and our look after the rename
    assert statcache.written(before, _stat(T + 1, T + 4_000_000), SID) is None
    assert statcache.written(before, _stat(T, T + 4_000_000, size=11), SID) is None
    assert statcache.written(before, _stat(T, T + 4_000_000, ino=8), SID) is None
    # whole-second timestamps (FAT, ext3): never vouched for
    whole = 1_700_000_000 * 10**9
    assert statcache.written(_stat(whole, whole), _stat(whole, whole + 10**9), SID) is None
    # a written entry whose times say "not settled" is not trusted, even if stored
    forged = statcache.encode(_stat(T, T), SID, statcache.WRITTEN)
    assert statcache.lookup(forged, _stat(T, T)) is None


# -- durability ---------------------------------------------------------------------------------


def _events(monkeypatch, store: Store) -> list[str]:
    events: list[str] = []
    real_syncfs, real_rename = batch.syncfs, apply_mod.rename
    env = store.backend._shared  # type: ignore[attr-defined]
    real_flush = env.flush
    assert real_syncfs is not None, "this platform has syncfs (Linux)"

    def syncfs(fd):
        # (only this tree's: another test's Store may settle a restore of its own meanwhile)
        if os.readlink(f"/proc/self/fd/{fd}").startswith(store.root):
            events.append("syncfs")
        real_syncfs(fd)

    def rename(tmp, name, dir_fd):
        events.append("rename")
        real_rename(tmp, name, dir_fd)

    def flush():  # the store's meta page synced now (LMDB's data pages sync with each commit)
        with store.backend.read() as view:
            journaled = view.get("journal", JOURNAL_KEY) is not None
        real_flush()
        events.append("store-sync:journal" if journaled else "store-sync")

    monkeypatch.setattr(batch, "syncfs", syncfs)
    monkeypatch.setattr(apply_mod, "rename", rename)
    monkeypatch.setattr(env, "flush", flush)
    monkeypatch.setattr(env, "flush_later", lambda: events.append("store-sync-later"))
    return events


@needs_syncfs
@pytest.mark.parametrize("durability", ["full"])
def test_restore_syncs_twice_and_in_the_journal_protocols_order(
    tree: Path, store: Store, two_states, monkeypatch, durability: str
):
    store.backend.set_durability(durability)  # type: ignore[attr-defined]
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    events = _events(monkeypatch, store)
    store.restore("A")
    assert read_tree(tree) == two_states
    first, last = events.index("rename"), len(events) - 1 - events[::-1].index("rename")
    assert events.count("rename") == 21  # 20 rewritten + top.txt
    # the safety checkpoint and the journal are durable (one sync of the store, whatever the
    # setting) before the first rename, then one syncfs (the data) before it
    assert events[:first] == ["store-sync:journal", "syncfs"]
    assert events[first:last + 1] == ["rename"] * 21
    # one syncfs after the renames; the journal is cleared (not synced: a replay would find the
    # tree done), then the hidden record of the tree after the restore is synced as the
    # setting says (both with it)
    assert events[last + 1:] == ["syncfs", "store-sync" if durability == "full" else "store-sync-later"]
    assert fsyncs == []  # no per-file (or per-directory) fsync


@needs_syncfs
def test_normal_restore_leaves_its_syncfs_to_the_tree_flusher_and_keeps_the_journal_until_then(
    tree: Path, store: Store, two_states, monkeypatch
):
    """Under ``normal`` a watching Store's restore syncs the store before the first rename (the
    user's bytes), makes no ``syncfs`` inline, and the journal stays marked applied until one ``syncfs``
    made by the tree flusher (ops/restore/settle.py) is done."""
    import time

    from snapstore.ops.restore import journal, settle

    store.backend.set_durability("normal")  # type: ignore[attr-defined]
    store.watch()  # (a long-lived Store's: a plain one, a CLI's, syncs inline)
    events = _events(monkeypatch, store)
    store.restore("A")
    assert read_tree(tree) == two_states
    first = events.index("rename")
    assert events[:first] == ["store-sync:journal"]
    assert "syncfs" not in events  # none inline
    with store.backend.read() as view:
        kept = journal.read(view)
    assert kept is not None and kept.applied is not None and kept.boot is not None
    assert store.pending_restore() is None  # done: nothing for a reader to warn of
    deadline = time.monotonic() + settle.DELAY + 5
    while time.monotonic() < deadline:
        with store.backend.read() as view:
            if view.get("journal", JOURNAL_KEY) is None:
                break
        time.sleep(0.02)
    assert events.count("syncfs") == 1  # one, later
    with store.backend.read() as view:
        assert view.get("journal", JOURNAL_KEY) is None


@needs_syncfs
def test_the_next_restore_syncs_an_applied_one_before_it_journals_its_own(tree: Path, store: Store, two_states,
                                                                          monkeypatch):
    """A restore right after another (within the tree flusher's delay) needs the journal's key:
    the first one's ``syncfs`` is made, and its journal cleared, before the second's journal."""
    store.backend.set_durability("normal")  # type: ignore[attr-defined]
    store.watch()
    before_restore = read_tree(tree)
    events = _events(monkeypatch, store)
    store.restore("A")
    assert "syncfs" not in events
    n = len(events)
    store.undo()
    assert read_tree(tree) == before_restore
    assert events[n:].index("syncfs") < events[n:].index("store-sync:journal")
    assert events[n:events.index("syncfs", n)].count("store-sync:journal") == 0


@pytest.mark.parametrize("missing", ["seam", "libc", "masked"])
def test_without_syncfs_every_file_is_fsynced_before_its_rename(
    tree: Path, store: Store, two_states, monkeypatch, missing: str
):
    events: list[str] = []
    real_fsync, real_rename = os.fsync, apply_mod.rename
    if missing == "seam":
        monkeypatch.setattr(batch, "syncfs", None)
    elif missing == "libc":  # a C library without syncfs (not Linux)
        from snapstore.platform import sync

        monkeypatch.setattr(sync, "_looked_up", {False: None})
    else:  # the Linux facilities masked (SNAPSTORE_PLATFORM=portable)
        monkeypatch.setenv("SNAPSTORE_PLATFORM", "portable")
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(apply_mod, "rename", lambda *a: (events.append("rename"), real_rename(*a))[1])
    store.restore("A")
    assert read_tree(tree) == two_states
    first = events.index("rename")
    assert events[:first].count("fsync") == 21  # each new file's data
    assert events[first:].count("fsync") >= 1  # then the directories written


def test_many_files_are_written_by_a_thread_pool(tree: Path, store: Store, two_states, monkeypatch):
    threads: set[str] = set()
    real_write = apply_mod.write

    def write(fd, data):
        threads.add(threading.current_thread().name)
        return real_write(fd, data)

    monkeypatch.setattr(apply_mod, "write", write)
    store.restore("A")
    assert read_tree(tree) == two_states
    assert threads and all(name.startswith("snapstore-restore") for name in threads)


# -- the safety checkpoint ----------------------------------------------------------------------


def test_safety_checkpoint_of_an_unchanged_tree_reads_nothing(tree: Path, store: Store, two_states, monkeypatch):
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)  # B's files count as settled at once
    store.snapshot("B again")  # the cache now vouches for every file of B
    opens = _Opens(monkeypatch)
    store.restore("A")
    assert opens.paths == []  # the safety checkpoint trusted the stat cache
    assert read_tree(tree) == two_states


def test_safety_checkpoint_reads_only_what_changed(tree: Path, store: Store, two_states, monkeypatch):
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)
    store.snapshot("B again")
    (tree / "d2/f02.txt").write_bytes(b"edited after B\n")
    opens = _Opens(monkeypatch)
    report = store.restore("A")
    assert opens.paths == [b"d2/f02.txt"]
    assert store.read_bytes(report.safety.id, "d2/f02.txt") == b"edited after B\n"


# -- crashes between the batched phases ----------------------------------------------------------

CHILD = r"""
import os, sys
from snapstore.ops.restore import batch
from snapstore.store import Store
kill_at = int(sys.argv[1])
real, calls = batch.syncfs, [0]
def syncfs(fd):
    real(fd)
    calls[0] += 1
    if calls[0] == kill_at:
        os.kill(os.getpid(), 9)
batch.syncfs = syncfs
Store.open(".", durability="full").restore("A")  # (the inline syncs: normal defers them)
"""


@needs_syncfs
@pytest.mark.parametrize("kill_at", [1, 2])
def test_killed_right_after_a_syncfs_is_finished_by_recover(tree: Path, store: Store, two_states, kill_at: int):
    """SIGKILL after the first syncfs (temp files durable, nothing renamed) or the second (all
    renamed, the journal not yet cleared): the next writer finishes the restore."""
    _kill_then_recover_and_undo(tree, store, CHILD, kill_at, two_states)


@needs_syncfs
def test_a_large_restore_is_staged_synced_and_renamed_in_bounded_groups(tree: Path, store: Store, two_states, monkeypatch):
    monkeypatch.setattr(batch, "GROUP_BYTES", 1)  # every file is a group of its own
    store.backend.set_durability("full")  # type: ignore[attr-defined]
    events = _events(monkeypatch, store)
    store.restore("A")
    assert read_tree(tree) == two_states
    first = events.index("syncfs")
    assert events[first:] == ["syncfs", "rename"] * 21 + ["syncfs", "store-sync"]
    assert not list(tree.rglob(".snapstore-tmp.*"))


def test_files_are_written_from_the_chunks_verified_before_the_journal(tree: Path, store: Store, two_states, monkeypatch):
    """Every chunk is read, decompressed and re-hashed once (before the journal), not again
    when its file is written."""
    def no_second_read(get, sid):
        raise AssertionError("a stream was read again to be written")

    monkeypatch.setattr(apply_mod.objects, "iter_stream", no_second_read)
    real_verify = sys.modules["snapstore.ops.restore"].verify_sources

    def verify(get, target, steps, reader=None):
        monkeypatch.undo()  # verification reads for real
        kept = real_verify(get, target, steps, reader)
        monkeypatch.setattr(apply_mod.objects, "iter_stream", no_second_read)
        return kept

    monkeypatch.setattr(sys.modules["snapstore.ops.restore"], "verify_sources", verify)
    store.restore("A")
    assert read_tree(tree) == two_states


@needs_syncfs
def test_replaced_files_are_gone_before_the_data_sync(tree: Path, store: Store, two_states, monkeypatch):
    """A replaced file is unlinked before the sync of the new data, so the sync never writes
    (and the rename never frees, with a discard) an old file about to go."""
    seen: list[bool] = []
    store.backend.set_durability("full")  # type: ignore[attr-defined]  # (the inline syncs)
    real_syncfs = batch.syncfs
    assert real_syncfs is not None

    def syncfs(fd):
        seen.append((tree / "d0/f00.txt").exists())
        real_syncfs(fd)

    monkeypatch.setattr(batch, "syncfs", syncfs)
    store.restore("A")
    assert seen[0] is False  # at the first sync, d0/f00.txt (rewritten by the restore) is absent
    assert read_tree(tree) == two_states


@needs_syncfs
def test_a_file_put_at_a_cleared_path_is_kept_and_the_restore_rolled_back(tree: Path, store: Store, two_states,
                                                                         monkeypatch):
    before = read_tree(tree)
    store.backend.set_durability("full")  # type: ignore[attr-defined]  # (the inline syncs)
    real_syncfs = batch.syncfs
    assert real_syncfs is not None
    calls: list[int] = []

    def syncfs(fd):
        calls.append(fd)
        if len(calls) == 1:  # someone writes d0/f00.txt while it is absent, before the renames
            (tree / "d0/f00.txt").write_bytes(b"the user's own\n")
        real_syncfs(fd)

    monkeypatch.setattr(batch, "syncfs", syncfs)
    with pytest.raises(ConflictError, match="d0/f00.txt"):
        store.restore("A")
    monkeypatch.setattr(batch, "syncfs", real_syncfs)
    after = read_tree(tree)
    assert after["d0/f00.txt"] == ("file", b"the user's own\n", False)  # never overwritten
    del after["d0/f00.txt"], before["d0/f00.txt"]
    assert after == before  # every other path rolled back
    assert store.pending_restore() is None
    assert not list(tree.rglob(".snapstore-tmp.*"))


# -- the replaced files: set aside at once, unlinked together --------------------------------------


@needs_syncfs
def test_replaced_files_are_unlinked_by_the_pool_before_the_data_sync(tree: Path, store: Store, two_states,
                                                                      monkeypatch):
    """Freeing a file whose data reached the disk waits on the disk (a discard on this machine's
    file system): the replaced files are unlinked by the restore's thread pool, each under the
    temp name it was renamed to right after its check, all before the data sync."""
    events: list[tuple[str, str, bytes]] = []
    store.backend.set_durability("full")  # type: ignore[attr-defined]  # (the inline syncs)
    real_unlink, real_syncfs = apply_mod.unlink, batch.syncfs
    assert real_syncfs is not None

    def unlink(name, dir_fd):
        events.append(("unlink", threading.current_thread().name, name))
        real_unlink(name, dir_fd)

    def syncfs(fd):
        events.append(("syncfs", "", b""))
        real_syncfs(fd)

    monkeypatch.setattr(apply_mod, "unlink", unlink)
    monkeypatch.setattr(batch, "syncfs", syncfs)
    store.restore("A")
    assert read_tree(tree) == two_states
    first_sync = [e[0] for e in events].index("syncfs")
    unlinks = [e for e in events if e[0] == "unlink"]
    assert len(unlinks) == 21  # the 20 files B rewrote and the file B added (top.txt is new again)
    assert all(e in events[:first_sync] for e in unlinks)
    assert all(name.startswith(apply_mod.TMP_PREFIX) for _, _, name in unlinks)  # set aside first
    # the 20 replaced files by the pool (the one deletion alone, in the calling thread)
    assert sum(thread.startswith("snapstore-restore") for _, thread, _ in unlinks) == 20


SET_ASIDE_CHILD = r"""
import os, sys
from snapstore.ops.restore import apply
from snapstore.store import Store
kill_at = int(sys.argv[1])
real, calls = apply.unlink, [0]
def unlink(name, dir_fd):
    calls[0] += 1
    if calls[0] == kill_at:
        os.kill(os.getpid(), 9)
    real(name, dir_fd)
apply.unlink = unlink
Store.open(".", durability="full").restore("A")  # (the inline syncs: normal defers them)
"""


@needs_syncfs
@pytest.mark.parametrize("kill_at", [1, 10, 20])
def test_killed_while_replaced_files_are_set_aside_is_finished_and_undoable(
    tree: Path, store: Store, two_states, kill_at: int
):
    """SIGKILL while the replaced files lie under temp names (none, some or all but one
    unlinked): the next writer finishes the restore, no temp file is left, and undo gives back
    the tree as it was before the restore."""
    _kill_then_recover_and_undo(tree, store, SET_ASIDE_CHILD, kill_at, two_states)


def _kill_then_recover_and_undo(tree: Path, store: Store, child: str, kill_at: int, target: dict) -> None:
    """A restore to A in a ``child`` process that SIGKILLs itself at its ``kill_at``-th seam
    call: the next writer finishes it (the tree is ``target``, no temp name left) and undo
    gives back the tree as it was before."""
    before = read_tree(tree)
    store.close()
    proc = subprocess.run([sys.executable, "-c", child, str(kill_at)], cwd=tree, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with Store.open(tree) as again:
        assert again.pending_restore() is not None
        assert again.recover().pending
        assert read_tree(tree) == target
        assert not list(tree.rglob(".snapstore-tmp.*"))
        again.undo()
        assert read_tree(tree) == before
        assert again.verify().ok


@needs_syncfs
def test_a_file_changed_while_others_are_set_aside_is_kept_and_the_restore_rolled_back(
    tree: Path, store: Store, two_states, monkeypatch
):
    """The user's edit to a file about to be replaced, found at its check while the files
    checked before it lie under temp names: the restore stops there (the edit is never
    unlinked), the files set aside get their own inodes back, and no temp name is left."""
    from snapstore.ops import restore as restore_mod

    before = read_tree(tree)
    inode = os.lstat(tree / "d0/f00.txt").st_ino  # set aside first, before the edit is found
    unlinked: list[bytes] = []
    real_unlink = apply_mod.unlink

    def hook(i: int) -> None:  # the first step (a removal): d3/f19.txt, cleared last, is edited
        if not (tree / "d3/f19.txt").read_bytes().startswith(b"the user's"):
            (tree / "d3/f19.txt").write_bytes(b"the user's edit\n")

    monkeypatch.setattr(restore_mod, "step_hook", hook)
    monkeypatch.setattr(apply_mod, "unlink", lambda name, fd: (unlinked.append(name), real_unlink(name, fd)))
    _edit_kept_and_rolled_back(tree, store, before, "d3/f19.txt", ("d0/f00.txt", inode))
    # only the file B added was unlinked (its deletion came first): no replaced file set aside
    assert len([n for n in unlinked if n.startswith(apply_mod.TMP_PREFIX)]) == 1


def _edit_kept_and_rolled_back(tree: Path, store: Store, before: dict, edited: str, kept: tuple[str, int]) -> None:
    """A restore to A fails naming ``edited`` (the user's edit, kept); every other path is as
    ``before``; the file ``kept[0]`` set aside before the failure has its inode ``kept[1]`` back
    (not rewritten); no journal and no temp name is left."""
    with pytest.raises(ConflictError, match=edited):
        store.restore("A")
    after = read_tree(tree)
    assert after[edited] == ("file", b"the user's edit\n", False)
    del after[edited], before[edited]
    assert after == before
    assert os.lstat(tree / kept[0]).st_ino == kept[1]  # put back, not rewritten
    assert store.pending_restore() is None
    assert not list(tree.rglob(".snapstore-tmp.*"))


@pytest.fixture
def many_added(tree: Path, store: Store):
    """Checkpoint A, then B with 12 files added in a new directory (and one in the root)."""
    write_tree(tree, {"keep.txt": b"kept\n"})
    store.snapshot("A", tags=["A"])
    a = read_tree(tree)
    (tree / "added").mkdir()
    for n in range(12):
        (tree / f"added/f{n:02d}.txt").write_bytes(b"added %d\n" % n)
    (tree / "loose.txt").write_bytes(b"loose\n")
    store.snapshot("B")
    return a


def test_deleted_files_are_unlinked_together_by_the_pool(tree: Path, store: Store, many_added, monkeypatch):
    unlinked: list[tuple[str, bytes]] = []
    real_unlink = apply_mod.unlink
    monkeypatch.setattr(apply_mod, "unlink", lambda name, fd: (
        unlinked.append((threading.current_thread().name, name)), real_unlink(name, fd)))
    store.restore("A")
    assert read_tree(tree) == many_added  # the files and their directory are gone
    assert len(unlinked) == 13
    assert all(name.startswith(apply_mod.TMP_PREFIX) for _, name in unlinked)
    assert all(thread.startswith("snapstore-restore") for thread, _ in unlinked)
    store.undo()
    assert (tree / "added/f11.txt").read_bytes() == b"added 11\n"


@pytest.mark.parametrize("kill_at", [1, 7])
def test_killed_while_deleted_files_are_set_aside_is_finished_and_undoable(
    tree: Path, store: Store, many_added, kill_at: int
):
    _kill_then_recover_and_undo(tree, store, SET_ASIDE_CHILD, kill_at, many_added)


def test_a_file_edited_while_deleted_files_are_set_aside_is_kept(tree: Path, store: Store, many_added, monkeypatch):
    from snapstore.ops import restore as restore_mod

    before = read_tree(tree)
    inode = os.lstat(tree / "added/f00.txt").st_ino
    calls: list[int] = []

    def hook(i: int) -> None:  # at the first step, added/f11.txt (set aside later) is edited
        calls.append(i)
        if len(calls) == 1:
            (tree / "added/f11.txt").write_bytes(b"the user's edit\n")

    monkeypatch.setattr(restore_mod, "step_hook", hook)
    _edit_kept_and_rolled_back(tree, store, before, "added/f11.txt", ("added/f00.txt", inode))
