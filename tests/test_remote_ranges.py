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

from snapstore.remote import layout, ranges
from snapstore.remote.s3errors import RangeNotServed
from snapstore.remote.transport import Got, Transport
from snapstore.storage import entries
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


def test_cat_of_one_file_reads_the_history_its_footers_and_its_frame_only(remote, tmp_path):  # noqa: F811
    files: dict[str, object] = {f"src/m{j}.txt": _text(f"m{j}", 16_000) for j in range(40)}
    with make_store(tmp_path / "a", {**files, "keep.txt": _text("keep", 12_000)}) as a:
        remote.add_to(a)
        a.snapshot("first", task="t")
        a.push(task="t")
        for i in range(STEPS):
            for k in range(2):
                (tmp_path / "a" / f"step{k}.bin").write_bytes(random_bytes(24_000, f"s{i}-{k}"))
            cp = a.snapshot(f"step {i}", task="t")
            a.push(task="t")
    raw = {k: remote.read(k) for k in remote.keys()}
    ref = layout.parse_ref("refs/t", raw["refs/t"])
    latest = layout.parse_bundle(ref.bundle, raw[ref.bundle])
    assert not [k for k in latest.needs if k.startswith("packs/")]  # all inline, as in the trial
    history = [k for k in raw if k.startswith("log/t/")]
    assert len(history) == STEPS + 1 and all(len(raw[k]) > 40_000 for k in history[1:]), [len(raw[k]) for k in history]
    footers = sum(layout.footer_length(k, raw[k][-layout.TAIL_SIZE:], len(raw[k])) + layout.TAIL_SIZE
                  for k in latest.needs)
    largest_frame = max(f.length for k in latest.needs for f in _frames(k, raw[k]))
    # Browsing takes up the ref's whole history (every pushed checkpoint is listed), and reads
    # each bundle of it whole today, inline data included (reading only their records by range
    # is the next step): that is the metadata this read needs, besides the footers.
    meta = len(raw["config"]) + len(raw["refs/t"]) + sum(len(raw[k]) for k in history) + footers

    b = make_store(tmp_path / "b", {"mine.txt": b"mine\n"})
    b.snapshot("mine")
    remote.add_to(b)
    counting = Counting(pytest.MonkeyPatch())
    entries.clear_cache()  # this process pushed: its chunk cache must not answer for the remote
    try:
        with b.remote_view("origin") as view:
            assert view.read_bytes(cp.id, "keep.txt") == _text("keep", 12_000)
    finally:
        b.close()
    read = counting.last.bytes_read
    assert read <= 2 * largest_frame + meta, (read, largest_frame, meta)
    requests = len(counting.last.calls)
    assert requests <= 5 + len(history) + 2 * len(latest.needs) + 1, counting.last.calls  # config, LISTs, ref, bundles; footers; frame


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
