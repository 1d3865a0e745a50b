"""Browsing a remote (``--remote NAME``) by range reads, on the in-memory store and SeaweedFS.

A history of six pushes leaves six packs.  Reading one file of the latest checkpoint reads the
ref, the bundle, each pack's footer once and the one frame that holds the file; what was read is
kept, so the next command reads only the ref (the freshness rule: refs are read every command).
Damaged, truncated or missing objects are exit 6 in one line naming the object; a failed ranged
read is exit 13; data inline in older bundles is read from their ends; the UI's pages read the
same way; a manifest record swapped under another manifest's id is refused.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import obstore
import pytest
from remote_helpers import Counting, make_store, plant_swapped_manifest

from snapstore.remote import layout
from snapstore.storage import entries
from snapstore.store import Store
from snapstore.testing import random_bytes

STEPS = 6
BIG = 1_500_000


def small(i: int) -> bytes:
    return f"version {i}\n".encode() * 50


@pytest.fixture
def history(remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(a browsing store, the checkpoint ids, the pack keys, the bytes of all packs, the remote)."""
    monkeypatch.setattr(layout, "INLINE_MAX", 0)  # every push writes a pack
    ids = []
    with make_store(tmp_path / "a", {"README.md": small(0)}) as a:
        remote.add_to(a)
        for i in range(STEPS):
            (tmp_path / "a" / "README.md").write_bytes(small(i))
            (tmp_path / "a" / f"big{i}.bin").write_bytes(random_bytes(BIG, f"big{i}"))
            ids.append(a.snapshot(f"step {i}", task="t").id)
            a.push(task="t")
    packs = remote.keys("packs/")
    assert len(packs) == STEPS
    closure = sum(len(remote.read(k)) for k in packs)
    b = make_store(tmp_path / "b", {"mine.txt": b"mine\n"})
    b.snapshot("mine")
    remote.add_to(b)
    entries.clear_cache()  # this process pushed: its chunk cache must not answer for the remote
    try:
        yield b, ids, packs, closure, remote
    finally:
        b.close()


def browse(b: Store, counting: Counting, fn):
    """Run ``fn(view)`` on a fresh view of the remote; ``(its result, its requests by kind,
    the keys of each kind, bytes read)``."""
    entries.clear_cache()
    with b.remote_view("origin") as view:
        result = fn(view)
    t = counting.last
    keys: dict[str, list[str]] = {}
    for kind, key in t.calls:
        keys.setdefault(kind, []).append(key)
    return result, Counter(kind for kind, _ in t.calls), keys, t.bytes_read


def test_cat_reads_the_ref_the_bundle_each_footer_once_and_one_frame(history, monkeypatch):
    b, ids, packs, closure, _ = history
    counting = Counting(monkeypatch)
    data, kinds, keys, read = browse(b, counting, lambda v: v.read_bytes(ids[-1], "README.md"))
    assert data == small(STEPS - 1)
    # config (first contact), LIST refs, GET ref, LIST the ref's history, the head of each of
    # its bundles (one ranged GET per push: each carries only its own checkpoint, and is small
    # enough to come whole); a footer per pack; the manifest's frame (pushes frame manifests
    # apart from file data) and the file's.
    assert kinds == {"get": 2, "list": 2, "suffix": STEPS, "range": STEPS + 2}, keys
    assert sorted(keys["suffix"]) == packs
    assert read < closure / 4, (read, closure)

    # Again: only the ref and its history's listing (from where the last one stopped) are read
    # (refs are read every command: their freshness rule).
    data, kinds, keys, read = browse(b, counting, lambda v: v.read_bytes(ids[-1], "README.md"))
    assert data == small(STEPS - 1)
    assert kinds == {"list": 2, "get": 1} and keys["get"] == ["refs/t"]

    # Another file of another checkpoint: its manifest's frame and its own, from the one pack
    # that holds them.
    data, kinds, keys, read = browse(b, counting, lambda v: v.read_bytes(ids[0], "big0.bin"))
    assert data == random_bytes(BIG, "big0")
    assert "suffix" not in kinds and len(set(keys["range"])) == 1, keys
    assert kinds["range"] == 3 and read < closure / 3, kinds  # the manifest's frame, its two frames

    # show reads its parent's manifest and the changed files it counts lines of; diff the
    # manifest of step 1 (the latest's is cached).  No footer again; the frame counts are the
    # data's (pinned chunker, seeded bytes), the same on every machine: a push frames manifest
    # chunks apart from file data, so the parent's manifest is a frame and its README another.
    for fn, frames in ((lambda v: v.summary(ids[-1]), 3), (lambda v: v.diff(ids[1], ids[-1]), 1)):
        _, kinds, keys, _ = browse(b, counting, fn)
        assert "suffix" not in kinds and kinds["range"] == frames, keys
    # list reads nothing but the ref and its history's listing.
    listed, kinds, _, _ = browse(b, counting, lambda v: v.checkpoints())
    assert [c.id for c in listed] == ids[::-1] and kinds == {"list": 2, "get": 1}


def test_a_new_push_is_seen_by_the_next_command(remote, tmp_path, monkeypatch):
    with make_store(tmp_path / "a", {"f.txt": b"one\n"}) as a:
        remote.add_to(a)
        a.snapshot("one", task="t")
        a.push(task="t")
        b = make_store(tmp_path / "b", {"mine.txt": b"mine\n"})
        remote.add_to(b)
        with b.remote_view("origin") as view:
            assert [c.message for c in view.checkpoints()] == ["one"]
        (tmp_path / "a" / "f.txt").write_bytes(b"two\n")
        two = a.snapshot("two", task="t")
        a.push(task="t")
    counting = Counting(monkeypatch)
    with b.remote_view("origin") as view:
        assert [c.message for c in view.checkpoints()] == ["two", "one"]
        assert view.read_bytes(two.id, "f.txt") == b"two\n"
    # LIST refs, GET ref, LIST its history, the bundle's head: the new data was inline in it
    # and the bundle small enough to come whole with its head (no footer, no frame).
    assert Counter(kind for kind, _ in counting.last.calls) == {"list": 2, "get": 1, "range": 1}
    b.close()


def _damage(remote, key: str, how: str) -> None:
    body = remote.read(key)
    if how == "missing":
        obstore.delete(remote.raw, remote.prefix + key)
    elif how == "truncated":
        remote.overwrite(key, body[:-5])
    else:  # a flipped byte in the middle of every frame (the footer is sound)
        pack = layout.parse_pack(key, body, None)
        out = bytearray(body)
        for f in pack.frames:
            out[f.offset + f.length // 2] ^= 0x55
        remote.overwrite(key, bytes(out))


@pytest.mark.parametrize("how", ["flipped", "truncated", "missing"])
def test_a_damaged_pack_is_exit_6_in_one_line_naming_it(history, run_cli, how):
    b, ids, packs, _, remote = history
    for key in packs:
        _damage(remote, key, how)
    cwd = Path(b.root)
    r = run_cli("cat", "--remote", "origin", ids[-1], "README.md", cwd=cwd)
    assert r.code == 6, (r.code, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and "remote object packs/" in lines[0] and "Traceback" not in r.err, r.err
    expected = {"flipped": "does not match its id", "truncated": "corrupt", "missing": "is missing"}[how]
    assert expected in lines[0] or (how == "flipped" and "does not decompress" in lines[0]), lines[0]


def test_data_inline_in_an_older_bundle_is_read_by_range_from_that_bundle(remote, tmp_path, monkeypatch):
    """Small pushes leave their data inline in their bundles: the latest bundle names the older
    one, whose inline pack ends it, so it is read from its end like a pack (its frame offsets
    are the inline pack's: a wrong base fails every chunk's id).  The older one left every
    history (its ref was deleted), so browsing does not take it up whole: it stays, hidden, for
    the data the latest needs of it."""
    with make_store(tmp_path / "a", {"old.txt": b"pushed first\n" * 100}) as a:
        remote.add_to(a)
        a.snapshot("one", task="t")
        a.push(to="old")
        (tmp_path / "a" / "new.txt").write_bytes(b"pushed second\n" * 100)
        two = a.snapshot("two", task="t")
        a.push(task="t")
        a.remote_ref_delete("old")
    bundles = [k for k in remote.keys("log/") if not k.endswith(".forget")]
    bundles.sort(key=lambda k: k.rsplit("/", 1)[1])  # oldest first (by time)
    assert len(bundles) == 2 and remote.keys("packs/") == []
    entries.clear_cache()
    b = make_store(tmp_path / "b", {"mine.txt": b"mine\n"})
    remote.add_to(b)
    counting = Counting(monkeypatch)
    with b.remote_view("origin") as view:
        assert view.read_bytes(two.id, "old.txt") == b"pushed first\n" * 100
    calls = counting.last.calls
    b.close()
    # The ref's bundle: its head, then its inline pack's end; the older one: one ranged read
    # of its end (a bundle this small comes whole with it, frames and all).
    ranged = [(k, key) for k, key in calls if k in ("suffix", "range")]
    assert ranged[0] == ("range", bundles[1]), ranged
    assert sorted(ranged[1:]) == [("suffix", bundles[0]), ("suffix", bundles[1])], ranged  # (read in parallel)


def test_a_range_read_that_fails_is_exit_13_and_the_next_command_finishes_the_job(history, run_cli, monkeypatch):
    b, ids, _, _, _ = history
    from snapstore.errors import RemoteError

    failing = [True]

    def before(kind: str, key: str) -> None:
        if kind == "range" and key.startswith("packs/") and failing[0]:  # a frame's read
            raise RemoteError(f"cannot read {key} on the remote: connection reset")

    counting = Counting(monkeypatch, before)
    cwd = Path(b.root)
    r = run_cli("cat", "--remote", "origin", ids[-1], "README.md", cwd=cwd)
    assert r.code == 13 and len(r.err.strip().splitlines()) == 1 and "Traceback" not in r.err, r.err
    failing[0] = False
    entries.clear_cache()
    r = run_cli("cat", "--remote", "origin", ids[-1], "README.md", cwd=cwd)
    assert r.code == 0 and r.out == small(STEPS - 1), r.err
    # The footers read before the failure were kept (written when the cache closed).
    assert [k for k, _ in counting.last.calls if k == "suffix"] == []


def test_ui_pages_read_through_and_a_damaged_frame_is_an_error_page(history, monkeypatch):
    """``ui --remote``: pages (served from worker threads) read by range; a frame damaged on the
    remote is the error page naming the pack, and the server stays up."""
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    from snapstore.ui.app import create_app

    b, ids, packs, _, remote = history
    counting = Counting(monkeypatch)
    view = b.remote_view("origin")
    try:
        app = create_app(view, token="t0123456789abcdef", host="127.0.0.1", port=47813, read_only=True, remote="origin")
        client = TestClient(app, base_url="http://127.0.0.1:47813")
        assert client.get("/?token=t0123456789abcdef").status_code == 200
        r = client.get(f"/c/{ids[-1]}/file?path=README.md")
        assert r.status_code == 200 and "version 5" in r.text
        kinds = Counter(kind for kind, _ in counting.last.calls)
        assert kinds["suffix"] == STEPS and kinds["range"] == STEPS + 2, kinds  # the heads, the manifest's frame, the file's
        for key in packs:
            _damage(remote, key, "flipped")
        r = client.get(f"/c/{ids[0]}/file?path=big0.bin")
        assert r.status_code >= 400 and "remote object packs/" in r.text and "Traceback" not in r.text
        assert client.get(f"/c/{ids[-1]}/file?path=README.md").status_code == 200  # read before: kept
    finally:
        view.close()


@pytest.mark.parametrize("where", ["inline", "pack"])
def test_a_manifest_record_moved_under_another_manifest_id_is_refused_by_browsing(remote, tmp_path, monkeypatch, run_cli, where):
    """Browsing checks what fetch checks of a manifest: checkpoint A, whose manifest id a
    planted footer gave B's record, is exit 6 in one line; B still reads."""
    first, second, _ = plant_swapped_manifest(remote, tmp_path, monkeypatch, where)
    entries.clear_cache()
    b = make_store(tmp_path / "b", {"mine.txt": b"mine\n"})
    remote.add_to(b)
    b.close()
    cwd = tmp_path / "b"
    r = run_cli("cat", "--remote", "origin", first, "src/f001.py", cwd=cwd)
    assert r.code == 6 and len(r.err.strip().splitlines()) == 1, r.err
    assert "names neither its tree nor its content" in r.err and "Traceback" not in r.err
    r = run_cli("cat", "--remote", "origin", second, "src/f001.py", cwd=cwd)
    assert r.code == 0 and r.out == b"v = 1\n" * 40, r.err
    # Refused again (the record stays apart; it never reached the cache's streams).
    assert run_cli("cat", "--remote", "origin", first, "src/f001.py", cwd=cwd).code == 6
