"""The processes a mapping scan asks about, kept between looks (snapstore.platform.pids).

``/proc`` is listed at the first look and again only when a process may be new and unknown: a
process created since the last look is found from the last pid the kernel handed out
(``/proc/loadavg``) and ``pidfd_open``, a thread is not taken for a process, a pid not found
is asked once more (a ``fork`` half-way is not visible yet), exited processes are forgotten,
and ``/proc`` is listed again past :data:`~snapstore.platform.pids.RELIST` seconds or
:data:`~snapstore.platform.pids.MAX_NEW` new pids.  (A write through a mapping made by a
process created after the last checkpoint is in the next one, with no listing:
tests/test_mapped_queries.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import listings_of_proc
from platform_marks import needs_proc_maps
from test_mapped_queries import _mapper

from snapstore.platform import pids, procmap
from snapstore.platform.maps import MapsCache, mapped_for_write
from snapstore.testing import build_tree

pytestmark = [
    needs_proc_maps,
    pytest.mark.skipif(not procmap.supported(), reason="the kernel does not answer PROCMAP_QUERY (before Linux 6.11)"),
    pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open"),
]


def _start(path: Path) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", _mapper(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"mapped\n"
    return child


def _stop(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    child.wait()


def test_a_process_created_between_two_looks_is_found_without_listing_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "t"
    build_tree(root, {"db.bin": bytes(4096)})
    cache = MapsCache()
    try:
        assert mapped_for_write(os.fsencode(root), None, cache)[0] == set()
        listings = listings_of_proc(monkeypatch)
        child = _start(root / "db.bin")
        try:
            assert mapped_for_write(os.fsencode(root), None, cache)[0] == {b"db.bin"}
            assert str(child.pid).encode() in cache.pids.listed
        finally:
            _stop(child)
        assert listings == []
        assert mapped_for_write(os.fsencode(root), None, cache)[0] == set()
        assert str(child.pid).encode() not in cache.pids.listed  # (exited: forgotten)
        assert listings == []
    finally:
        cache.close()


def test_a_thread_is_not_taken_for_a_process(tmp_path: Path):
    cache = MapsCache()
    stop = threading.Event()
    ids: list[int] = []

    def run() -> None:
        ids.append(threading.get_native_id())
        stop.wait()

    try:
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        thread = threading.Thread(target=run)
        thread.start()
        while not ids:
            time.sleep(0.001)
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        assert cache.pids.asked >= 1  # (the thread's id was asked about, one by one)
        assert str(ids[0]).encode() not in cache.pids.listed
        assert str(os.getpid()).encode() in cache.pids.listed
    finally:
        stop.set()
        cache.close()


def test_a_pid_not_found_is_asked_once_more_at_the_next_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A process whose pid was handed out but which is not visible yet (a fork half-way) is
    found by the next look."""
    root = tmp_path / "t"
    build_tree(root, {"db.bin": bytes(4096)})
    cache = MapsCache()
    real = os.pidfd_open
    hidden: set[int] = set()

    def not_yet(pid: int, *args: int) -> int:
        if pid in hidden:
            hidden.discard(pid)
            raise ProcessLookupError(pid)
        return real(pid, *args)

    try:
        mapped_for_write(os.fsencode(root), None, cache)
        listings = listings_of_proc(monkeypatch)
        monkeypatch.setattr(os, "pidfd_open", not_yet)
        child = _start(root / "db.bin")
        hidden.add(child.pid)
        try:
            assert mapped_for_write(os.fsencode(root), None, cache)[0] == set()  # (not visible yet)
            assert mapped_for_write(os.fsencode(root), None, cache)[0] == {b"db.bin"}
        finally:
            _stop(child)
        assert listings == []
    finally:
        cache.close()


def test_proc_is_listed_again_past_relist_seconds_or_max_new_pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    cache = MapsCache()
    try:
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        listings = listings_of_proc(monkeypatch)
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        assert listings == []
        monkeypatch.setattr(pids, "RELIST", 0.0)
        time.sleep(0.001)
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        assert len(listings) == 1
        monkeypatch.setattr(pids, "RELIST", 60.0)
        monkeypatch.setattr(pids, "MAX_NEW", 0)
        subprocess.run(["true"], check=True)  # (a pid handed out)
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        assert len(listings) == 2
    finally:
        cache.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_lists_proc_at_its_first_look(tmp_path: Path):
    """A forked child starts with a copy of its parent's list (and the parent's pids asked
    once more): its first look lists ``/proc`` afresh instead of trusting that copy."""
    cache = MapsCache()
    try:
        mapped_for_write(os.fsencode(tmp_path), None, cache)
        listed = cache.pids.listings
        pid = os.fork()
        if pid == 0:  # the child: exits 0 when its look listed /proc and found itself
            code = 1
            try:
                mapped_for_write(os.fsencode(tmp_path), None, cache)
                ok = cache.pids.listings == listed + 1 and str(os.getpid()).encode() in cache.pids.listed
                code = 0 if ok else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        cache.close()
