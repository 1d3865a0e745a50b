"""Hostile history objects: forget records and the bundle's author fields planted by a writer of
the bucket.  Each is bounded before it is decoded, refused in one line naming it (exit 6), and
never makes gc delete what a ref needs.  (A history is a listing, not a chain of links: there is
no chain a planted object could make cycle.)
"""

from __future__ import annotations

import msgpack
import pytest
from remote_helpers import make_store

from snapstore.errors import CorruptError
from snapstore.remote import gc, history, layout
from snapstore.storage.objects import chunk_id
from snapstore.store import Store

NS_KEY = "log/default/"


def _record(doc: object, *, raw: bytes | None = None, key_ns: str = "default") -> tuple[str, bytes]:
    body = history.FORGET_MAGIC + (raw if raw is not None else msgpack.packb(doc, use_bin_type=True))
    return f"log/{key_ns}/{1:020d}-0a-{chunk_id(body)[:8].hex()}.forget", body


def _doc(**fields: object) -> dict[str, object]:
    doc: dict[str, object] = {"v": 1, "ns": "default", "writer": "w", "time_ns": 1, "user": "u", "host": "h",
                              "bundles": [f"{NS_KEY}{1:020d}-w-{'0' * 16}"]}
    doc.update(fields)
    return {k: v for k, v in doc.items() if v is not None}


def _deep(n: int) -> bytes:
    return b"\x91" * n + b"\xc0"


HOSTILE = {
    "nested": _record(None, raw=b"\x81\xa7bundles" + _deep(100_000)),
    "count lie": _record(None, raw=b"\x81\xa7bundles\xdd\x7f\xff\xff\xff"),
    "map count lie": _record(None, raw=b"\xdf\x7f\xff\xff\xff"),
    "bundles not a list": _record(_doc(bundles="log/default/x")),
    "time a string": _record(_doc(time_ns="1")),
    "user a list": _record(_doc(user=["u"] * 10)),
    "user too long": _record(_doc(user="u" * 10_000)),
    "another namespace": _record(_doc(bundles=[f"log/other/{1:020d}-w-{'0' * 16}"])),
    "names a pack": _record(_doc(bundles=["packs/00/" + "0" * 64])),
    "names a forget record": _record(_doc(bundles=[f"{NS_KEY}{1:020d}-w-{'0' * 16}.forget"])),
    "ns not its key's": _record(_doc(), key_ns="other"),
    "extra field": _record({**_doc(), "x": 1}),
    "unknown version": _record(_doc(v=2)),
    "no bundles": _record(_doc(bundles=None)),
    "not msgpack": _record(None, raw=b"\xc1\xc1\xc1"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_forget_record_is_refused_as_corrupt(case):
    key, body = HOSTILE[case]
    with pytest.raises(CorruptError) as exc:
        history.parse_forget(key, body)
    assert key in exc.value.message and "\n" not in exc.value.message


def test_a_forget_record_is_checked_against_its_name_and_size(monkeypatch):
    key, body = _record(_doc())
    assert history.parse_forget(key, body).bundles == _doc()["bundles"]
    with pytest.raises(CorruptError, match="does not match its name"):
        history.parse_forget(key, body + b"\x00")
    monkeypatch.setattr(history, "MAX_FORGET", len(body) - 1)
    with pytest.raises(CorruptError, match="more than a forget record holds"):
        history.parse_forget(key, body)


@pytest.mark.parametrize("fields", [{"user": "u" * 10_000}, {"host": [1, 2]}, {"user": 5}, {"v": 3}])
def test_a_bundle_with_hostile_author_fields_is_refused(fields):
    body = layout.encode_bundle("default", "w", 1, [], [], None)
    doc = msgpack.unpackb(body[len(layout.BUNDLE_MAGIC) :], raw=False)
    doc.update(fields)
    body = layout.BUNDLE_MAGIC + msgpack.packb(doc, use_bin_type=True)
    key = f"{NS_KEY}{1:020d}-w-{chunk_id(body)[:8].hex()}"
    with pytest.raises(CorruptError):
        layout.parse_bundle(key, body)


def _pushed(remote, tmp_path) -> Store:
    a = make_store(tmp_path / "a", {"f.txt": b"one\n"})
    remote.add_to(a)
    a.snapshot("one")
    a.push()
    (tmp_path / "a" / "f.txt").write_bytes(b"two\n")
    a.snapshot("two")
    a.push()
    return a


def test_a_planted_damaged_forget_record_is_exit_6_and_stops_gc(remote, tmp_path, run_cli):
    with _pushed(remote, tmp_path):
        pass
    key, body = HOSTILE["nested"]
    remote.overwrite(key, body)
    before = remote.keys()
    r = run_cli("fetch", cwd=tmp_path / "a")
    assert r.code == 6 and key in r.err and len(r.err.strip().splitlines()) == 1, r.err
    r = run_cli("remote", "verify", cwd=tmp_path / "a")
    assert r.code == 6 and key in r.text
    with pytest.raises(CorruptError):
        gc.run(remote.transport(), grace_s=0, window_s=0)
    assert set(before) <= set(remote.keys())  # gc deleted nothing (it only set its clock)


def test_a_planted_oversized_forget_record_is_refused_unread(remote, tmp_path, monkeypatch):
    with _pushed(remote, tmp_path):
        pass
    monkeypatch.setattr(history, "MAX_FORGET", 1024)
    key, body = _record(_doc(bundles=[f"{NS_KEY}{i:020d}-w-{'0' * 16}" for i in range(200)]))
    remote.overwrite(key, body)
    with pytest.raises(CorruptError, match="more than"):
        history.read(remote.transport(), "default")


def test_a_planted_forget_record_naming_the_refs_bundle_cannot_make_gc_delete_it(remote, tmp_path):
    """A writer of the bucket forgets every bundle of a ref, its head included: the head stays
    (fetch and clone read it through the ref), and gc keeps it and all it needs."""
    with _pushed(remote, tmp_path) as a:
        head = a.resolve("latest").id
    bundles = [k for k in remote.keys("log/default/") if not k.endswith(".forget")]
    key, body = _record(_doc(bundles=bundles))
    remote.overwrite(key, body)
    for _ in range(2):
        report = gc.run(remote.transport(), grace_s=0, window_s=0)
    ref = layout.parse_ref("refs/default", remote.read("refs/default"))
    assert ref.bundle not in report.deleted
    clone = Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint)
    assert clone.refs[0].checkpoint == head and (tmp_path / "c" / "f.txt").read_bytes() == b"two\n"


def test_keys_no_writer_of_ours_made_under_a_history_are_skipped(remote, tmp_path):
    """A key under ``log/<ns>/`` that is not shaped like a bundle's or a forget record's
    (``junk``, ``.hidden``) does not take the ref's history down: it is skipped, as odd ref
    keys are."""
    with _pushed(remote, tmp_path) as a:
        ids = [c.id for c in a.checkpoints()]
    for key in ("log/default/junk", "log/default/.hidden", "log/default/1-2-3.forget"):
        remote.overwrite(key, b"\x00" * 100)
    with make_store(tmp_path / "b", {"x": b"x"}) as b:
        remote.add_to(b)
        with b.remote_view("origin") as view:
            assert {c.id for c in view.checkpoints()} == set(ids)
        assert sorted(b.fetch().refs[0].new_checkpoints) == sorted(ids)
