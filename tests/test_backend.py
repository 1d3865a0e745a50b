"""One suite for every backend (dulwich's ObjectStoreTests style).

``BackendTests`` holds the contract of :class:`snapstore.storage.backend.Backend`; the
``backend`` fixture runs each test against the in-memory backend, an LMDB backend on disk and
that LMDB backend under the read-through wrapper of ``--remote`` browsing, so a difference between them fails here instead of hiding behind ``Store.in_memory``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import nullcontext

import pytest

from snapstore.storage.backend import TABLES, Backend
from snapstore.storage.lmdb_backend import LmdbBackend
from snapstore.storage.memory import MemoryBackend
from snapstore.storage.readthrough import ReadThroughBackend

#: The tables browsing fills (snapstore.remote.browse.TABLES): content-addressed rows, so a view
#: that sees one written after it opened (what the wrapper's miss path does) sees what it
#: would have read anyway; the suite's snapshot tests use other tables.
SERVED = ("chunks", "packs", "streams", "conversations")


@pytest.fixture(params=["memory", "lmdb", "readthrough"])
def backend(request, tmp_path) -> Iterator[Backend]:
    b: Backend
    if request.param == "memory":
        b = MemoryBackend()
    else:
        os.mkdir(tmp_path / "store")
        b = LmdbBackend(str(tmp_path / "store"), create=True)
        if request.param == "readthrough":  # with nothing to fill, the wrapped backend's contract
            b = ReadThroughBackend(b, lambda pending, table, key: None, SERVED, nullcontext)
    try:
        yield b
    finally:
        b.close()


class Boom(Exception):
    pass


def _put(backend: Backend, table: str, pairs: dict[bytes, bytes]) -> None:
    with backend.write() as batch:
        for k, v in pairs.items():
            batch.put(table, k, v)


class TestBackend:
    def test_every_table_exists_and_starts_empty(self, backend):
        with backend.read() as view:
            for table in TABLES:
                assert view.count(table) == 0
                assert list(view.items(table)) == []

    def test_put_then_get(self, backend):
        _put(backend, "meta", {b"a": b"1", b"b": b""})
        with backend.read() as view:
            assert view.get("meta", b"a") == b"1"
            assert view.get("meta", b"b") == b""
            assert view.get("meta", b"c") is None
            assert view.get("tags", b"a") is None  # tables are separate

    def test_put_replaces_and_put_new_does_not(self, backend):
        _put(backend, "chunks", {b"k": b"old"})
        with backend.write() as batch:
            batch.put_new("chunks", b"k", b"new")
            batch.put_new("chunks", b"fresh", b"12345")
        assert batch.inserted_bytes == 5  # only the value that was really inserted
        with backend.write() as batch:
            batch.put("chunks", b"fresh", b"replaced")
        with backend.read() as view:
            assert view.get("chunks", b"k") == b"old"
            assert view.get("chunks", b"fresh") == b"replaced"

    def test_put_new_twice_in_one_batch_keeps_the_first(self, backend):
        with backend.write() as batch:
            batch.put_new("chunks", b"k", b"first")
            batch.put_new("chunks", b"k", b"second")
        assert batch.inserted_bytes == len(b"first")
        with backend.read() as view:
            assert view.get("chunks", b"k") == b"first"

    def test_delete(self, backend):
        _put(backend, "tags", {b"a": b"1", b"b": b"2"})
        with backend.write() as batch:
            batch.delete("tags", b"a")
            batch.delete("tags", b"never-there")
            assert batch.get("tags", b"a") is None  # the batch sees its own delete
            assert batch.get("tags", b"b") == b"2"  # and the store behind it
        with backend.read() as view:
            assert view.get("tags", b"a") is None
            assert view.count("tags") == 1

    def test_a_view_does_not_see_later_writes(self, backend):
        _put(backend, "log", {b"1": b"one"})
        with backend.read() as view:
            _put(backend, "log", {b"1": b"changed", b"2": b"two"})
            assert view.get("log", b"1") == b"one"
            assert view.get("log", b"2") is None
            assert view.count("log") == 1
            assert list(view.items("log")) == [(b"1", b"one")]
        with backend.read() as view:
            assert view.get("log", b"1") == b"changed"

    def test_items_in_key_order_reverse_and_prefix(self, backend):
        pairs = {b"b/2": b"x", b"a": b"y", b"b/1": b"z", b"c": b"w", b"b": b"v"}
        _put(backend, "statcache", pairs)
        with backend.read() as view:
            assert [k for k, _ in view.items("statcache")] == sorted(pairs)
            assert [k for k, _ in view.items("statcache", reverse=True)] == sorted(pairs, reverse=True)
            assert list(view.items("statcache", prefix=b"b/")) == [(b"b/1", b"z"), (b"b/2", b"x")]
            assert list(view.items("statcache", prefix=b"zz")) == []
            assert dict(view.items("statcache")) == pairs
            # reverse with a prefix: in the middle, at either end, and a prefix of 0xff bytes
            assert [k for k, _ in view.items("statcache", reverse=True, prefix=b"b/")] == [b"b/2", b"b/1"]
            assert [k for k, _ in view.items("statcache", reverse=True, prefix=b"c")] == [b"c"]
            assert [k for k, _ in view.items("statcache", reverse=True, prefix=b"a")] == [b"a"]
            assert list(view.items("statcache", reverse=True, prefix=b"0")) == []
            assert list(view.items("statcache", reverse=True, prefix=b"\xff")) == []
        _put(backend, "statcache", {b"\xff\xff1": b"q", b"\xff": b"r"})
        with backend.read() as view:
            assert [k for k, _ in view.items("statcache", reverse=True, prefix=b"\xff")] == [b"\xff\xff1", b"\xff"]

    def test_has_many(self, backend):
        _put(backend, "chunks", {b"a": b"1", b"c": b"3"})
        assert backend.has_many("chunks", [b"a", b"b", b"c", b"a"]) == [True, False, True, True]
        assert backend.has_many("streams", [b"a"]) == [False]
        assert backend.has_many("chunks", []) == []

    def test_an_exception_in_the_batch_discards_all_of_it(self, backend):
        _put(backend, "meta", {b"keep": b"1"})
        with pytest.raises(Boom):
            with backend.write() as batch:
                batch.put("meta", b"new", b"2")
                batch.delete("meta", b"keep")
                batch.put_new("chunks", b"c", b"3")
                raise Boom
        with backend.read() as view:
            assert view.get("meta", b"keep") == b"1"
            assert view.get("meta", b"new") is None
            assert view.count("chunks") == 0

    def test_value_sizes(self, backend):
        big = bytes(range(256)) * 10
        _put(backend, "chunks", {b"big": big, b"empty": b"", b"small": b"abc"})
        rows = list(backend.value_sizes("chunks"))
        assert rows == [(b"big", len(big), big[:32]), (b"empty", 0, b""), (b"small", 3, b"abc")]
        assert list(backend.value_sizes("streams")) == []

    def test_table_pages_cover_a_tables_records(self, backend):
        assert backend.table_pages("streams") == 0
        values = {os.urandom(32): os.urandom(100) for _ in range(300)}
        _put(backend, "chunks", values)
        payload = sum(len(k) + len(v) for k, v in values.items())
        assert payload <= backend.table_pages("chunks") <= 3 * payload + 8192
        assert backend.table_pages("streams") == 0

    def test_disk_size_grows_with_content(self, backend):
        before = backend.disk_size()
        assert before >= 0
        _put(backend, "chunks", {os.urandom(32): os.urandom(4096) for _ in range(400)})
        backend.sync()
        assert backend.disk_size() > before

    def test_release_memory_keeps_data_readable(self, backend):
        _put(backend, "chunks", {b"k": b"v" * 5000})
        with backend.read() as view:
            backend.release_memory()
            assert view.get("chunks", b"k") == b"v" * 5000  # an open view survives it
        backend.release_memory(trim_heap=True)
        with backend.read() as view:
            assert view.get("chunks", b"k") == b"v" * 5000

    def test_refresh_without_a_compaction_does_nothing(self, backend):
        _put(backend, "meta", {b"a": b"1"})
        assert backend.refresh() is False
        with backend.read() as view:
            assert view.get("meta", b"a") == b"1"

    def test_compact_keeps_every_record(self, backend):
        pairs = {os.urandom(32): os.urandom(2000) for _ in range(300)}
        _put(backend, "chunks", pairs)
        with backend.write() as batch:
            for k in list(pairs)[:250]:
                batch.delete("chunks", k)
        sizes = backend.compact()
        if sizes is not None:  # memory has nothing to compact
            before, after = sizes
            assert after < before
            assert after == backend.disk_size()
        with backend.read() as view:
            assert dict(view.items("chunks")) == {k: v for k, v in list(pairs.items())[250:]}

    def test_close_is_idempotent(self, backend):
        backend.close()
        backend.close()


def test_lmdb_data_survives_close_and_reopen(tmp_path):
    path = str(tmp_path / "s")
    os.mkdir(path)
    b = LmdbBackend(path, create=True)
    _put(b, "meta", {b"k": b"v"})
    b.sync()
    b.close()
    again = LmdbBackend(path)
    try:
        with again.read() as view:
            assert view.get("meta", b"k") == b"v"
    finally:
        again.close()


def test_two_lmdb_backends_of_one_directory_share_what_they_write(tmp_path):
    path = str(tmp_path / "s")
    os.mkdir(path)
    a = LmdbBackend(path, create=True)
    b = LmdbBackend(path)
    try:
        _put(a, "meta", {b"k": b"v"})
        with b.read() as view:
            assert view.get("meta", b"k") == b"v"
        a.close()  # b keeps the shared environment open
        with b.read() as view:
            assert view.get("meta", b"k") == b"v"
    finally:
        a.close()
        b.close()


@pytest.fixture
def lmdb_only(tmp_path) -> Iterator[LmdbBackend]:
    os.mkdir(tmp_path / "s")
    b = LmdbBackend(str(tmp_path / "s"), create=True)
    try:
        yield b
    finally:
        b.close()


def _active_readers(b: LmdbBackend) -> int:
    return sum(1 for line in b.env.readers().splitlines()[1:] if line.split()[-1] != "-")


def test_an_lmdb_view_reads_part_of_a_value_and_keeps_no_reader_open_after_it(lmdb_only):
    value = os.urandom(300_000)
    _put(lmdb_only, "packs", {b"p": value})
    with lmdb_only.read() as view:
        part = view.part  # type: ignore[attr-defined]
        assert part("packs", b"p", 1_000, 5_000) == (len(value), value[1_000:5_000])
        assert part("packs", b"p", 299_990, 400_000) == (len(value), value[299_990:])
        assert part("packs", b"nope", 0, 10) is None
        assert _active_readers(lmdb_only) == 2  # the view's and the zero-copy one
    assert _active_readers(lmdb_only) == 0


def test_an_lmdb_views_part_still_sees_a_value_deleted_after_the_view_began(lmdb_only):
    _put(lmdb_only, "packs", {b"p": b"0123456789"})
    with lmdb_only.read() as view:
        with lmdb_only.write() as batch:
            batch.delete("packs", b"p")
        # (the zero-copy transaction begins now, after the delete: the view's own is used)
        assert view.part("packs", b"p", 2, 5) == (10, b"234")  # type: ignore[attr-defined]
    with lmdb_only.read() as view:
        assert view.part("packs", b"p", 2, 5) is None  # type: ignore[attr-defined]


def test_reading_a_chunk_through_an_lmdb_view_copies_its_frame_not_its_pack(lmdb_only, monkeypatch):
    from snapstore.storage import entries, lmdb_backend, objects, packs

    chunks = [(objects.chunk_id(d), d) for d in (os.urandom(50_000) for _ in range(8))]
    frames = packs.solid_frames(chunks, 3, target=60_000)
    assert len(frames) > 1
    with lmdb_only.write() as batch:
        for table, key, value in packs.pack_ops(frames):
            batch.put(table, key, value)
    real = lmdb_backend._LmdbView.get

    def get(self, table, key):  # type: ignore[no-untyped-def]
        assert table != "packs", "a whole pack was copied"
        return real(self, table, key)

    monkeypatch.setattr(lmdb_backend._LmdbView, "get", get)
    entries.clear_cache()
    with lmdb_only.read() as view:
        for cid, data in chunks:
            assert objects.load_chunk(view.get, cid) == data


def test_an_lmdb_views_part_reads_through_the_view_when_no_second_transaction_begins(lmdb_only):
    import lmdb

    from snapstore.storage import lmdb_backend

    class GrownMap:  # what a map another process grew answers to a new transaction
        def begin(self, **kw):  # type: ignore[no-untyped-def]
            raise lmdb.MapResizedError("grown")

    _put(lmdb_only, "packs", {b"p": b"0123456789"})
    with lmdb_only._txn() as (txn, shared):
        view = lmdb_backend._LmdbView(txn, shared.dbs, GrownMap())  # type: ignore[arg-type]
        assert view.part("packs", b"p", 2, 5) == (10, b"234")
        assert view.part("packs", b"q", 2, 5) is None


class TestContentIdsAreNeverDeletedByTheBatchThatWritesThem:
    """Issue 36: an id written and then deleted in one batch is kept in the content-addressed
    tables (a rebuilt pack can have the damaged pack's id); other tables delete as told."""

    def test_a_content_id_written_then_deleted_in_one_batch_is_kept(self, backend):
        for table in ("packs", "chunks", "streams", "conversations"):
            _put(backend, table, {b"id": b"damaged"})
            with backend.write() as batch:
                batch.put(table, b"id", b"rebuilt")
                batch.delete(table, b"id")
                assert batch.get(table, b"id") == b"rebuilt"
            with backend.read() as view:
                assert view.get(table, b"id") == b"rebuilt", table

    def test_a_delete_before_the_write_or_of_another_id_still_deletes(self, backend):
        _put(backend, "packs", {b"a": b"1", b"b": b"2"})
        with backend.write() as batch:
            batch.delete("packs", b"a")
            batch.put("packs", b"b", b"2")
            batch.delete("packs", b"c")
        with backend.read() as view:
            assert view.get("packs", b"a") is None and view.get("packs", b"b") == b"2"

    def test_other_tables_delete_what_the_batch_wrote(self, backend):
        with backend.write() as batch:
            batch.put("statcache", b"p", b"v")
            batch.delete("statcache", b"p")
        with backend.read() as view:
            assert view.get("statcache", b"p") is None
