"""The watcher's cache of each process's shared writable mappings (snapstore.platform.maps), as
it works where the kernel does not answer ``PROCMAP_QUERY`` (``MapsCache(queries=False)``; the
queries are tests/test_mapped_queries.py): maps are read again only for a process whose start
time, mapped size or page faults changed, and a mapping made since the last look is still found."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest
from helpers import proc_files_opened
from platform_marks import needs_proc_maps

from snapstore.platform import maps as mapped
from snapstore.platform.maps import MapsCache, mapped_for_write

pytestmark = needs_proc_maps


@pytest.mark.parametrize("queries", [False, True])
def test_a_file_mapped_after_the_first_look_is_found_through_the_cache(tmp_path: Path, queries: bool):
    root = tmp_path / "t"
    root.mkdir()
    (root / "data.bin").write_bytes(bytes(8192))
    cache = MapsCache(queries=queries)
    assert b"data.bin" not in mapped_for_write(os.fsencode(root), None, cache)[0]
    fd = os.open(root / "data.bin", os.O_RDWR)
    m = mmap.mmap(fd, 8192)  # (shared and writable: this process's mapped size grows)
    os.close(fd)
    try:
        assert b"data.bin" in mapped_for_write(os.fsencode(root), None, cache)[0]
    finally:
        m.close()
    assert b"data.bin" not in mapped_for_write(os.fsencode(root), None, cache)[0]


def test_maps_are_read_again_only_for_processes_whose_fingerprint_changed(monkeypatch, tmp_path: Path):
    marks = {b"10": b"1 4096", b"11": b"2 4096", b"12": b"3 8192"}
    maps = {b"10": b"", b"11": b"", b"12": b""}
    read: list[bytes] = []
    monkeypatch.setattr(mapped.os, "listdir", lambda path: list(marks))
    monkeypatch.setattr(mapped, "_fingerprint", lambda pid, held=None: marks.get(pid))

    def fake_read(path: bytes, limit: int = 0) -> bytes:
        pid = path.split(b"/")[2]
        read.append(pid)
        return maps.get(pid, b"")

    monkeypatch.setattr(mapped, "_read", fake_read)
    cache = MapsCache(queries=False)
    root = os.fsencode(tmp_path)
    mapped_for_write(root, None, cache)
    assert sorted(read) == [b"10", b"11", b"12"]
    read.clear()
    mapped_for_write(root, None, cache)
    assert read == []  # nothing changed: no maps read
    line = b"7f00-7f01 rw-s 00000000 08:01 1234 " + root + b"/db.bin\n"
    maps[b"11"] = line
    marks[b"11"] = b"2 8192"  # (a new mapping: its size grew)
    assert mapped_for_write(root, None, cache)[0] == {b"db.bin"}
    assert read == [b"11"]
    read.clear()
    marks[b"13"] = b"9 100"  # a new process, and one gone
    del marks[b"10"]
    assert mapped_for_write(root, None, cache)[0] == {b"db.bin"}
    assert read == [b"13"] and set(cache.entries) == {b"11", b"12", b"13"}


def test_a_process_whose_fingerprint_cannot_be_read_is_read_every_time(monkeypatch, tmp_path: Path):
    read: list[bytes] = []
    monkeypatch.setattr(mapped.os, "listdir", lambda path: [b"20"])
    monkeypatch.setattr(mapped, "_fingerprint", lambda pid, held=None: None)
    monkeypatch.setattr(mapped, "_read", lambda path, limit=0: read.append(path) or b"")
    cache = MapsCache(queries=False)
    for _ in range(3):
        mapped_for_write(os.fsencode(tmp_path), None, cache)
    assert len(read) == 3 and cache.entries == {}


def test_the_fingerprint_changes_with_a_write_through_a_mapping_of_the_same_size(tmp_path: Path):
    """An unmapped file and another mapped in its place (the same size: the mapped size does not
    change) is seen by the fault the first write through the new mapping takes."""
    root = tmp_path / "t"
    root.mkdir()
    for name in ("one.bin", "two.bin"):
        (root / name).write_bytes(bytes(8192))
    cache = MapsCache(queries=False)

    def mapping(name: str) -> mmap.mmap:
        fd = os.open(root / name, os.O_RDWR)
        try:
            return mmap.mmap(fd, 8192)
        finally:
            os.close(fd)

    first = mapping("one.bin")
    first[0:1] = b"x"
    assert b"one.bin" in mapped_for_write(os.fsencode(root), None, cache)[0]
    first.close()
    second = mapping("two.bin")
    try:
        second[100:101] = b"y"  # (faults: the process's counts move)
        assert b"two.bin" in mapped_for_write(os.fsencode(root), None, cache)[0]
    finally:
        second.close()


def test_the_fingerprint_is_the_faults_the_start_time_and_the_mapped_size():
    data = Path(f"/proc/{os.getpid()}/stat").read_bytes()
    fields = data[data.rfind(b")") + 2 :].split()
    got = mapped._fingerprint(str(os.getpid()).encode())
    assert got is not None and got.split()[2:] == fields[19:21]
    assert mapped._fingerprint(b"999999999") is None


def test_only_shared_writable_lines_are_parsed_and_all_of_them_are_found():
    """The line filter in front of the expression finds what a scan of every line finds, in
    maps order: private and read-only lines, a name holding the permission text, the last line
    without its newline."""
    from snapstore.platform import maps as mapped

    lines = [
        b"7f0000000000-7f0000001000 r--p 00000000 08:01 11 /usr/lib/libc.so",
        b"7f0000001000-7f0000002000 rw-s 00000000 08:01 12 /home/u/proj/db.bin",
        b"7f0000002000-7f0000003000 rw-p 00000000 08:01 13 /home/u/proj/w-s named.txt",
        b"7f0000003000-7f0000004000 r--s 00000000 08:01 14 /home/u/proj/w-s shared-readonly",
        b"7f0000004000-7f0000005000 rwxs 00000000 08:02 15 /tmp/jit (deleted)",
        b"7f0000005000-7f0000006000 rw-s 00000000 00:05 16 /dev/zero (deleted)",
    ]
    data = b"\n".join(lines * 300 + [b"7f0000006000-7f0000007000 rw-s 00000000 08:01 17 /home/u/proj/last"])
    scan_all = tuple((m[1], m[2], m[3], m[4]) for m in mapped._SHARED_WRITABLE.finditer(data))
    assert mapped._shared_writable(data) == scan_all
    assert len(scan_all) == 3 * 300 + 1 and scan_all[-1][3] == b"/home/u/proj/last"


def _stat_files_open() -> list[str]:
    """This process's descriptors open on some ``/proc/PID/stat``."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/proc/") and target.endswith("/stat"):
            out.append(target)
    return out


def _sleeper():
    import subprocess

    return subprocess.Popen(["sleep", "60"])


def test_a_second_look_opens_no_stat_file_of_a_process_seen_before(monkeypatch, tmp_path: Path):
    """The fingerprints of processes seen at the last look are read through held files: one
    pread each, no open (a watched checkpoint's largest cost on a machine of many processes)."""
    child = _sleeper()
    try:
        cache = MapsCache(queries=False)
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        opened = proc_files_opened(monkeypatch)
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        assert f"/proc/{child.pid}/stat".encode() not in opened
        assert f"/proc/{os.getpid()}/stat".encode() not in opened
        assert str(child.pid).encode() in cache.stats.fds
    finally:
        child.kill()
        child.wait()


def test_a_gone_process_s_held_stat_file_is_closed_and_a_closed_cache_holds_none(tmp_path: Path):
    child = _sleeper()
    cache = MapsCache(queries=False)
    mapped_for_write(os.fsencode(tmp_path), None, cache)
    pid = str(child.pid).encode()
    assert pid in cache.stats.fds
    child.kill()
    child.wait()
    mapped_for_write(os.fsencode(tmp_path), None, cache)
    assert pid not in cache.stats.fds
    assert f"/proc/{child.pid}/stat" not in _stat_files_open()
    assert _stat_files_open()
    cache.close()
    assert _stat_files_open() == [] and cache.stats.fds == {}
    # (a look after close opens them again, and still finds what is mapped)
    assert mapped_for_write(os.fsencode(tmp_path), None, cache) == (set(), set())


def test_held_stat_files_are_capped_and_the_rest_still_cached(monkeypatch, tmp_path: Path):
    cache = MapsCache(queries=False)
    cache.stats.limit = 2
    mapped_for_write(os.fsencode(tmp_path), None, cache)
    assert len(cache.stats.fds) <= 2 and len(_stat_files_open()) <= 2
    reads = cache.reads
    idle = _sleeper()  # (an idle process beyond the cap: its maps read once, then cached)
    try:
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        after_first = cache.reads
        assert after_first > reads
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        assert str(idle.pid).encode() in cache.entries
        assert str(idle.pid).encode() not in cache.stats.fds
    finally:
        idle.kill()
        idle.wait()


def test_a_watching_store_closes_its_held_stat_files(tmp_path: Path, monkeypatch):
    from snapstore.platform import procmap
    from snapstore.store import Store

    monkeypatch.setattr(procmap, "supported", lambda: False)  # (the fingerprints' held files)

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_text("one\n")
    Store.init(tree).close()
    store = Store.open(tree, watch=True)
    store.snapshot("first")
    (tree / "a.txt").write_text("two\n")
    store.snapshot("second")
    assert _stat_files_open()
    watcher = store.context.watcher  # (kept alive: close itself must close them)
    assert watcher is not None
    store.close()
    assert _stat_files_open() == []
