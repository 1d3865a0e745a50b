"""Client-side encryption of a remote (docs/remote.md, "Encryption"), on both engines.

What the bucket holds is read behind the client's back (``remote.raw``): no plaintext, no chunk
id, no ref name; a bucket writer who flips, cuts or swaps objects is refused with nothing
written; a wrong or missing key is one line and exit 14.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import assert_one_line_error
from remote_helpers import make_store, remote, sample_tree, seaweed  # noqa: F401

from snapstore.remote import crypto, keys
from snapstore.remote import transport as tr
from snapstore.store import Store
from snapstore.testing import assert_trees_equal, read_tree

PASS = "correct horse battery staple"


@pytest.fixture(autouse=True)
def passphrase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(keys.PASSPHRASE_ENV, PASS)


def _tree(marker: str) -> dict[str, object]:
    files = sample_tree("crypt")
    files["notes/secret.txt"] = f"the launch code is {marker}\n".encode()
    return files


def _push(tmp_path: Path, remote, run_cli, *extra: str, task: str = "launch-plan", name: str = "a") -> Path:  # noqa: F811
    cwd = tmp_path / name
    marker = "MARKER-" + os.urandom(8).hex()
    with make_store(cwd, _tree(marker)) as s:
        s.snapshot("first", task=task)
    r = run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), *extra, cwd=cwd)
    assert r.code == 0, r.err
    r = run_cli("push", "--task", task, cwd=cwd)
    assert r.code == 0, r.err
    return cwd


def _chunk_ids(cwd: Path) -> list[bytes]:
    with Store.open(cwd) as s, s.backend.read() as view:
        return [k for k, _ in view.items("chunks")] + [k for k, _ in view.items("streams")]


def _bucket(remote) -> dict[str, bytes]:  # noqa: F811
    return {k: remote.read(k) for k in remote.keys()}


def _marker(cwd: Path) -> bytes:
    return (cwd / "notes/secret.txt").read_bytes().split()[-1]


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_the_bucket_holds_no_plaintext_no_chunk_id_and_no_ref_name(remote, tmp_path, run_cli, encrypted):  # noqa: F811
    """The plain run is the control: the same greps find the marker, the ids and the task name."""
    cwd = _push(tmp_path, remote, run_cli, *(["--encrypt"] if encrypted else []))
    bucket = _bucket(remote)
    blob = b"\0".join(bucket.values())
    names = "\n".join(bucket)
    ids = _chunk_ids(cwd)
    assert len(ids) > 5
    found = {
        "marker": _marker(cwd) in blob,
        "task in names": "launch-plan" in names,
        "task in bodies": b"launch-plan" in blob,
        "chunk ids": any(i in blob or i.hex().encode() in blob or i.hex() in names for i in ids),
        "message": b"first" in blob,
    }
    if not encrypted:
        assert all(found.values()), found
        return
    assert not any(found.values()), found
    tops = {k.split("/")[0] for k in bucket}
    assert {"config", "crypt", "keys", "log", "refs"} <= tops <= {"config", "crypt", "keys", "log", "refs", "packs"}, tops
    assert all(v.startswith(crypto.MAGIC) for k, v in bucket.items() if k.split("/")[0] not in crypto.OWN)


def test_push_and_clone_round_trip_byte_exact(remote, tmp_path, run_cli):  # noqa: F811
    cwd = _push(tmp_path, remote, run_cli, "--encrypt")
    r = run_cli("clone", remote.url, str(tmp_path / "b"), *remote.cli_args(), "--encrypt", "--ref", "launch-plan")
    assert r.code == 0, r.err
    assert_trees_equal(read_tree(cwd), read_tree(tmp_path / "b"))
    # An incremental push and a fetch of it; then the range reads of browsing (cat --remote).
    (cwd / "src/app.py").write_bytes(b"print('v2')\n" * 3000)
    assert run_cli("snapshot", "-m", "second", "--task", "launch-plan", cwd=cwd).code == 0
    assert run_cli("push", "--task", "launch-plan", cwd=cwd).code == 0
    r = run_cli("pull", "launch-plan", cwd=tmp_path / "b")
    assert r.code == 0, r.err
    assert_trees_equal(read_tree(cwd), read_tree(tmp_path / "b"))
    r = run_cli("cat", "--remote", "origin", "latest", "data/blob.bin", cwd=tmp_path / "b")
    assert r.code == 0, r.err
    assert r.out == (cwd / "data/blob.bin").read_bytes()
    for args in (["remote", "verify"], ["remote", "doctor"], ["remote", "gc", "--dry-run"], ["remote", "ls"]):
        r = run_cli(*args, cwd=cwd)
        assert r.code == 0, (args, r.err)
    assert "launch-plan" in r.text


def test_a_key_file_opens_it_and_another_does_not(remote, tmp_path, run_cli):  # noqa: F811
    key = tmp_path / "team.key"
    key.write_bytes(os.urandom(32).hex().encode() + b"\n")
    cwd = _push(tmp_path, remote, run_cli, "--key-file", str(key))
    r = run_cli("clone", remote.url, str(tmp_path / "b"), *remote.cli_args(), "--key-file", str(key))
    assert r.code == 0, r.err
    assert_trees_equal(read_tree(cwd), read_tree(tmp_path / "b"))
    other = tmp_path / "other.key"
    other.write_bytes(os.urandom(32).hex().encode())
    r = run_cli("clone", remote.url, str(tmp_path / "c"), *remote.cli_args(), "--key-file", str(other))
    assert r.code == 14 and "no key of the remote" in r.err
    assert_one_line_error(r.err)
    assert not (tmp_path / "c").exists()


def test_a_wrong_passphrase_is_one_line_exit_14_and_writes_nothing(remote, tmp_path, run_cli, monkeypatch):  # noqa: F811
    cwd = _push(tmp_path, remote, run_cli, "--encrypt")
    before = _bucket(remote)
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "not the passphrase")
    r = run_cli("clone", remote.url, str(tmp_path / "b"), *remote.cli_args(), "--encrypt")
    assert r.code == 14, r.err
    assert_one_line_error(r.err)
    assert not (tmp_path / "b").exists()
    for args in (["push", "--task", "launch-plan"], ["fetch"], ["remote", "ls"], ["list", "--remote", "origin"]):
        r = run_cli(*args, cwd=cwd)
        assert r.code == 14, (args, r.err)
        assert_one_line_error(r.err)
    assert _bucket(remote) == before
    # No passphrase at all and no terminal to ask on: one line naming the ways to give one.
    monkeypatch.delenv(keys.PASSPHRASE_ENV)
    r = run_cli("fetch", cwd=cwd)
    assert r.code == 14 and keys.PASSPHRASE_ENV in r.err
    assert_one_line_error(r.err)


def test_a_client_without_the_key_and_a_key_on_a_plain_remote(remote, tmp_path, run_cli):  # noqa: F811
    _push(tmp_path, remote, run_cli, "--encrypt")
    r = run_cli("clone", remote.url, str(tmp_path / "b"), *remote.cli_args())
    assert r.code == 14 and "is encrypted" in r.err and "--encrypt" in r.err
    assert_one_line_error(r.err)
    assert not (tmp_path / "b").exists()
    with make_store(tmp_path / "p", {"a.txt": b"a"}) as s:
        s.snapshot("plain")
    other = tmp_path / "p"
    plain_url = remote.url + "-plain"
    assert run_cli("remote", "add", "origin", plain_url, *remote.cli_args(), cwd=other).code == 0
    assert run_cli("push", cwd=other).code == 0
    r = run_cli("clone", plain_url, str(tmp_path / "c"), *remote.cli_args(), "--encrypt")
    assert r.code == 14 and "not encrypted" in r.err
    assert_one_line_error(r.err)


def test_a_missing_key_file(remote, tmp_path, run_cli):  # noqa: F811
    with make_store(tmp_path / "a", {"a.txt": b"a"}) as s:
        s.snapshot("first")
    cwd = tmp_path / "a"
    r = run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), "--key-file", str(tmp_path / "nope"), cwd=cwd)
    assert r.code == 14 and "nope" in r.err
    assert_one_line_error(r.err)
    key = tmp_path / "k"
    key.write_bytes(b"a long enough secret for this test")
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), "--key-file", str(key), cwd=cwd).code == 0
    assert run_cli("push", cwd=cwd).code == 0
    key.unlink()
    r = run_cli("push", cwd=cwd)
    assert r.code == 14 and "key file" in r.err
    assert_one_line_error(r.err)
    r = run_cli("clone", remote.url, str(tmp_path / "b"), *remote.cli_args(), "--key-file", str(key))
    assert r.code == 14
    assert_one_line_error(r.err)
    assert not (tmp_path / "b").exists()


def _two_refs(tmp_path: Path, remote, run_cli) -> tuple[Path, dict[str, str]]:  # noqa: F811
    """Two tasks pushed (two refs, two bundles, a pack): the stored name of each plain key."""
    cwd = _push(tmp_path, remote, run_cli, "--encrypt", task="one")
    (cwd / "big.bin").write_bytes(os.urandom(3 << 20))  # a pack, not inline data
    assert run_cli("snapshot", "-m", "two", "--task", "two", cwd=cwd).code == 0
    assert run_cli("push", "--task", "two", cwd=cwd).code == 0
    cfg = Store.open(cwd)
    try:
        from snapstore.remote import state

        crypt = state.get_config(cfg.backend, "origin").crypt
    finally:
        cfg.close()
    assert crypt is not None
    t = keys.open_remote(remote.transport(), "origin", keys.secret_from("origin", None), hint=crypt["key_id"], create=False)
    assert t.ciphers is not None
    plain = {crypto.plain_key(t.ciphers, k): k for k in remote.keys()}
    return cwd, {k: v for k, v in plain.items() if k is not None}


def _clone_fails(remote, tmp_path: Path, run_cli, ref: str, what: str) -> None:  # noqa: F811
    target = tmp_path / ("clone-" + ref)
    r = run_cli("clone", remote.url, str(target), *remote.cli_args(), "--encrypt", "--ref", ref)
    assert r.code == 6, (what, r.code, r.err)
    assert_one_line_error(r.err)
    assert "corrupt" in r.err, r.err
    assert not target.exists(), what


@pytest.mark.parametrize("damage", ["flip a pack", "cut a pack", "cut a bundle on a segment", "swap two refs",
                                    "swap two bundles"])
def test_a_bucket_writer_is_detected_and_nothing_is_written(remote, tmp_path, run_cli, damage):  # noqa: F811
    cwd, names = _two_refs(tmp_path, remote, run_cli)
    pack = next(k for k in names if k.startswith("packs/"))
    bundles = sorted(k for k in names if k.startswith("log/"))
    assert len(bundles) == 2
    if damage == "flip a pack":
        body = bytearray(remote.read(names[pack]))
        body[len(body) // 2] ^= 1
        remote.overwrite(names[pack], bytes(body))
    elif damage == "cut a pack":
        remote.overwrite(names[pack], remote.read(names[pack])[:-100])
    elif damage == "cut a bundle on a segment":
        b2 = next(b for b in bundles if "/two/" in b)
        body = remote.read(names[b2])
        full = crypto.SEGMENT + crypto.OVERHEAD
        cut = len(crypto.MAGIC) + (len(body) - len(crypto.MAGIC)) // full * full
        assert cut < len(body)
        remote.overwrite(names[b2], body[:cut] if cut > len(crypto.MAGIC) else body[:-1])
    elif damage == "swap two refs":
        one, two = remote.read(names["refs/one"]), remote.read(names["refs/two"])
        remote.overwrite(names["refs/one"], two)
        remote.overwrite(names["refs/two"], one)
    else:
        one, two = (remote.read(names[b]) for b in bundles)
        remote.overwrite(names[bundles[0]], two)
        remote.overwrite(names[bundles[1]], one)
    _clone_fails(remote, tmp_path, run_cli, "two", damage)
    r = run_cli("remote", "verify", cwd=cwd)
    assert r.code == 6, r.err
    # A fetch into a fresh store adds no checkpoint of the damaged ref.
    with make_store(tmp_path / "f", {"x": b"x"}) as s:
        s.snapshot("own")
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), "--encrypt", cwd=tmp_path / "f").code == 0
    r = run_cli("fetch", "two", "--json", cwd=tmp_path / "f")
    assert r.code == 6, r.err
    assert json.loads(run_cli("list", "--json", cwd=tmp_path / "f").text)["checkpoints"].__len__() == 1


def test_remote_key_add_list_remove(remote, tmp_path, run_cli, monkeypatch):  # noqa: F811
    cwd = _push(tmp_path, remote, run_cli, "--encrypt")
    assert "(encrypted)" in run_cli("remote", "list", cwd=cwd).text
    assert json.loads(run_cli("remote", "list", "--json", cwd=cwd).text)[0]["encrypted"] is True
    first = json.loads(run_cli("remote", "key", "list", "origin", "--json", cwd=cwd).text)
    assert [k["current"] for k in first] == [True]
    assert run_cli("remote", "key", "add", "origin", cwd=cwd).code == 14  # no new passphrase and no terminal
    monkeypatch.setenv(keys.NEW_PASSPHRASE_ENV, "a second passphrase")
    r = run_cli("remote", "key", "add", "origin", cwd=cwd)
    assert r.code == 0, r.err
    second = r.text.split()[2]
    listed = json.loads(run_cli("remote", "key", "list", "origin", "--json", cwd=cwd).text)
    assert sorted(k["id"] for k in listed) == sorted([first[0]["id"], second])
    # The second passphrase opens the remote; a key cannot remove itself, another can.
    monkeypatch.setenv(keys.PASSPHRASE_ENV, "a second passphrase")
    r = run_cli("clone", remote.url, str(tmp_path / "b"), *remote.cli_args(), "--encrypt")
    assert r.code == 0, r.err
    assert_trees_equal(read_tree(cwd), read_tree(tmp_path / "b"))
    r = run_cli("remote", "key", "remove", "origin", second, cwd=tmp_path / "b")
    assert r.code == 2 and "another key" in r.err
    r = run_cli("remote", "key", "remove", "origin", first[0]["id"], cwd=tmp_path / "b")
    assert r.code == 0, r.err
    assert run_cli("remote", "key", "remove", "origin", "0123", cwd=tmp_path / "b").code == 2
    # The first passphrase no longer opens it (its key is gone), even where it was remembered.
    monkeypatch.setenv(keys.PASSPHRASE_ENV, PASS)
    r = run_cli("fetch", cwd=cwd)
    assert r.code == 14, r.err
    assert_one_line_error(r.err)


def test_help_and_a_plain_remote_never_import_cryptography(remote, tmp_path):  # noqa: F811
    import subprocess
    import sys

    from helpers import subprocess_env

    with make_store(tmp_path / "a", {"a.txt": b"a"}) as s:
        s.snapshot("first")
        remote.add_to(s)
        s.push()
    code = (
        "import sys\n"
        "from snapstore.cli import main\n"
        "for args in (['remote', 'key', '--help'], ['remote', 'add', '--help'], ['push', '-q']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, (args, e.code)\n"
        "print('cryptography' in sys.modules)\n"
    )
    env = subprocess_env(**remote.env)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120, cwd=tmp_path / "a")
    if remote.kind == "memory":  # a memory store lives in one process: only the help is checked there
        code = code.replace(", ['push', '-q']", "")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=120, cwd=tmp_path / "a")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip().splitlines()[-1] == "False"


def test_browsing_reads_an_encrypted_pack_by_range_at_a_plain_remote_s_cost(remote, tmp_path, run_cli, monkeypatch):  # noqa: F811
    """``cat --remote`` of a small file beside 3 MiB of packed data: the encrypted remote is
    read by range too (footer and one frame, not the pack), for at most a few segments more."""
    from remote_helpers import Counting

    files = {"small.txt": b"a small file\n" * 10, **{f"big{i}.bin": os.urandom(1 << 20) for i in range(3)}}
    read: dict[str, tuple[int, int]] = {}
    real = tr.connect
    for kind in ("plain", "encrypted"):
        url = f"{remote.url}-{kind}"
        flags = ["--encrypt"] if kind == "encrypted" else []
        with make_store(tmp_path / kind, files) as s:
            s.snapshot("packed")
        assert run_cli("remote", "add", "origin", url, *remote.cli_args(), *flags, cwd=tmp_path / kind).code == 0
        assert run_cli("push", cwd=tmp_path / kind).code == 0
        with make_store(tmp_path / f"{kind}-reader", {"x": b"x"}) as s:
            s.snapshot("own")
        reader = tmp_path / f"{kind}-reader"
        assert run_cli("remote", "add", "origin", url, *remote.cli_args(), *flags, cwd=reader).code == 0
        counting = Counting(monkeypatch)
        r = run_cli("cat", "--remote", "origin", "latest", "small.txt", cwd=reader)
        assert r.code == 0 and r.out == files["small.txt"], r.err
        pack_calls = [k for kind_, k in counting.last.calls if kind_ in ("range", "suffix", "get") and k.startswith("packs/")]
        assert pack_calls and all(kind_ != "get" for kind_, k in counting.last.calls if k.startswith("packs/"))
        read[kind] = (counting.last.bytes_read, len(pack_calls))
        monkeypatch.setattr(tr, "connect", real)
    (plain, n), (sealed, m) = read["plain"], read["encrypted"]
    assert m == n
    assert sealed <= plain + m * 2 * (crypto.SEGMENT + crypto.OVERHEAD) + 4096, read
    assert sealed < 1 << 20, read  # not the 3 MiB pack


class _Between(tr.Transport):
    """Runs ``then`` once, right after this client's first key is written and before its
    ``crypt`` (another client's whole first push landing in that gap)."""

    def __init__(self, inner: tr.Transport, then) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.then = inner, then

    def __getattribute__(self, name: str):  # type: ignore[no-untyped-def]
        if name in ("put_create", "inner", "then"):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "inner"), name)

    def put_create(self, key: str, data: bytes) -> str | None:
        got = self.inner.put_create(key, data)
        if key.startswith(keys.KEYS) and self.then is not None:
            then, self.then = self.then, None
            then()
        return got


@pytest.mark.parametrize("same_secret", [True, False], ids=["same passphrase", "another passphrase"])
def test_two_first_pushes_at_once_leave_one_master_key(remote, same_secret):  # noqa: F811
    winner: list[keys.Opened] = []

    def other_client() -> None:
        winner.append(keys.open_remote(remote.transport(), "origin", lambda new: b"first", hint=None, create=True))

    mine = b"first" if same_secret else b"second"
    loser = _Between(remote.transport(), other_client)
    if same_secret:
        opened = keys.open_remote(loser, "origin", lambda new: mine, hint=None, create=True)
        assert opened.master == winner[0].master and opened.key_id == winner[0].key_id
    else:
        from snapstore.errors import EncryptionKeyError

        with pytest.raises(EncryptionKeyError):
            keys.open_remote(loser, "origin", lambda new: mine, hint=None, create=True)
    assert remote.keys(keys.KEYS) == [keys.KEYS + str(winner[0].key_id)]  # the loser's key was removed


def test_the_passphrase_is_asked_on_the_terminal(remote, tmp_path, run_cli, monkeypatch):  # noqa: F811
    """No SNAPSTORE_PASSPHRASE: a first push asks twice on the terminal (a real pty), a later
    command once; a mistyped second entry makes nothing."""
    import pty
    import sys

    from helpers import subprocess_env

    if remote.kind == "memory":
        pytest.skip("a memory remote lives in one process")
    monkeypatch.delenv(keys.PASSPHRASE_ENV)
    with make_store(tmp_path / "a", _tree("tty")) as s:
        s.snapshot("first")
    assert run_cli("remote", "add", "origin", remote.url, *remote.cli_args(), "--encrypt", cwd=tmp_path / "a").code == 0
    env = subprocess_env(**remote.env)
    env.pop(keys.PASSPHRASE_ENV, None)

    def on_tty(args: list[str], answers: list[str]) -> tuple[int, str]:
        pid, fd = pty.fork()
        if pid == 0:  # the child: its controlling terminal is the pty
            os.chdir(tmp_path / "a")
            os.execve(sys.executable, [sys.executable, "-m", "snapstore", *args], env)
        out = b""
        for answer in answers:
            while b": " not in out.rsplit(b"\n", 1)[-1]:
                chunk = os.read(fd, 1024)
                assert chunk, out
                out += chunk
            os.write(fd, answer.encode() + b"\n")
            out += b"\n"
        try:
            while chunk := os.read(fd, 1024):
                out += chunk
        except OSError:
            pass  # EIO: the child closed the terminal
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status), out.decode(errors="replace")

    code, text = on_tty(["push"], ["tty pass", "tty typo"])
    assert code == 14 and "differ" in text, text
    assert not remote.keys(), remote.keys()
    code, text = on_tty(["push"], ["tty pass", "tty pass"])
    assert code == 0, text
    assert text.count("passphrase for remote origin") == 1 and "the same again" in text
    code, text = on_tty(["remote", "ls"], ["tty pass"])
    assert code == 0 and "default" in text, text


# -- the layer alone (in-memory engine): ranges across segments, sizes, names ----------------------------------


def _sealed() -> tuple[crypto.EncryptedTransport, tr.Transport]:
    inner = tr.connect(__import__("snapstore.remote.names", fromlist=["parse_url"]).parse_url(f"memory://{os.urandom(6).hex()}/p"))
    return crypto.EncryptedTransport(inner, crypto.Ciphers(os.urandom(32))), inner


@pytest.mark.parametrize("size", [0, 1, crypto.SEGMENT - 1, crypto.SEGMENT, crypto.SEGMENT + 1, 5 * crypto.SEGMENT + 77])
def test_ranges_and_suffixes_read_what_the_plain_object_holds(size):
    t, inner = _sealed()
    data = os.urandom(size)
    assert t.put_create("packs/ab/cd", data) is not None
    got = t.get("packs/ab/cd")
    assert got is not None and got.body == data
    head = t.head("packs/ab/cd")
    assert head is not None and head.size == size
    assert [e.key for e in t.list("packs/")] == ["packs/ab/cd"] and next(iter(t.list("packs/"))).size == size
    for start, end in [(0, size), (1, size - 1), (crypto.SEGMENT - 3, crypto.SEGMENT + 5), (size // 2, size)]:
        if 0 <= start < end <= size:
            assert t.get_range("packs/ab/cd", start, end) == data[start:end], (start, end)
    for n in [1, 100, crypto.SEGMENT, crypto.SEGMENT + 1, 3 * crypto.SEGMENT, size + 10]:
        assert t.get_suffix("packs/ab/cd", n) == (data[max(0, size - n) :], size), n


def test_ranges_refuse_a_cut_object():
    from snapstore.errors import CorruptError

    t, inner = _sealed()
    data = os.urandom(3 * crypto.SEGMENT)
    t.put_create("packs/ab/cd", data)
    stored = next(iter(inner.list("packs/"))).key
    body = inner.get(stored).body  # type: ignore[union-attr]
    inner.delete(stored)
    inner.put_create(stored, body[: len(crypto.MAGIC) + 3 * (crypto.SEGMENT + crypto.OVERHEAD)])  # the final segment gone
    with pytest.raises(CorruptError):
        t.get_range("packs/ab/cd", 2 * crypto.SEGMENT, 3 * crypto.SEGMENT + 1)
    with pytest.raises(CorruptError):
        t.get_suffix("packs/ab/cd", 10)
    with pytest.raises(CorruptError):
        t.get("packs/ab/cd")
    assert t.get_range("packs/ab/cd", 0, 100) == data[:100]  # what is there is still authentic


def test_a_planted_key_object_asking_for_huge_scrypt_memory_is_refused_unread():
    from snapstore.errors import CorruptError

    body = keys.wrap(os.urandom(32), b"x", "00")
    import msgpack

    d = msgpack.unpackb(body)
    d["n"] = 1 << 20
    with pytest.raises(CorruptError):
        keys.unwrap("00", msgpack.packb(d), b"x")


def test_the_layer_covers_every_transport_method():
    """A request the layer did not wrap would reach the bucket in the clear (or fail): every
    public method of Transport is the layer's own."""
    methods = [n for n, v in vars(tr.Transport).items() if callable(v) and not n.startswith("_")]
    assert len(methods) >= 8
    missing = [n for n in methods if n not in vars(crypto.EncryptedTransport)]
    assert not missing, missing
