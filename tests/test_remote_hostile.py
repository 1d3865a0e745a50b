"""A writer of the bucket is hostile: what it plants costs a reader O(its size), breaks only
itself, and is never kept (docs/reliability.md, "A remote bucket writer").

Every test runs on obstore's in-memory store and on a real SeaweedFS; the CLI ones run a real
``snapstore`` process against SeaweedFS and measure its peak memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import assert_one_line_error, subprocess_env
from remote_helpers import Counting, make_store, sample_tree

from snapstore.errors import CorruptError
from snapstore.remote import layout
from snapstore.storage.objects import chunk_id
from snapstore.store import Store

MB = 1 << 20
#: The size of every planted object (the issue's: 8 MB took a reader from 35 MiB to ~600 MiB).
BOMB = 8 * MB


def bomb(size: int = BOMB) -> bytes:
    """msgpack ``[[], [], ...]``: one byte per empty list, ~64 bytes each once decoded."""
    n = size - 5
    return b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n


def peak_of(call: Callable[[], Any]) -> tuple[Any, int]:
    """``call()``'s result (or the exception it raised) and the peak of Python allocations."""
    tracemalloc.start()
    try:
        try:
            result: Any = call()
        except Exception as exc:  # the caller asserts which
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _published(remote, tmp_path: Path) -> Store:
    """A store that pushed two sound refs, ``default`` and ``other``."""
    a = make_store(tmp_path / "a", sample_tree("a"))
    remote.add_to(a)
    a.snapshot("first")
    a.push()
    (tmp_path / "a" / "README.md").write_bytes(b"second\n")
    a.snapshot("second")
    a.push(to="other")
    return a


def _fresh(remote, path: Path) -> Store:
    path.mkdir()
    c = Store.init(path)
    remote.add_to(c)
    return c


def _plant_bundle(remote, body_after_magic: bytes, name: str = "aaa", checkpoint: bytes = b"\x01" * 32) -> str:
    """A bundle of the given body under a key that matches its hash, and ref ``name`` (listed
    before the sound ones) at it."""
    body = layout.BUNDLE_MAGIC + body_after_magic
    key = layout.bundle_key(name, 1, "w" * 16, body)
    remote.overwrite(key, body)
    remote.overwrite(layout.ref_key(name), layout.encode_ref(layout.Ref(checkpoint, key, 1, "w" * 16)))
    return key


def _sound_record(remote) -> tuple[bytes, bytes]:
    """A checkpoint record the remote publishes (what a planted bundle may claim to need data for)."""
    ref = layout.parse_ref("refs/default", remote.read("refs/default"))
    return layout.parse_bundle(ref.bundle, remote.read(ref.bundle)).checkpoints[-1]


def _plant_needing(remote, pack: bytes) -> str:
    """Plant ``pack`` (named by its hash) and a bundle whose sound checkpoint needs it."""
    pack_key = layout.pack_key(chunk_id(pack))
    remote.overwrite(pack_key, pack)
    cid, rec = _sound_record(remote)
    return _plant_bundle(remote, _bundle_of([(cid, rec)], [pack_key]), checkpoint=cid)


def _bundle_of(checkpoints: list[tuple[bytes, bytes]], needs: list[str]) -> bytes:
    return layout.encode_bundle("aaa", "w" * 16, 1, checkpoints, needs, None)[len(layout.BUNDLE_MAGIC) :]


def _bomb_pack() -> bytes:
    """A pack whose footer is the bomb (its tail and magic sound, named by its hash)."""
    footer = bomb()
    return layout.PACK_MAGIC + b"\0" * layout.NONCE + footer + len(footer).to_bytes(4, "big") + layout.PACK_MAGIC


# -- class 1: memory bombs -------------------------------------------------------------------


def test_a_giant_ref_is_refused_unread_and_the_sound_refs_are_served(remote, tmp_path):
    with _published(remote, tmp_path) as a:
        remote.overwrite("refs/zbomb", bomb())
        got, peak = peak_of(lambda: a.remote_ls())
        assert peak < BOMB / 2, peak  # never even read
        assert isinstance(got, CorruptError) and "refs/zbomb" in str(got) and "more than" in str(got)
        problems: list[str] = []
        rows = a.remote_ls(problems=problems)
        assert [r["ref"] for r in rows] == ["default", "other"]
        assert len(problems) == 1 and "refs/zbomb" in problems[0]
    with _fresh(remote, tmp_path / "c") as c:
        got, peak = peak_of(lambda: c.fetch(["zbomb"]))
        assert peak < BOMB / 2, peak
        assert isinstance(got, CorruptError) and "refs/zbomb" in str(got)
        report = c.fetch(keep_going=True)
        assert sorted(r.name for r in report.refs) == ["default", "other"]
        assert len(report.problems) == 1 and "refs/zbomb" in report.problems[0]
        assert len(c.checkpoints()) == 2 and c.verify().ok


@pytest.mark.parametrize("kind", ["bundle", "footer", "record", "needs", "conversation"])
def test_a_planted_bomb_costs_a_fetch_o_of_its_size(remote, tmp_path, kind):
    """Bundles, pack footers and the records inside them are bounded as they are decoded."""
    with _published(remote, tmp_path):
        pass
    if kind == "bundle":
        key = _plant_bundle(remote, bomb())
    elif kind == "footer":
        key = _plant_needing(remote, _bomb_pack())
    elif kind == "record":
        record = bomb()
        key = _plant_bundle(remote, _bundle_of([(chunk_id(record), record)], []))
    elif kind == "needs":  # a list of short strings (not a container bomb: ~50 bytes each)
        n = BOMB // 3
        key = _plant_bundle(remote, b"\x81\xa5needs\xdd" + n.to_bytes(4, "big") + b"\xa2ab" * n)
    else:  # a conversation record carried by a pack's footer
        record = bomb()
        key = _plant_needing(remote, layout.encode_pack([], [], [(chunk_id(record), record)]))
    with _fresh(remote, tmp_path / "c") as c:
        got, peak = peak_of(lambda: c.fetch(["aaa"]))
        # The object is read whole (it is needed): a copy or two of it, never 8x.
        assert peak < 4 * BOMB, peak
        assert isinstance(got, CorruptError) and "corrupt" in str(got), got
        assert key in str(got) or "packs/" in str(got), got
        assert c.checkpoints() == []
        report = c.fetch(keep_going=True)
        assert sorted(r.name for r in report.refs) == ["default", "other"]
        assert len(report.problems) == 1 and "corrupt" in report.problems[0], report.problems
        assert len(c.checkpoints()) == 2


def test_a_bombed_gc_plan_and_config_are_refused_in_bounded_memory(remote, tmp_path):
    with _published(remote, tmp_path) as a:
        remote.overwrite("gc/plan", bomb())
        got, peak = peak_of(lambda: a.remote_gc(grace_s=0, window_s=0))
        assert isinstance(got, CorruptError) and "gc/plan" in str(got)
        assert peak < 4 * BOMB, peak
        remote.overwrite("config", bomb())
    with _fresh(remote, tmp_path / "c") as c:
        got, peak = peak_of(lambda: c.remote_ls())
        assert isinstance(got, CorruptError) and "config" in str(got)
        assert peak < BOMB / 2, peak  # refused unread


_PEAK = (
    "def _peak():\n"
    "    try:\n"  # the process's own high-water mark (ru_maxrss keeps the parent's across exec)
    "        with open('/proc/self/status') as f:\n"
    "            return next(int(line.split()[1]) * 1024 for line in f if line.startswith('VmHWM:'))\n"
    "    except (OSError, StopIteration):\n"
    "        import resource\n"
    "        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == 'darwin' else 1024)\n"
)


def _run_measured(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120):
    """Run ``snapstore ARGS`` in a real process; (result, its peak RSS in bytes)."""
    out = cwd.parent / f"peak-rss-{os.getpid()}"
    code = (
        "import atexit, sys\n" + _PEAK +
        f"atexit.register(lambda: open({str(out)!r}, 'w').write(str(_peak())))\n"
        "from snapstore.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                       env=env or subprocess_env(), timeout=timeout)
    return r, int(out.read_text())


@pytest.mark.parametrize("what", ["ref", "bundle"])
def test_the_cli_says_one_line_exits_6_and_stays_small(remote, tmp_path, what):
    if remote.kind != "seaweedfs":
        pytest.skip("a real process needs a real engine")
    with _published(remote, tmp_path):
        pass
    with _fresh(remote, tmp_path / "c"):
        pass
    base_ls, base_rss = _run_measured(["remote", "ls"], tmp_path / "c")
    assert base_ls.returncode == 0, base_ls.stderr
    if what == "ref":
        remote.overwrite("refs/zbomb", bomb())
    else:
        _plant_bundle(remote, bomb(), name="zbomb")
    for args in (["remote", "ls"], ["fetch"]):
        r, rss = _run_measured(args, tmp_path / "c")
        if what == "bundle" and args == ["remote", "ls"]:
            assert r.returncode == 0, r.stderr  # the ref itself is sound: listed
            assert b"zbomb" in r.stdout
            continue
        assert r.returncode == CorruptError.exit_code == 6, r.stderr
        assert_one_line_error(r.stderr)
        assert b"zbomb" in r.stderr
        assert b"default" in r.stdout and b"other" in r.stdout  # the sound refs are served
        # An 8 MB planted object: the reader grows by a few copies of it at most (~600 MiB before).
        assert rss < base_rss + 4 * BOMB, (rss, base_rss)
    with Store.open(tmp_path / "c") as c:
        assert len(c.checkpoints()) == 2


# -- class 4: odd ref keys and damaged refs --------------------------------------------------


def test_odd_ref_keys_are_skipped_and_a_damaged_ref_is_reported_not_fatal(remote, tmp_path, run_cli):
    with _published(remote, tmp_path):
        pass
    sound = remote.read("refs/default")
    remote.overwrite("refs/%41", sound)  # decodes to "A", whose key is refs/A
    remote.overwrite("refs/.hidden", sound)  # no writer of ours makes a key starting with "."
    remote.overwrite("refs/damaged", b"\x81\xa1v\x01")
    with _fresh(remote, tmp_path / "c"):
        pass
    r = run_cli("fetch", "--json", cwd=tmp_path / "c")
    assert r.code == 6, r.err
    doc = json.loads(r.text)
    assert sorted(ref["name"] for ref in doc["refs"]) == ["default", "other"]
    assert len(doc["problems"]) == 1 and "refs/damaged" in doc["problems"][0]
    with Store.open(tmp_path / "c") as c:
        assert len(c.checkpoints()) == 2
        problems: list[str] = []
        assert [r["ref"] for r in c.remote_ls(problems=problems)] == ["default", "other"]
        assert len(problems) == 1 and "refs/damaged" in problems[0]
    r = run_cli("list", "--remote", "origin", cwd=tmp_path / "c")
    assert r.code == 0, r.err
    assert "first" in r.text and "second" in r.text
    assert r.err.count("refs/damaged") == 1 and "Traceback" not in r.err


# -- class 3: a fetched record passes the local checks ---------------------------------------


def _plant_local(store: Store, change: Callable[[list[Any]], list[Any]]) -> str:
    """A checkpoint in ``store`` whose manifest is its latest one's entries changed by
    ``change`` (written as a buggy or hostile writer would: nothing checks it)."""
    from snapstore.records import manifest
    from snapstore.records.checkpoint import USER, build_record, next_seq, write_rows

    base = store.resolve("latest")
    with store.backend.read() as view:
        entries = change(list(manifest.iter_entries(view.get, base.manifest)))
    with store.backend.write() as batch:
        mid, _, rec = manifest.write_manifest(sorted(entries, key=lambda e: e.path), lambda k, v: batch.put("chunks", k, v))
        if rec is not None:
            batch.put("streams", mid, rec)
        cid, packed = build_record(
            parent=base.id, time_ns=base.time_ns + 1, message="planted", task=None, tags=[], kind=USER,
            manifest=mid, conversation=None, metadata={}, stats=base.stats,
        )
        with batch.reading() as view:
            last = next(iter(view.items("log", reverse=True)))[0]
        write_rows(batch, cid, packed, next_seq(last), None, [])
    return cid.hex()


@pytest.mark.parametrize("damage", ["dotdot", "absolute", "store", "size"])
def test_fetch_keeps_no_checkpoint_the_local_verify_would_call_damaged(remote, tmp_path, damage):
    def change(entries: list[Any]) -> list[Any]:
        e = next(x for x in entries if x.path == b"README.md")
        bad = {
            "dotdot": e._replace(path=b"../x"),
            "absolute": e._replace(path=b"/etc/x"),
            "store": e._replace(path=b".snapstore/lock"),
            "size": e._replace(path=b"README.zz", size=e.size + 1),
        }[damage]
        return [*entries, bad]

    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        first = a.snapshot("first")
        planted = _plant_local(a, change)
        a.push([planted], to="evil")
        a.push([first.id], to="good")
    with make_store(tmp_path / "c", {"mine.txt": b"mine\n"}) as c:
        mine = c.snapshot("mine")
        remote.add_to(c)
        with pytest.raises(CorruptError, match=planted):
            c.fetch(["evil"])
        report = c.fetch(keep_going=True)
        assert [r.name for r in report.refs] == ["good"]
        assert len(report.problems) == 1 and planted in report.problems[0], report.problems
        ids = [cp.id for cp in c.checkpoints()]
        assert planted not in ids
        assert c.verify().ok
        # The sound fetched checkpoint is there, and the local one is still latest.
        assert len(ids) == 2 and first.id in ids and c.resolve("latest").id == mine.id


def test_a_fetched_checkpoint_never_becomes_the_local_parent(remote, tmp_path):
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        theirs = a.snapshot("theirs", task="t")
        a.push(task="t")
    with make_store(tmp_path / "c", {"mine.txt": b"mine\n"}) as c:
        c.snapshot("one", task="mine")
        (tmp_path / "c" / "mine.txt").write_bytes(b"mine, changed\n")
        mine = c.snapshot("two", task="mine")
        assert len(c.history("mine.txt")) == 2  # the path index has rows for both
        remote.add_to(c)
        c.fetch()
        assert theirs.id in [cp.id for cp in c.checkpoints()]
        assert c.resolve("latest").id == mine.id
        assert [cp.id for cp in c.checkpoints(task="mine")][0] == mine.id
        assert c.verify().ok
        (tmp_path / "c" / "mine.txt").write_bytes(b"mine, changed again\n")
        after = c.snapshot("three")
        assert after.parent == mine.id
        assert [v.checkpoint.id for v in c.history("mine.txt")][-1] == after.id
        assert c.verify().ok


# -- class 5: push verifies what it reuses ---------------------------------------------------


@pytest.mark.parametrize("how", ["verify", "age"])
def test_a_push_never_names_an_object_the_remote_lost(remote, tmp_path, monkeypatch, how):
    from snapstore.remote import push

    monkeypatch.setattr(layout, "INLINE_MAX", 0)  # every push makes a pack
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        a.snapshot("first")
        first = a.push()
        [lost] = [k for k in remote.keys("packs/")]
        assert first.packs == 1
        remote.transport().delete(lost)
        if how == "verify":
            assert not a.remote_verify().ok  # it finds the loss, and the store remembers it
        else:
            monkeypatch.setattr(push, "CONFIRM_AGE", 0, raising=False)  # every reused object is HEADed
        (tmp_path / "a" / "README.md").write_bytes(b"changed\n")
        a.snapshot("second")
        second = a.push()
        bundle = layout.parse_bundle(second.bundle, remote.read(second.bundle))
        assert lost not in bundle.needs
        assert second.chunks_new > 3  # the lost data was sent again
        # Only the first push's bundle still names the lost pack (what remote verify says).
        assert {p["object"] for p in a.remote_verify().problems} == {lost, first.bundle}
    Store.clone(remote.url, tmp_path / "b", endpoint=remote.endpoint)
    assert (tmp_path / "b" / "README.md").read_bytes() == b"changed\n"


def test_a_reused_object_is_headed_only_once_it_is_old(remote, tmp_path, monkeypatch):

    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        a.snapshot("first")
        a.push()
        (tmp_path / "a" / "README.md").write_bytes(b"changed\n")
        a.snapshot("second")
        counting = Counting(monkeypatch)
        a.push()
        assert not [c for c in counting.last.calls if c[0] == "head"]  # seen just now
        from snapstore.remote import push

        monkeypatch.setattr(push, "CONFIRM_AGE", 0, raising=False)
        (tmp_path / "a" / "README.md").write_bytes(b"changed again\n")
        a.snapshot("third")
        a.push()
        assert [c for c in counting.last.calls if c[0] == "head"]


# -- class 12: a failed clone removes only what it made --------------------------------------


def test_a_failed_clone_keeps_a_file_the_user_saved_meanwhile(remote, tmp_path, monkeypatch):

    monkeypatch.setattr(layout, "INLINE_MAX", 0)
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        a.snapshot("first")
        a.push()
    [pack] = remote.keys("packs/")
    remote.overwrite(pack, b"damaged")
    target = tmp_path / "b"
    target.mkdir()

    def before(kind: str, key: str) -> None:
        if key.startswith("packs/") and not (target / "notes.txt").exists():
            (target / "notes.txt").write_bytes(b"saved while the clone ran\n")

    Counting(monkeypatch, before)
    with pytest.raises(CorruptError):
        Store.clone(remote.url, target, endpoint=remote.endpoint)
    assert sorted(os.listdir(target)) == ["notes.txt"]
    assert (target / "notes.txt").read_bytes() == b"saved while the clone ran\n"


# -- classes 13, 14, 15: what reaches the terminal, credentials ------------------------------


def test_remote_text_cannot_drive_the_terminal(remote, tmp_path, run_cli):
    evil = "done \x1b]52;c;aGFjaw==\x07 \x1b[2J\x9b31m"
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        a.snapshot(evil, task="t\x1b[1m")
        a.push(task="t\x1b[1m")
    with _fresh(remote, tmp_path / "c"):
        pass
    for args in (["list", "--remote", "origin"], ["remote", "ls"], ["fetch"], ["show", "latest", "--remote", "origin"]):
        r = run_cli(*args, cwd=tmp_path / "c")
        assert r.code == 0, (args, r.err)
        for control in ("\x1b", "\x07", "\x9b"):
            assert control not in r.text and control not in r.err, (args, r.text)
    assert "\\x1b]52" in run_cli("list", "--remote", "origin", cwd=tmp_path / "c").text


def _store_with_remote(tmp_path: Path, url: str = "s3://bucket/p", endpoint: str | None = None) -> Path:
    with make_store(tmp_path / "s", {"f": b"x"}) as s:
        s.snapshot("one")
        s.remote_add("origin", url, endpoint=endpoint)
    return tmp_path / "s"


def test_a_mistyped_credential_url_is_never_echoed(tmp_path, run_cli):
    with make_store(tmp_path / "s", {"f": b"x"}):
        pass
    for url in ("s3:/AKIAEXAMPLE:wJalrXUtnFEMIK7MDENGbPxRfiCYzz@bucket/p", "https://AKIAEXAMPLE:wJalrXUtnFEMIK7MDENGbPxRfiCYzz@host/b",
                "s3//wJalrXUtnFEMIK7MDENGbPxRfiCYzz@bucket", "s3://bucket/p?X-Amz-Signature=wJalrXUtnFEMIK7MDENGbPxRfiCYzz"):
        r = run_cli("remote", "add", "origin", url, cwd=tmp_path / "s")
        assert r.code == 2, (url, r.err)
        assert "wJalrXUtnFEMIK7MDENGbPxRfiCYzz" not in r.err, r.err
        r = run_cli("clone", url, str(tmp_path / "c"))
        assert r.code == 2 and "wJalrXUtnFEMIK7MDENGbPxRfiCYzz" not in r.err, r.err
    r = run_cli("remote", "add", "origin", "s3://bucket/p", "--endpoint", "ftp://u:wJalrXUtnFEMIK7MDENGbPxRfiCYzz@h", cwd=tmp_path / "s")
    assert r.code == 2 and "wJalrXUtnFEMIK7MDENGbPxRfiCYzz" not in r.err, r.err


def test_an_engine_body_that_reflects_the_token_is_not_printed(tmp_path, run_cli, monkeypatch):
    import http.server
    import threading

    class Reflect(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            token = self.headers.get("x-amz-security-token", "")
            body = f"<Error><Code>AccessDenied</Code><Message>token {token} \x1b]52;c;aGk=\x07</Message></Error>".encode()
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_HEAD = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Reflect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cwd = _store_with_remote(tmp_path, endpoint=f"http://127.0.0.1:{server.server_port}")
        token = "IQoJb3JpZ2luX2VjEXAMPLE-session-token"
        env = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "not-shown-secret", "AWS_SESSION_TOKEN": token}
        for args in (["remote", "ls"], ["push"]):
            r = run_cli(*args, cwd=cwd, env=env)
            assert r.code == 13, r.err
            assert_one_line_error(r.err)
            assert token not in r.err and "not-shown-secret" not in r.err
            assert "\x1b" not in r.err and "\x07" not in r.err
            assert "AccessDenied" in r.err  # what the engine said, not what it echoed
    finally:
        server.shutdown()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "huge", "secret-line", "token-fifo"])
def test_the_credentials_file_is_a_bounded_regular_file(tmp_path, kind):
    cwd = _store_with_remote(tmp_path, endpoint="http://127.0.0.1:9")
    path = tmp_path / "credentials"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":
        path.write_bytes(b"[default]\n" + b"# padding\n" * (300_000))
    elif kind == "secret-line":
        path.write_text("aws_secret_access_key = wJalrXUtnFEMIK7MDENGbPxRfiCYzz\n[default]\n")
    else:  # the web-identity token file obstore would read itself
        os.mkfifo(path)
    env = subprocess_env(AWS_SHARED_CREDENTIALS_FILE=str(path))
    if kind == "token-fifo":
        env = subprocess_env(AWS_WEB_IDENTITY_TOKEN_FILE=str(path), AWS_ROLE_ARN="arn:aws:iam::1:role/r")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(var, None)
    r, rss = _run_measured(["remote", "ls"], cwd, env=env, timeout=30)
    assert r.returncode == 2, r.stderr
    assert_one_line_error(r.stderr)
    assert b"credentials file" in r.stderr or b"AWS_WEB_IDENTITY_TOKEN_FILE" in r.stderr
    assert b"wJalrXUtnFEMIK7MDENGbPxRfiCYzz" not in r.stderr
    assert rss < 200 * MB


# -- class 6: remote verify and fetch hold one object at a time, not the remote ---------------


def test_remote_verify_and_fetch_memory_is_bounded_by_the_largest_object(remote, tmp_path, monkeypatch):
    """Their peak does not grow with the remote: measured at 8 and at 20 packs of 2 MiB (the
    process's bounded caches of frames and chunks shrunk, so they fill at once)."""
    from snapstore.remote import fetch
    from snapstore.storage import entries
    from snapstore.testing import random_bytes

    monkeypatch.setattr(layout, "INLINE_MAX", 0)  # every push makes a pack
    monkeypatch.setattr(entries, "CACHE_BYTES", 1 * MB)
    monkeypatch.setattr(entries, "CHUNK_CACHE_BYTES", 1 * MB)
    step = 2 * MB
    peaks: dict[str, list[int]] = {"verify": [], "fetch": []}
    with make_store(tmp_path / "a", {"seed.txt": b"seed\n"}) as a:
        remote.add_to(a)
        for i in range(20):  # each push adds a pack of ~2 MiB of incompressible data
            (tmp_path / "a" / f"data{i}.bin").write_bytes(random_bytes(step, f"d{i}"))
            a.snapshot(f"step {i}")
            a.push()
            if i + 1 not in (8, 20):  # (past 6, a fetch has READERS objects in flight)
                continue
            report, peak = peak_of(lambda: a.remote_verify())
            assert report.ok, report.problems
            peaks["verify"].append(peak)
            with _fresh(remote, tmp_path / f"c{i}") as c:
                _, peak = peak_of(lambda: c.fetch())
                assert len(c.checkpoints()) == i + 1 and c.verify().ok  # the whole history
                peaks["fetch"].append(peak)
    # 24 MiB more on the remote: verify grows by less than one object (it held all of it)...
    small, big = peaks["verify"]
    assert big < small + step, (small, big)
    # ...and fetch holds the objects it reads ahead, whatever the remote (a timing decides how
    # many are ready at once, so a bound, not a comparison).
    assert max(peaks["fetch"]) < (fetch.READERS + 4) * step + 8 * MB, peaks["fetch"]


def test_a_legal_record_of_many_tiny_items_is_not_taken_for_a_bomb(remote, tmp_path):
    """The bound on a checkpoint record follows its schema (metadata of up to 100,000 items),
    not its length: the most metadata a local checkpoint may hold still crosses a remote."""
    from snapstore.records import schema

    items = schema.MAX_METADATA_ITEMS - 10
    with make_store(tmp_path / "a", sample_tree("a")) as a:
        remote.add_to(a)
        cp = a.snapshot("many", metadata={"xs": list(range(items // 2)), "ys": [{}] * (items // 2 - 2)})
        a.push()
    with _fresh(remote, tmp_path / "c") as c:
        c.fetch()
        assert len(c.resolve(cp.id).metadata["xs"]) == items // 2


def test_a_credential_value_in_an_error_line_is_removed(monkeypatch):
    """Short secrets (under the 40-character token rule) too: an access key id or a secret the
    user set is never printed, whatever part of an error quotes it (the mutation list's M21)."""
    from snapstore.remote import transport

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSHORT1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter2-secret")
    line = transport._first_line(RuntimeError("auth failed for AKIDSHORT1 with hunter2-secret\nmore"))
    assert "AKIDSHORT1" not in line and "hunter2-secret" not in line and "[redacted]" in line
