"""Browsing reads each bundle's head and its inline pack by range (remote/heads.py): a bundle a
bucket writer altered behind the name's hash is still refused, record by record.

Two pushes of one task: the first bundle holds ``old.txt`` inline, the second (the ref's) needs
it.  ``cat --remote`` of ``old.txt`` at the second checkpoint reads the second bundle's head, the
first's, both inline footers and a frame.  Each damage below is refused quickly (a lying count
or length is never allocated) in a line naming the bundle, no traceback: exit 6 where the read
needs the damaged data; a damaged head of the ref's bundle skips the ref, as every damaged ref
is (a warning line), and its checkpoint is unknown (exit 4).  The sound history reads.
"""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from helpers import assert_one_line_error
from remote_helpers import make_store, remote, seaweed  # noqa: F401 - fixtures

from snapstore.remote import heads, layout
from snapstore.storage import entries
from snapstore.testing import random_bytes

OLD = b"".join(b"line %d of the old file\n" % i for i in range(3000))


def _history(remote, tmp_path: Path) -> tuple[str, list[str]]:  # noqa: F811
    """The second checkpoint's id and the two bundles' keys, oldest first."""
    with make_store(tmp_path / "a", {"old.txt": OLD}) as a:
        remote.add_to(a)
        a.snapshot("one", task="t")
        a.push(task="t")
        (tmp_path / "a" / "new.bin").write_bytes(random_bytes(30_000, "new"))
        two = a.snapshot("two", task="t")
        a.push(task="t")
    bundles = sorted(remote.keys("log/t/"), key=lambda k: k.rsplit("/", 1)[1])
    assert len(bundles) == 2 and all(len(remote.read(k)) > heads.HEAD_READ for k in bundles)
    return two.id, bundles


def _reader(remote, tmp_path: Path) -> Path:  # noqa: F811
    with make_store(tmp_path / "b", {"mine.txt": b"mine\n"}) as b:
        b.snapshot("mine")
        remote.add_to(b)
    entries.clear_cache()  # this process pushed: its chunk cache must not answer for the remote
    return tmp_path / "b"


def _rebuild(body: bytes, key: str, *, frames=None, **fields) -> bytes:  # type: ignore[no-untyped-def]
    """The bundle ``body`` re-encoded with ``fields`` changed and, with ``frames`` (a function
    of the inline footer's frame index), its inline pack's footer rewritten."""
    b = layout.parse_bundle(key, body)
    inline = b.inline.body if b.inline is not None else None
    if frames is not None and inline is not None:
        flen = layout.footer_length(key, inline[-layout.TAIL_SIZE:], len(inline))
        start = len(inline) - layout.TAIL_SIZE - flen
        doc = msgpack.unpackb(inline[start : len(inline) - layout.TAIL_SIZE])
        doc["frames"] = frames(doc["frames"])
        footer = msgpack.packb(doc, use_bin_type=True)
        inline = inline[:start] + footer + len(footer).to_bytes(4, "big") + layout.PACK_MAGIC
    doc = {"ns": b.ns, "writer": b.writer, "time_ns": b.time_ns, "checkpoints": b.checkpoints, "needs": b.needs,
           "user": b.user, "host": b.host, "inline": inline, **fields}
    return layout.encode_bundle(doc["ns"], doc["writer"], doc["time_ns"], doc["checkpoints"], doc["needs"],
                                doc["inline"], user=doc["user"], host=doc["host"])


def _claim_inline(body: bytes, key: str, length: int) -> bytes:
    """The bundle with its inline pack's header claiming ``length`` bytes, 2,000 following."""
    plain = _rebuild(body, key, inline=None)
    assert plain.endswith(b"\xc0")  # the inline field, last, empty
    return plain[:-1] + b"\xc6" + length.to_bytes(4, "big") + bytes(2000)


def _altered_record(body: bytes, key: str) -> bytes:
    b = layout.parse_bundle(key, body)
    (cid, rec), *rest = b.checkpoints
    return _rebuild(body, key, checkpoints=[(cid, rec.replace(b"two", b"owt")), *rest])


DAMAGE = {
    # the first bundle (old.txt's data): its inline footer lies, or it is cut
    "a frame past the footer": (0, lambda body, key: _rebuild(body, key, frames=lambda fs: [[o, n + 64, m] for o, n, m in fs])),
    "a frame of a huge length": (0, lambda body, key: _rebuild(body, key, frames=lambda fs: [[o, 1 << 40, m] for o, n, m in fs])),
    "frames that overlap": (0, lambda body, key: _rebuild(body, key, frames=lambda fs: [*fs, *fs])),
    "a frame before the pack": (0, lambda body, key: _rebuild(body, key, frames=lambda fs: [[0, n, m] for o, n, m in fs])),
    "an inline pack longer than the bundle": (0, lambda body, key: _claim_inline(body, key, (1 << 31) - 1)),
    "the bundle cut short": (0, lambda body, key: body[:-7]),
    "the bundle cut in its head": (0, lambda body, key: body[: heads.HEAD_READ + 1]),
    # the second bundle (the ref's): its head lies
    "a record swapped in from the other bundle": (1, None),
    "a record altered": (1, _altered_record),
    "a time other than its key's": (1, lambda body, key: _rebuild(body, key, time_ns=1)),
    "a namespace other than its key's": (1, lambda body, key: _rebuild(body, key, ns="u")),
    "a count of four billion records": (1, lambda body, key: layout.BUNDLE_MAGIC + b"\x81\xabcheckpoints\xdd\xff\xff\xff\xff"
                                        + b"\x92" * 4000),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_bundle_altered_behind_its_name_is_refused_in_a_line_naming_it(remote, tmp_path, run_cli, damage):  # noqa: F811
    two, bundles = _history(remote, tmp_path)
    which, how = DAMAGE[damage]
    key = bundles[which]
    if how is None:  # the first push's record in place of the second's
        first = layout.parse_bundle(bundles[0], remote.read(bundles[0]))
        body = _rebuild(remote.read(key), key, checkpoints=first.checkpoints)
    else:
        body = how(remote.read(key), key)
    remote.overwrite(key, body)
    cwd = _reader(remote, tmp_path)
    r = run_cli("cat", "--remote", "origin", two, "old.txt", cwd=cwd)
    assert "Traceback" not in r.err and f"remote object {key} " in r.err, r.err
    if which == 0:  # found when the read needs that bundle's data
        assert r.code == 6, (damage, r.code, r.err)
        assert_one_line_error(r.err)
    else:  # the ref's own bundle: browsing skips the ref (a line), so its checkpoint is unknown
        lines = r.err.strip().splitlines()
        assert r.code == 4 and len(lines) == 2 and lines[0].startswith("snapstore: warning: skipped: "), r.err
        assert "unknown checkpoint" in lines[1], r.err


def test_the_sound_history_reads_by_heads_and_ranges(remote, tmp_path, run_cli):  # noqa: F811
    two, bundles = _history(remote, tmp_path)
    cwd = _reader(remote, tmp_path)
    r = run_cli("cat", "--remote", "origin", two, "old.txt", cwd=cwd)
    assert r.code == 0 and r.out == OLD, r.err
    size = sum(len(remote.read(k)) for k in bundles)
    head = heads.read_head(remote.transport(), bundles[1])
    assert head is not None and head.inline is None and head.inline_at is not None
    assert head.inline_at[1] == len(remote.read(bundles[1])) and size > 30_000


def test_an_encrypted_history_is_read_by_heads_and_a_flipped_byte_is_refused(remote, tmp_path, run_cli, monkeypatch):  # noqa: F811
    """On an encrypted remote the head and footer reads align to sealed segments and stay
    authenticated: a byte flipped at a bundle's end is exit 6, a wrong passphrase exit 14."""
    from remote_helpers import Counting

    from snapstore.remote import keys

    monkeypatch.setenv(keys.PASSPHRASE_ENV, "correct horse battery staple")
    cwd = tmp_path / "a"
    make_store(cwd, {"old.txt": OLD}).close()
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), "--encrypt", cwd=cwd).code == 0
    for step in ("one", "two"):
        (cwd / f"{step}.bin").write_bytes(random_bytes(30_000, step))
        assert run_cli("snapshot", "-m", step, "--task", "t", cwd=cwd).code == 0
        assert run_cli("push", "--task", "t", cwd=cwd).code == 0
    readers = []
    for name in ("b", "c", "d"):
        make_store(tmp_path / name, {"mine.txt": b"mine\n"}).close()
        assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), "--encrypt", cwd=tmp_path / name).code == 0
        readers.append(tmp_path / name)
    entries.clear_cache()
    counting = Counting(monkeypatch)
    r = run_cli("cat", "--remote", "origin", "latest", "old.txt", cwd=readers[0])
    assert r.code == 0 and r.out == OLD, r.err
    assert not [k for kind, k in counting.last.calls if kind == "get" and k.startswith("log/")], counting.last.calls

    for key in remote.keys("log/"):  # a byte of each bundle's last segment (its inline footer)
        body = bytearray(remote.read(key))
        body[-40] ^= 1
        remote.overwrite(key, bytes(body))
    entries.clear_cache()
    r = run_cli("cat", "--remote", "origin", "latest", "old.txt", cwd=readers[1])
    assert r.code == 6 and "does not decrypt" in r.err, r.err
    assert_one_line_error(r.err)
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "another passphrase")
    r = run_cli("cat", "--remote", "origin", "latest", "old.txt", cwd=readers[2])
    assert r.code == 14, r.err
    assert_one_line_error(r.err)


def test_heads_that_grow_along_a_history_cost_a_request_each():
    """A push's head lists the objects its checkpoints need, so heads grow along a history:
    each first read is sized by the heads read before it (HeadReader), one request per bundle
    past the first, and never the inline data."""
    from snapstore.remote import transport as tr
    from snapstore.remote.transport import Transport

    class Ranges(Transport):
        def __init__(self, inner: Transport) -> None:
            self.inner, self.calls, self.read = inner, 0, 0

        def get_range(self, key: str, start: int, end: int) -> bytes | None:
            self.calls += 1
            got = self.inner.get_range(key, start, end)
            self.read += len(got or b"")
            return got

    inner = tr.ObstoreTransport(tr.memory_store(f"heads-{id(Ranges)}"), "p")
    inline = layout.encode_pack([], [], []) + bytes(20_000)  # 20 KB the head reads must not reach
    keys = []
    for i in range(12):
        needs = [layout.pack_key(bytes([j]) * 32) for j in range(10 * (i + 1))]  # ~80 B a key
        body = layout.encode_bundle("t", "ab", 10**18 + i, [], needs, inline)
        key = layout.bundle_key("t", 10**18 + i, "ab", body)
        inner.put_create(key, body)
        keys.append(key)
    t = Ranges(inner)
    reader = heads.HeadReader(t)
    got = [reader(k) for k in keys]
    assert all(b is not None and b.inline is None and b.inline_at is not None for b in got)
    assert [len(b.needs) for b in got if b is not None] == [10 * (i + 1) for i in range(12)]
    head_bytes = sum(b.inline_at[0] for b in got if b is not None and b.inline_at is not None)
    assert t.calls <= len(keys) + 2, t.calls
    assert t.read < 2 * head_bytes, (t.read, head_bytes)


def test_clone_at_an_old_checkpoint_reads_the_newer_pushes_heads_only(remote, tmp_path, monkeypatch):  # noqa: F811
    """``clone --at``: the history is searched newest first by bundle heads; only the bundle
    that holds the checkpoint is read whole (its name checked), not the newer pushes' data."""
    from remote_helpers import Counting

    from snapstore.store import Store

    ids = []
    with make_store(tmp_path / "a", {"old.txt": OLD}) as a:
        remote.add_to(a)
        for i in range(5):
            (tmp_path / "a" / "data.bin").write_bytes(random_bytes(40_000, f"d{i}"))
            ids.append(a.snapshot(f"step {i}", task="t").id)
            a.push(task="t")
    bundles = sorted(remote.keys("log/t/"), key=lambda k: k.rsplit("/", 1)[1])
    counting = Counting(monkeypatch)
    Store.clone(remote.url, tmp_path / "c", endpoint=remote.endpoint, ref="t", at=ids[0][:12])
    assert (tmp_path / "c" / "data.bin").read_bytes() == random_bytes(40_000, "d0")
    calls = counting.last.calls
    whole = [k for kind, k in calls if kind == "get" and k.startswith("log/")]
    assert whole == [bundles[0]], calls
    newer = sum(len(remote.read(k)) for k in bundles[1:])
    assert counting.last.bytes_read < len(remote.read(bundles[0])) + newer / 4, (counting.last.bytes_read, newer)
