"""The kernel's answers about shared writable mappings (``PROCMAP_QUERY``, snapstore.platform.procmap).

Where the kernel answers (Linux 6.11+), a look asks every process for its shared writable file
mappings with one call on a held ``/proc/PID/maps`` file: no maps text is read, however busy a
process is (with the fingerprints of tests/test_mapped_cache.py a busy process, this one, had
its whole maps read at every look), kernel threads cost no ``/proc`` read at all, and a write
through a mapping another process made since the last checkpoint is in the next one."""

from __future__ import annotations

import contextlib
import mmap
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import proc_files_opened
from platform_marks import needs_proc_maps

from snapstore.platform import procmap
from snapstore.platform.maps import MapsCache, mapped_for_write
from snapstore.store import Store
from snapstore.testing import build_tree

pytestmark = [
    needs_proc_maps,
    pytest.mark.skipif(not procmap.supported(), reason="the kernel does not answer PROCMAP_QUERY (before Linux 6.11)"),
]


def _map(path: Path, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size)  # (MAP_SHARED, writable)
    finally:
        os.close(fd)


def _kernel_threads() -> list[bytes]:
    """The pids of the kernel threads this process sees (``PF_KTHREAD`` in /proc/PID/stat)."""
    out = []
    for pid in os.listdir(b"/proc"):
        try:
            data = Path(f"/proc/{pid.decode()}/stat").read_bytes() if pid.isdigit() else b""
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 6 and int(fields[6]) & 0x00200000:
            out.append(pid)
    return out


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", "60"])


def test_a_busy_process_costs_no_maps_text_and_a_second_look_opens_nothing(tmp_path: Path, monkeypatch):
    """This process faults between the looks (as an agent's does): its maps text was read again
    at every look with the fingerprints; asked, no maps text is read and no /proc file opened
    for a process seen before, and what it maps is still found."""
    root = tmp_path / "t"
    root.mkdir()
    (root / "db.bin").write_bytes(bytes(8192))
    child = _sleeper()
    m = _map(root / "db.bin", 8192)
    try:
        cache = MapsCache()
        assert b"db.bin" in mapped_for_write(os.fsencode(root), None, cache)[0]
        opened = proc_files_opened(monkeypatch)
        busy = []
        for i in range(3):
            busy.append(bytearray(1 << 20))  # (page faults: a changed fingerprint)
            m[i : i + 1] = b"x"
            assert b"db.bin" in mapped_for_write(os.fsencode(root), None, cache)[0]
        assert cache.reads == 0  # no maps text read, at all
        for pid in (str(os.getpid()).encode(), str(child.pid).encode()):
            assert not [p for p in opened if p.startswith(b"/proc/" + pid + b"/")], pid
    finally:
        m.close()
        child.kill()
        child.wait()
        cache.close()


def test_kernel_threads_cost_no_proc_read_and_their_pids_are_asked_again_once_gone(tmp_path: Path, monkeypatch):
    """A process with no address space is held as a pidfd: a look reads nothing of it; once it
    exits (here a child stands in for a kernel thread), its pid is asked afresh."""
    cache = MapsCache()
    queries = cache.queries
    assert queries is not None
    root = os.fsencode(tmp_path)
    mapped_for_write(root, None, cache)
    kernel_threads = _kernel_threads()
    assert set(kernel_threads) <= set(queries.idle)
    child = _sleeper()
    pid = str(child.pid).encode()
    try:
        mapped_for_write(root, None, cache)
        os.close(queries.maps.pop(pid))
        assert not queries._hold_idle(pid) and pid not in queries.idle  # (a process with mappings to ask about)
        real = procmap._kernel_thread
        monkeypatch.setattr(procmap, "_kernel_thread", lambda p: p == pid or real(p))  # (as if it were one)
        assert queries._hold_idle(pid)
        opened = proc_files_opened(monkeypatch)
        calls = queries.calls
        mapped_for_write(root, None, cache)
        assert not [p for p in opened if p.startswith(b"/proc/" + pid + b"/")]
        for kthread in kernel_threads:
            assert not [p for p in opened if p.startswith(b"/proc/" + kthread + b"/")]
        assert queries.calls - calls <= len(os.listdir(b"/proc")) + 8  # (one call a process, not one per kernel thread read)
        child.kill()
        child.wait()
        mapped_for_write(root, None, cache)
        assert pid not in queries.idle
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        cache.close()
    assert queries.idle == {} and queries.maps == {}


def test_a_process_that_runs_execve_is_asked_about_its_new_mappings(tmp_path: Path):
    """A held maps file keeps the address space it was opened for; after ``execve`` that one
    is gone and the new program's mappings must be asked about."""
    root = tmp_path / "t"
    root.mkdir()
    (root / "late.bin").write_bytes(bytes(4096))
    cache = MapsCache()
    assert cache.queries is not None
    code = (
        "import mmap, os, sys\n"
        "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.readline()\n"
        f"os.execv(sys.executable, [sys.executable, '-c', {_mapper(root / 'late.bin')!r}])\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == b"ready\n"
        assert b"late.bin" not in mapped_for_write(os.fsencode(root), None, cache)[0]
        assert str(child.pid).encode() in cache.queries.maps
        child.stdin.write(b"go\n")
        child.stdin.flush()
        assert child.stdout.readline() == b"mapped\n"
        assert b"late.bin" in mapped_for_write(os.fsencode(root), None, cache)[0]
    finally:
        child.kill()
        child.wait()
        cache.close()


def _mapper(path: Path) -> str:
    """A program that maps ``path`` shared and writable, writes ``seq`` to it for each line
    read, says ``mapped``/``wrote``, and keeps the mapping until killed."""
    return (
        "import mmap, os, sys\n"
        f"fd = os.open({str(path)!r}, os.O_RDWR)\n"
        "m = mmap.mmap(fd, 4096); os.close(fd)\n"
        "sys.stdout.write('mapped\\n'); sys.stdout.flush()\n"
        "for i, line in enumerate(sys.stdin):\n"
        "    m[i * 8 : i * 8 + 8] = b'write %02d' % i; m.flush()\n"
        "    sys.stdout.write('wrote\\n'); sys.stdout.flush()\n"
    )


@pytest.mark.parametrize("queries", [True, False])
def test_writes_through_another_process_s_mapping_are_in_the_next_checkpoint(tmp_path: Path, monkeypatch, queries: bool):
    """Another process maps a file of the tree after the watcher's first checkpoint and writes
    through it (no ``write()``, no event, the same page twice); each next checkpoint holds the
    bytes, asked of the kernel or read from the maps text."""
    if not queries:
        monkeypatch.setattr(procmap, "supported", lambda: False)
    with _mapped_by_another_process(tmp_path, monkeypatch) as (watched, child):
        for i in range(3):
            _write_through(child)
            cp = watched.snapshot(f"write {i}")
            assert watched.read_bytes(cp.id, "db.bin")[: i * 8 + 8] == b"".join(b"write %02d" % k for k in range(i + 1)), i
        assert (watched.context.watcher._maps.queries is not None) == queries  # type: ignore[union-attr]


@contextlib.contextmanager
def _mapped_by_another_process(tmp_path: Path, monkeypatch) -> Iterator[tuple[Store, subprocess.Popen[bytes]]]:  # type: ignore[no-untyped-def]
    """A watching Store past its first patched checkpoint, and a process that has mapped the
    tree's ``db.bin`` shared and writable since (``_write_through`` makes it write)."""
    from snapstore.tree import statcache

    monkeypatch.setattr(statcache, "now_ns", lambda: time.time_ns() + 10_000_000_000)  # (no racy re-reads)
    root = tmp_path / "t"
    build_tree(root, {"db.bin": bytes(4096), "other.txt": b"o\n"})
    Store.init(root).close()
    watched = Store.open(root, watch=True)
    child = None
    try:
        watched.snapshot("start")
        watched.snapshot("patched")
        child = subprocess.Popen([sys.executable, "-c", _mapper(root / "db.bin")], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdout is not None
        assert child.stdout.readline() == b"mapped\n"
        yield watched, child
    finally:
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        watched.close()


def _write_through(child: subprocess.Popen[bytes]) -> None:
    assert child.stdout is not None and child.stdin is not None
    child.stdin.write(b"w\n")
    child.stdin.flush()
    assert child.stdout.readline() == b"wrote\n"


def test_a_mapped_name_with_a_newline_is_found(tmp_path: Path):
    """The maps text escapes a newline in a name (``\\012``), so such a name was never found
    there; the kernel's answer gives the name as it is."""
    root = tmp_path / "t"
    root.mkdir()
    odd = root / "two\nlines.bin"
    odd.write_bytes(bytes(4096))
    m = _map(odd, 4096)
    try:
        assert b"two\nlines.bin" in mapped_for_write(os.fsencode(root), None, MapsCache())[0]
    finally:
        m.close()


def test_held_maps_files_are_capped_and_the_rest_still_asked(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    (root / "db.bin").write_bytes(bytes(4096))
    cache = MapsCache()
    queries = cache.queries
    assert queries is not None
    queries.limit = 2
    m = _map(root / "db.bin", 4096)
    try:
        for _ in range(2):
            assert b"db.bin" in mapped_for_write(os.fsencode(root), None, cache)[0]
            assert len(queries.maps) + len(queries.idle) <= 2
    finally:
        m.close()
        cache.close()


def test_a_watching_store_closes_its_held_maps_files_and_pidfds(tmp_path: Path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("one\n")
    Store.init(tree).close()
    before = _held()
    store = Store.open(tree, watch=True)
    store.snapshot("first")
    (tree / "a.txt").write_text("two\n")
    store.snapshot("second")
    assert _held() > before
    watcher = store.context.watcher  # (kept alive: close itself must close them)
    assert watcher is not None
    store.close()
    assert _held() == before


def _held() -> int:
    """This process's descriptors open on a ``/proc/PID/maps`` file or a pidfd."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += (target.startswith("/proc/") and target.endswith("/maps")) or target == "anon_inode:[pidfd]"
    return n


def test_a_mapping_gone_while_a_library_checkpoint_reads_its_events_is_still_scanned(tmp_path: Path, monkeypatch):
    """A write made through another process's mapping before ``snapshot()`` is called; the
    process goes away right after the checkpoint reads the watcher's events (its close event
    comes after that read): the checkpoint's scan, made before the read, found the mapping."""
    with _mapped_by_another_process(tmp_path, monkeypatch) as (watched, child):
        _write_through(child)
        _exit_after(monkeypatch, "take", child)
        cp = watched.snapshot("after the write")
        assert watched.read_bytes(cp.id, "db.bin")[:8] == b"write 00"


def test_a_mapping_gone_while_a_diff_reads_the_events_is_still_scanned(tmp_path: Path, monkeypatch):
    """The same for a read-only look (``diff`` against the tree, from the watcher's state)."""
    with _mapped_by_another_process(tmp_path, monkeypatch) as (watched, child):
        _write_through(child)
        _exit_after(monkeypatch, "peek", child)
        assert [c.path for c in watched.diff("latest")] == [b"db.bin"]


def _exit_after(monkeypatch, method: str, child: subprocess.Popen[bytes]) -> None:  # type: ignore[no-untyped-def]
    """The mapping process exits right after the watcher's ``method`` (``take``, ``peek``)
    has read the events."""
    from snapstore.tree.watcher import Watcher

    real = getattr(Watcher, method)

    def then_exit(self: Watcher):  # type: ignore[no-untyped-def]
        out = real(self)
        if child.poll() is None:
            child.kill()
            child.wait()
        return out

    monkeypatch.setattr(Watcher, method, then_exit)
