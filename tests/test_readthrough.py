"""The read-through backend under ``--remote`` browsing (snapstore.storage.readthrough).

Missing rows of the served tables are asked of the filler once, answered at once (even in a
view opened before), and written to the store when the thread's outermost view closes.
"""

from __future__ import annotations

import os
import threading
from contextlib import nullcontext

import pytest

from snapstore.storage.lmdb_backend import LmdbBackend
from snapstore.storage.readthrough import Pending, ReadThroughBackend

REMOTE = {b"a": b"chunk a", b"b": b"chunk b"}


class Filler:
    def __init__(self) -> None:
        self.asked: list[bytes] = []

    def __call__(self, pending: Pending, table: str, key: bytes) -> None:
        self.asked.append(key)
        if key in REMOTE:
            pending.put_new(table, key, REMOTE[key])
            pending.put_new("streams", key, b"found with " + key)  # more than was asked


@pytest.fixture
def wrapped(tmp_path):
    os.mkdir(tmp_path / "store")
    inner = LmdbBackend(str(tmp_path / "store"), create=True)
    filler = Filler()
    b = ReadThroughBackend(inner, filler, ("chunks", "streams"), nullcontext)
    try:
        yield b, inner, filler
    finally:
        b.close()


def test_a_miss_is_filled_once_and_written_when_the_outermost_view_closes(wrapped):
    b, inner, filler = wrapped
    with b.read() as outer:
        with b.read() as view:
            assert view.get("chunks", b"a") == b"chunk a"
            assert view.get("streams", b"a") == b"found with a"  # pending: not asked again
        assert inner.has_many("chunks", [b"a"]) == [False]  # a nested view does not write
        assert outer.get("chunks", b"a") == b"chunk a"
        assert b.has_many("chunks", [b"a", b"b"]) == [True, False]
    assert inner.has_many("chunks", [b"a"]) == [True]
    assert filler.asked == [b"a"]
    with b.read() as view:
        assert view.get("chunks", b"a") == b"chunk a"
    assert filler.asked == [b"a"]


def test_only_served_tables_are_filled_and_absent_rows_stay_absent(wrapped):
    b, inner, filler = wrapped
    with b.read() as view:
        assert view.get("tags", b"a") is None
        assert view.get("chunks", b"nowhere") is None
    assert filler.asked == [b"nowhere"]
    assert inner.has_many("chunks", [b"nowhere"]) == [False]


def test_a_view_that_fails_does_not_write(tmp_path):
    """(What a filler put is checked row by row: it waits for the next flush, here close.)"""
    os.mkdir(tmp_path / "store")
    inner = LmdbBackend(str(tmp_path / "store"), create=True)

    def fill(pending: Pending, table: str, key: bytes) -> None:
        pending.put_new(table, b"half", b"done")
        raise OSError("the network went away")

    b = ReadThroughBackend(inner, fill, ("chunks",), nullcontext)
    with pytest.raises(OSError):
        with b.read() as view:
            view.get("chunks", b"a")
    assert inner.has_many("chunks", [b"half"]) == [False]  # not written by the failed view
    b.close()
    inner = LmdbBackend(str(tmp_path / "store"))
    assert inner.has_many("chunks", [b"half"]) == [True]
    inner.close()


def test_threads_share_what_was_filled(wrapped):
    b, inner, filler = wrapped
    start = threading.Barrier(4)
    seen: list[bytes | None] = []

    def read() -> None:
        start.wait()
        with b.read() as view:
            seen.append(view.get("chunks", b"b"))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [b"chunk b"] * 4 and filler.asked == [b"b"]
    assert inner.has_many("chunks", [b"b"]) == [True]
