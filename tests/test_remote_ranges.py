"""A single-file read from a fresh machine reads at most ~2x the file's frame plus the metadata
it needs (issue 41, req 7), and an engine that ignores ranges is read whole, said once.

The history is shaped like the trial's flask one: a first push of text (one large frame, inline
in its bundle) and then small pushes whose data sits inline in bundles of ~48 KB each.  Reading
a file of the first push from the latest checkpoint on a fresh cache reads config, refs, the
latest bundle, the footer of every object the checkpoint needs and the frame of the file.  The
bound is machine-independent: bytes read <= 2 x the largest frame + the latest bundle + the
exact footers of the needed objects (+ config and ref).  Reading each small bundle's last
64 KiB, as browsing did, read those bundles whole and broke it.
"""

from __future__ import annotations

import hashlib

import pytest
from canned_http import canned
from remote_helpers import Counting, make_store, remote, seaweed  # noqa: F401 - fixtures

from snapstore.remote import heads, layout, ranges
from snapstore.remote.s3errors import RangeNotServed
from snapstore.remote.transport import Got, Transport
from snapstore.storage import entries, objects
from snapstore.testing import random_bytes

STEPS = 15


def _text(seed: str, n: int) -> bytes:
    """Text that compresses about 2x (hex digits)."""
    out = b""
    i = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}{i}".encode()).hexdigest().encode() + b"\n"
        i += 1
    return out[:n]


def _history(remote, tmp_path):  # noqa: F811
    """The trial's shape: a first push of text (the file read, in one frame), then small pushes
    of ~48 KB inline each: the last checkpoint, the chunks of its manifest and of the file, and
    the remote's objects."""
    files: dict[str, object] = {f"src/m{j}.txt": _text(f"m{j}", 16_000) for j in range(4)}
    with make_store(tmp_path / "a", {**files, "keep.txt": _text("keep", 65_000)}) as a:
        remote.add_to(a)
        a.snapshot("first", task="t")
        a.push(task="t")
        for i in range(STEPS):
            for k in range(2):
                (tmp_path / "a" / f"step{k}.bin").write_bytes(random_bytes(24_000, f"s{i}-{k}"))
            cp = a.snapshot(f"step {i}", task="t")
            a.push(task="t")
        sid = next(e.ref for e in a.entries(cp.id) if e.path == b"keep.txt")
        with a.backend.read() as view:
            manifest_chunks = set(objects.leaf_ids(view.get, cp.manifest))
            file_chunks = set(objects.leaf_ids(view.get, sid))
            data = {c for c in a.checkpoints() for e in a.entries(c.id) if e.is_file
                    for c in objects.leaf_ids(view.get, e.ref)}
    assert not manifest_chunks & data
    return cp, manifest_chunks, file_chunks, data, {k: remote.read(k) for k in remote.keys()}


def _fresh(remote, tmp_path):  # noqa: F811
    b = make_store(tmp_path / "b", {"mine.txt": b"mine\n"})
    b.snapshot("mine")
    remote.add_to(b)
    entries.clear_cache()  # this process pushed: its chunk cache must not answer for the remote
    return b


def test_cat_of_one_file_reads_its_frame_and_the_records_of_each_bundle_only(remote, tmp_path):  # noqa: F811
    """Issue 41 req 7: bytes read <= 2 x the file's frame + the metadata the read needs: config,
    ref, each bundle's head (its records: a first read of HEAD_READ bytes), the footers of the
    objects the checkpoint needs (a first read of BUNDLE_TAIL bytes) and the frame that holds its
    manifest.  Reading each bundle whole, as browsing did, read every push's inline data."""
    cp, manifest_chunks, file_chunks, data, raw = _history(remote, tmp_path)
    ref = layout.parse_ref("refs/t", raw["refs/t"])
    latest = layout.parse_bundle(ref.bundle, raw[ref.bundle])
    needed = [ref.bundle, *latest.needs]
    assert not [k for k in needed if k.startswith("packs/")]  # all inline, as in the trial
    history = sorted(k for k in raw if k.startswith("log/t/"))
    assert len(history) == STEPS + 1 and all(len(raw[k]) > 40_000 for k in history[1:]), [len(raw[k]) for k in history]
    file_frame = sum(f.length for k in needed for f in _frames(k, raw[k]) if file_chunks & {c for c, _, _ in f.members})
    manifest_frames = sum(f.length for k in needed for f in _frames(k, raw[k])
                          if manifest_chunks & {c for c, _, _ in f.members})
    # A push frames manifest chunks apart from file data: reading a manifest reads no file.
    assert not [f for k in history for f in _frames(k, raw[k])
                if data & {c for c, _, _ in f.members} and manifest_chunks & {c for c, _, _ in f.members}]
    records = sum(max(_head_length(k, raw[k]), heads.HEAD_READ) for k in history)
    footers = sum(max(_footer_length(k, raw[k]), ranges.BUNDLE_TAIL) for k in needed)
    meta = len(raw["config"]) + len(raw["refs/t"]) + records + footers + manifest_frames
    assert 0 < file_frame < 100_000 and sum(len(raw[k]) for k in history) > 3 * (2 * file_frame + meta)

    b = _fresh(remote, tmp_path)
    counting = Counting(pytest.MonkeyPatch())
    try:
        with b.remote_view("origin") as view:
            taken_up = counting.last.bytes_read
            assert view.read_bytes(cp.id, "keep.txt") == _text("keep", 65_000)
    finally:
        b.close()
    read = counting.last.bytes_read
    assert taken_up <= len(raw["config"]) + len(raw["refs/t"]) + records, (taken_up, records)
    assert read <= 2 * file_frame + meta, (read, file_frame, meta)
    # config, the refs' LIST, the ref, the history's LIST; a head each; a footer each (two reads
    # at most); the manifest's frame and the file's
    assert len(counting.last.calls) <= 4 + len(history) + 2 * len(needed) + 2, counting.last.calls


def _head_length(key: str, body: bytes) -> int:
    at = heads.parse_head(key, body, True).inline_at
    assert at is not None
    return at[0]


def _footer_length(key: str, body: bytes) -> int:
    return layout.footer_length(key, body[-layout.TAIL_SIZE:], len(body)) + layout.TAIL_SIZE


def _frames(key: str, body: bytes) -> list[layout.PackFrame]:
    size = len(body)
    flen = layout.footer_length(key, body[-layout.TAIL_SIZE:], size)
    footer = body[size - layout.TAIL_SIZE - flen : size - layout.TAIL_SIZE]
    return layout.parse_footer(key, footer, size)[0]


# -- an engine that ignores ranges ----------------------------------------------------------------


class WholeOnly(Transport):
    """Answers ranged reads as an engine that ignores Range does (obstore: NotPartial)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.gets = 0

    def get(self, key: str, limit: int = 1 << 28) -> Got | None:
        self.gets += 1
        body = self.objects.get(key)
        return None if body is None else Got(body, '"e"')

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        raise RangeNotServed(f"cannot read {key} by range")

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        raise RangeNotServed(f"cannot read {key} by range")


def test_an_engine_that_ignores_ranges_is_read_whole_and_said_once(monkeypatch, capsys):
    monkeypatch.setattr(ranges, "_told", False)
    inner = WholeOnly({"packs/ab/x": bytes(range(256)) * 4})
    t = ranges.RangeFallback(inner)
    assert t.get_suffix("packs/ab/x", 10) == ((bytes(range(256)) * 4)[-10:], 1024)
    assert t.get_range("packs/ab/x", 3, 7) == bytes([3, 4, 5, 6])
    assert t.get_range("packs/ab/missing", 0, 1) is None
    assert inner.gets == 2  # the object once (kept for the next range), the missing one
    err = capsys.readouterr().err
    assert err.count("does not serve ranged reads") == 1 and ranges.fell_back()


def test_a_whole_answer_to_a_range_is_recognised(monkeypatch):
    """A real HTTP engine answering 200 with the whole body to a ranged GET: the S3 client's
    error becomes RangeNotServed, and the transport falls back."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setattr(ranges, "_told", False)
    body = b"0123456789" * 100
    from snapstore.remote import transport as tr
    from snapstore.remote.names import parse_url

    with canned("200 OK", body, 'ETag: "x"\r\n') as server:
        t = tr.connect(parse_url("s3://b/p"), endpoint=server.endpoint)
        assert t.get_range("packs/aa/k", 10, 20) == body[10:20]
        assert t.get_suffix("packs/aa/k", 5) == (body[-5:], len(body))
    assert ranges.fell_back()



def test_remote_doctor_notes_an_engine_that_ignores_ranges(monkeypatch, capsys):
    from snapstore.remote import doctor
    from snapstore.remote import transport as tr

    monkeypatch.setattr(ranges, "_told", False)
    store = tr.ObstoreTransport(tr.memory_store(f"doctor-{id(monkeypatch)}"), "p")
    report = doctor.probe(ranges.RangeFallback(store))
    assert report.ok and not any("Range" in n for n in report.notes)

    def whole(self, key, start, end):  # type: ignore[no-untyped-def]
        raise RangeNotServed(f"cannot read {key} by range")

    monkeypatch.setattr(tr.ObstoreTransport, "get_range", whole)
    report = doctor.probe(ranges.RangeFallback(store))
    assert report.ok and any("ignores ranged reads" in n for n in report.notes)
    assert "does not serve ranged reads" in capsys.readouterr().err
