"""Hostile and broken input: each case gets a clear error (its documented exit code) or a
documented skip, nothing outside the tree is written, and nothing stored is lost.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import msgpack
import pytest
from torture_tally import FULL

from snapstore.errors import ConflictError, CorruptError, TreeIOError, UnsafePathError
from snapstore.records.manifest import FILE, SYMLINK, Entry
from snapstore.storage import objects
from snapstore.storage.objects import chunk_id
from snapstore.store import FORMAT_VERSION, Store
from snapstore.testing import Symlink, build_tree, random_bytes, read_tree, tree_from_store
from snapstore.tree import scan

REPO = Path(__file__).resolve().parents[2]
CASE = pytest.mark.torture_case("hostile input")
PWNED = b"pwned\n"


def _env(**extra) -> dict[str, str]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **extra)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("SNAPSTORE_STORE", None)
    env.pop("SNAPSTORE_DEBUG", None)
    return env


def snapstore(*args, cwd, user: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snapstore", *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, timeout=120)


def one_line(err: bytes) -> str:
    text = err.decode("utf-8", "replace")
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    assert text.startswith("snapstore: error: "), text
    return text


# -- hostile manifests -------------------------------------------------------------------------


def plant(store: Store, entries: list[Entry], *, content: bytes = PWNED) -> str:
    """A checkpoint with arbitrary entries, written through the internal API."""
    from restore_helpers import plant_checkpoint

    return plant_checkpoint(store, entries, content)


def pwned(path: bytes, size: int = len(PWNED)) -> Entry:
    return Entry(path, FILE, 0o644, size, 0, chunk_id(PWNED))


HOSTILE = {
    "traversal": [pwned(b"../escape.txt")],
    "deep traversal": [pwned(b"a/../../escape.txt")],
    "absolute": [pwned(b"/tmp/snapstore-torture-absolute.txt")],
    "empty part": [pwned(b"a//b")],
    "dot part": [pwned(b"a/./b")],
    "NUL": [pwned(b"ok\x00/../../escape.txt")],
    ".git": [pwned(b".git/hooks/post-checkout")],
    "the store": [pwned(b".snapstore/data.mdb")],
    "symlinked parent": [
        Entry(b"evil", SYMLINK, 0o777, 0, 0, b"../outside"),
        pwned(b"evil/passwd"),
    ],
    "file as parent": [pwned(b"f"), pwned(b"f/under")],
}


@CASE
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_manifest_is_refused_before_any_write(tmp_path, case):
    root, outside = tmp_path / "tree", tmp_path / "outside"
    outside.mkdir()
    (outside / "passwd").write_bytes(b"root:x:0:0\n")
    build_tree(root, {"keep.txt": b"keep\n", "a/b.txt": b"b\n"})
    with Store.init(root) as store:
        store.snapshot("A", tags=["good"])
        before, outside_before = read_tree(root), read_tree(outside)
        ref = plant(store, HOSTILE[case])
    done = snapstore("restore", ref, cwd=root)
    # Every case is a path restore must not write: UnsafePathError (exit 10), before any write.
    assert done.returncode == UnsafePathError.exit_code, done.stderr
    one_line(done.stderr)
    assert read_tree(root) == before
    assert read_tree(outside) == outside_before
    assert not (tmp_path / "escape.txt").exists()
    assert not Path("/tmp/snapstore-torture-absolute.txt").exists()
    with Store.open(root) as store:
        store.restore("good")  # the good checkpoint is still there and restores
        assert read_tree(root) == before


@CASE
@pytest.mark.parametrize(
    "what",
    [
        # An entry whose size disagrees with its content is a damaged manifest: restore refuses
        # it before the first write (16.3) and verify names it.
        "size",
        "mode",
        "count",
    ],
)
def test_absurd_sizes_and_counts(tmp_path, what):
    root = tmp_path / "tree"
    build_tree(root, {"keep.txt": b"keep\n"})
    with Store.init(root) as store:
        store.snapshot("A", tags=["good"])
        before = read_tree(root)
        if what == "size":
            entries = [pwned(b"huge.bin", size=1 << 62)]
        elif what == "mode":
            entries = [Entry(b"odd", FILE, 0o7777, 6, -1, chunk_id(PWNED))]
        else:
            # (restore fsyncs every file: ~3 ms each here, so the bounded run uses fewer)
            entries = [pwned(b"d/f%05d" % i) for i in range(20_000 if FULL else 1000)]
        ref = plant(store, entries)
        if what == "size":
            # Refused before any write: the size is not the content's.
            with pytest.raises(CorruptError):
                store.restore(ref)
            assert read_tree(root) == before
        else:
            # Accepted: an odd mode is applied without its set-id/sticky bits (issue 10.10) and
            # a large count is only large; the stored bytes are written.
            store.restore(ref)
            for e in entries:
                p = root / os.fsdecode(e.path)
                assert p.read_bytes() == PWNED
                assert p.stat().st_mode & 0o7000 == 0
        store.restore("good")
        assert read_tree(root) == before
        # verify names the entry whose recorded size its content contradicts
        problems = store.verify().problems
        assert [p.path for p in problems] == (["huge.bin"] if what == "size" else []), problems


# -- corrupted and truncated records -------------------------------------------------------------


@pytest.fixture
def damaged_setup(tmp_path):
    """Checkpoints A and B (B with a big multi-chunk file and a longer conversation)."""
    root = tmp_path / "tree"
    build_tree(root, {"a.txt": b"A\n", "big.bin": random_bytes(200_000, "A")})
    with Store.init(root) as store:
        a = store.snapshot("A", tags=["good"], conversation=[{"role": "user", "content": "hi"}])
        spec_a = read_tree(root)
        build_tree(root, {"a.txt": b"B\n", "big.bin": random_bytes(300_000, "B")})
        b = store.snapshot(
            "B", tags=["bad"],
            conversation=[{"role": "user", "content": "hi"}] + [{"n": i} for i in range(300)],
        )
        spec_b = read_tree(root)
        with store.backend.read() as view:
            ea = {e.path: e for e in store.entries(a.id)}
            eb = {e.path: e for e in store.entries(b.id)}
            big_b = eb[b"big.bin"].ref
            _, _, index_root = objects.parse_stream_record(big_b, view.get("streams", big_b))
            a_leaves = set(objects.leaf_ids(view.get, ea[b"big.bin"].ref))
            unique_leaf = next(c for c in objects.leaf_ids(view.get, big_b) if c not in a_leaves)
            a_manifest = set(objects.leaf_ids(view.get, a.manifest))
            m_chunk = next(c for c in objects.leaf_ids(view.get, b.manifest) if c not in a_manifest)
    targets = {
        "content chunk": ("chunks", unique_leaf),
        "stream record": ("streams", big_b),
        "index node": ("chunks", index_root),
        "manifest chunk": ("chunks", m_chunk),
        "checkpoint record": ("checkpoints", bytes.fromhex(b.id)),
        "conversation record": ("conversations", b.conversation),
    }
    return root, spec_a, spec_b, targets


#: What ``damaged_setup`` can damage.
DAMAGE_TARGETS = ["content chunk", "stream record", "index node", "manifest chunk", "checkpoint record",
                  "conversation record"]


def damage(root: Path, table: str, key: bytes, how: str) -> None:
    with Store.open(root) as store:
        with store.backend.read() as view:
            value = view.get(table, key)
        assert value is not None, (table, key)
        if how == "flip":
            new = bytearray(value)
            new[len(new) // 2] ^= 0x55
            value = bytes(new)
        else:
            value = value[: len(value) // 2]
        with store.backend.write() as batch:
            batch.put(table, key, value)


@CASE
@pytest.mark.parametrize("how", ["flip", "truncate"] if FULL else ["flip"])
@pytest.mark.parametrize("target", DAMAGE_TARGETS)
def test_damaged_record_is_reported_and_the_rest_is_not_lost(damaged_setup, target, how):
    root, spec_a, spec_b, targets = damaged_setup
    table, key = targets[target]
    damage(root, table, key, how)
    # verify finds it: exit 6, with the problem listed
    done = snapstore("verify", cwd=root)
    assert done.returncode == CorruptError.exit_code, done.stdout + done.stderr
    assert b"Traceback" not in done.stderr
    # list still works, and the undamaged checkpoint restores byte-exact
    listed = snapstore("list", cwd=root)
    assert listed.returncode == 0, listed.stderr
    assert b"good" in listed.stdout
    before = read_tree(root)
    restored = snapstore("restore", "good", cwd=root)
    assert restored.returncode == 0, restored.stderr
    assert read_tree(root) == spec_a
    # the damaged one fails clean (exit 6) and leaves the tree untouched
    bad = snapstore("restore", "bad", "--both", cwd=root)
    # Damaged, whatever was damaged: a checkpoint named by its tag whose record cannot be read
    # is exit 6 like the rest (issue 16.25), not "no longer exists" (4).
    assert bad.returncode == CorruptError.exit_code, bad.stderr
    one_line(bad.stderr)
    assert read_tree(root) == spec_a
    del before


@CASE
@pytest.mark.parametrize("target", DAMAGE_TARGETS)
def test_a_checkpoint_after_damage_is_still_taken(damaged_setup, target):
    """Old damage never stops the next checkpoint (an agent's, after its next tool call): it is
    taken, and the file it changed reads back from it."""
    root, _, _, targets = damaged_setup
    table, key = targets[target]
    damage(root, table, key, "flip")
    (root / "a.txt").write_bytes(b"C\n")
    done = snapstore("snapshot", "-m", "C", cwd=root)
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
    with Store.open(root) as store:
        assert store.resolve("latest").message == "C"
        assert store.read_bytes("latest", "a.txt") == b"C\n"


@CASE
@pytest.mark.parametrize("target", DAMAGE_TARGETS)
def test_verify_repair_mends_what_the_tree_holds_and_nothing_else_changes(damaged_setup, target):
    """After each kind of damage: `verify --repair` mends a chunk the tree still holds (B's big
    file is in the tree), leaves any other damage exactly as verify found it, and never writes
    the tree."""
    root, _, spec_b, targets = damaged_setup
    table, key = targets[target]
    damage(root, table, key, "flip")
    with Store.open(root) as store:
        before = {(p.kind, p.id) for p in store.verify().problems}
    done = snapstore("verify", "--repair", cwd=root)
    assert b"Traceback" not in done.stderr and done.stderr == b"", done.stderr
    assert read_tree(root) == spec_b
    with Store.open(root) as store:
        after = {(p.kind, p.id) for p in store.verify().problems}
        if target in ("content chunk", "index node"):
            assert done.returncode == 0 and not after, after
            assert tree_from_store(store, "bad") == spec_b
        else:
            assert done.returncode == CorruptError.exit_code and after == before, (before, after)


@CASE
@pytest.mark.parametrize("how", ["garbage", "truncated", "unknown step", "unsafe step"])
def test_damaged_journal_is_a_clear_error(tmp_path, how):
    root = tmp_path / "tree"
    build_tree(root, {"a.txt": b"A\n"})
    with Store.init(root) as store:
        a = store.snapshot("A", tags=["good"])
        good = msgpack.packb(
            {"kind": "restore", "target": bytes.fromhex(a.id), "before": bytes.fromhex(a.id),
             "paths": None, "time_ns": 1, "pid": 1, "steps": [["write", b"a.txt"]]},
            use_bin_type=True,
        )
        value = {
            "garbage": b"\xc1\xff\x00garbage",
            "truncated": good[: len(good) // 2],
            "unknown step": good.replace(b"write", b"wrote"),
            "unsafe step": good.replace(b"a.txt", b"../xx"),
        }[how]
        with store.backend.write() as batch:
            batch.put("journal", b"current", value)
    before = read_tree(root)
    # Readers work and leave the tree alone (16.21); writers refuse with one line naming the
    # journal and 'snapstore recover' (16.3: a damaged journal never bricks the store).
    done = snapstore("list", cwd=root)
    assert done.returncode == 0, done.stderr
    # verify reports the damaged journal like any other damage (16.6), without touching the tree.
    done = snapstore("verify", cwd=root)
    assert done.returncode == CorruptError.exit_code and b"journal" in done.stdout, done.stdout
    done = snapstore("snapshot", cwd=root)
    assert done.returncode == CorruptError.exit_code, done.stderr
    line = one_line(done.stderr)
    assert "journal" in line and "snapstore recover" in line, line
    assert read_tree(root) == before
    assert not (tmp_path / "xx").exists()
    with Store.open(root) as store:  # the way out: keep the tree, drop the journal
        assert store.recover(mode="abandon").pending
        assert store.pending_restore() is None
    assert snapstore("snapshot", cwd=root).returncode == 0
    assert read_tree(root) == before


@CASE
def test_newer_format_is_refused_with_exit_7(tmp_path):
    root = tmp_path / "tree"
    build_tree(root, {"a.txt": b"A\n"})
    with Store.init(root) as store:
        store.snapshot("A")
        with store.backend.write() as batch:
            batch.put("meta", b"format", str(FORMAT_VERSION + 1).encode())
    data = (root / ".snapstore/data.mdb").read_bytes()
    for argv in (["list"], ["snapshot"], ["restore", "latest"], ["verify"], ["gc"]):
        done = snapstore(*argv, cwd=root)
        assert done.returncode == 7, (argv, done.stderr)
        assert f"format version {FORMAT_VERSION + 1}" in one_line(done.stderr)
    assert (root / ".snapstore/data.mdb").read_bytes() == data  # nothing written


@CASE
@pytest.mark.parametrize("planted", ["CURRENT", "generation"])
def test_current_planted_as_a_symlink_is_refused(tmp_path, planted):
    """A compacted store's CURRENT, or the generation it names, planted as a symlink to a
    directory outside the store: refused (exit 10), never followed, nothing written there."""
    root = tmp_path / "tree"
    build_tree(root, {"a.txt": b"A\n"})
    with Store.init(root) as store:
        store.snapshot("A")
        store.gc(compact=True)
    store_dir = root / ".snapstore"
    gen = (store_dir / "CURRENT").read_text().strip()
    outside = tmp_path / "outside"
    shutil.copytree(store_dir / gen, outside / gen)  # a store LMDB could open, outside
    (outside / "CURRENT").write_text(f"{gen}\n")
    if planted == "CURRENT":
        (store_dir / "CURRENT").unlink()
        (store_dir / "CURRENT").symlink_to(outside / "CURRENT")
    else:
        shutil.rmtree(store_dir / gen)
        (store_dir / gen).symlink_to(outside / gen)
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    for argv in (["list"], ["snapshot"], ["gc", "--compact"]):
        done = snapstore(*argv, cwd=root)
        assert done.returncode == 10, (argv, done.stderr)
        assert "symlink" in one_line(done.stderr) or "not a directory" in one_line(done.stderr)
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before


# -- odd names, symlink loops, files changing under the scan -------------------------------------


ODD = {
    b"latin1-\xe9\xff.txt": b"not utf-8\n",
    b"new\nline.txt": b"newline in the name\n",
    b"tab\tand space .txt": b"tab\n",
    b"n" * 255: b"255-byte name\n",
    b"/".join([b"d"] * 200) + b"/deep.txt": b"200 levels down\n",
    b"-dash": b"leading dash\n",
    "unicod\u00e9-\U0001f600".encode(): b"utf-8 name\n",
}


@CASE
def test_odd_names_round_trip_byte_exact(tmp_path):
    root = tmp_path / "tree"
    build_tree(root, ODD)
    with Store.init(root) as store:
        store.snapshot("A", tags=["A"])
        spec = read_tree(root)
        assert tree_from_store(store, "A") == spec
        for name in ODD:
            (root / os.fsdecode(name)).write_bytes(b"edited\n")
        build_tree(root, {b"extra\xfe": b"x"})
        store.restore("A")
        assert read_tree(root) == spec
        store.undo()
        assert (root / os.fsdecode(b"extra\xfe")).exists()
    # After the undo the tree differs from A (edited files, extra\xfe): diff says so (1).
    for argv, code in (
        (["list"], 0),
        (["diff", "A"], 1),
        (["diff", "A", "--stat"], 1),
        (["show", "A", "--json"], 0),
        (["log", os.fsdecode(b"latin1-\xe9\xff.txt")], 0),
        (["verify"], 0),
    ):
        done = snapstore(*argv, cwd=root)
        assert done.returncode == code, (argv, done.stderr)
        assert b"Traceback" not in done.stderr


@CASE
def test_symlink_loops_are_recorded_as_links(tmp_path):
    root = tmp_path / "tree"
    build_tree(root, {
        "a": Symlink("b"), "b": Symlink("a"), "self": Symlink("self"),
        "dir/up": Symlink(".."), "dir/f.txt": b"f\n", "abs": Symlink("/"),
    })
    with Store.init(root) as store:
        cp = store.snapshot("loops", tags=["L"])
        assert cp.warnings == ()
        spec = read_tree(root)
        assert tree_from_store(store, "L") == spec
        for name in ("a", "b", "self", "dir/up", "abs"):
            os.unlink(root / name)
        store.restore("L")
        assert read_tree(root) == spec


@CASE
def test_file_that_becomes_a_directory_between_scan_and_read(tree, monkeypatch):
    build_tree(tree, {"stays.txt": b"s", "shifty": b"a file at scan time"})
    real_walk = scan.walk

    def walk_then_swap(*args, **kwargs):
        found = real_walk(*args, **kwargs)
        os.unlink(tree / "shifty")
        (tree / "shifty").mkdir()
        (tree / "shifty/inner.txt").write_bytes(b"inner")
        return found

    with Store.init(tree) as store:
        monkeypatch.setattr(scan, "walk", walk_then_swap)
        cp = store.snapshot("swap")
        monkeypatch.undo()
        assert cp.stats["skipped"]["vanished"] == 1
        assert any("shifty" in w for w in cp.warnings)
        assert {e.path for e in store.entries(cp.id)} == {b"stays.txt"}
        cp2 = store.snapshot("next")
        assert store.read_bytes(cp2.id, "shifty/inner.txt") == b"inner"


@CASE
def test_file_growing_while_it_is_read(tree):
    build_tree(tree, {"calm.txt": b"calm", "grow.log": b""})
    stop = threading.Event()
    chunk = random_bytes(64 * 1024, "grow")

    def grow():
        with open(tree / "grow.log", "ab") as f:
            while not stop.is_set() and f.tell() < (24 << 20):
                f.write(chunk)
                f.flush()

    t = threading.Thread(target=grow)
    with Store.init(tree) as store:
        t.start()
        try:
            cps = [store.snapshot(f"s{i}") for i in range(3)]
        finally:
            stop.set()
            t.join()
        final = (tree / "grow.log").read_bytes()
        for cp in cps:
            entry = {e.path: e for e in store.entries(cp.id)}[b"grow.log"]
            if entry.is_file:  # a consistent version: a prefix of what was appended
                data = store.read_bytes(cp.id, "grow.log")
                assert len(data) == entry.size and final.startswith(data)
            else:
                assert any("grow.log" in w for w in cp.warnings)
            assert store.read_bytes(cp.id, "calm.txt") == b"calm"
        assert store.verify().ok


# -- permission denied, as an unprivileged user --------------------------------------------------


def _as_nobody_possible() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


@CASE
@pytest.mark.skipif(not _as_nobody_possible(), reason="needs root and setpriv to drop privileges")
def test_permission_denied_files_and_directories():
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="snapstore-perm-", dir="/tmp"))
    try:
        base.chmod(0o755)
        _permission_case(base / "tree")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _permission_case(root: Path) -> None:
    build_tree(root, {"ok.txt": b"ok\n", "secret.txt": b"secret\n", "locked/in.txt": b"in\n",
                      "ro/f.txt": b"ro\n"})
    for p in [root, *root.rglob("*")]:
        os.chown(p, 65534, 65534)
    assert snapstore("init", cwd=root, user="65534").returncode == 0
    first = snapstore("snapshot", "-m", "A", "--tag", "A", cwd=root, user="65534")
    assert first.returncode == 0, first.stderr
    (root / "secret.txt").chmod(0)
    (root / "locked").chmod(0)
    done = snapstore("snapshot", "-m", "B", cwd=root, user="65534")
    assert done.returncode == 0, done.stderr
    assert b"secret.txt" in done.stderr and b"locked" in done.stderr  # warned, not failed
    with Store.open(root) as store:
        kinds = {e.path: e.kind for e in store.entries("latest")}
        assert kinds[b"secret.txt"] == 4 and kinds[b"locked"] == 4
        assert store.read_bytes("latest", "ok.txt") == b"ok\n"
    # A restore leaves unreadable paths alone (it must not delete what it could not read).
    (root / "ok.txt").write_bytes(b"changed\n")
    os.chown(root / "ok.txt", 65534, 65534)
    back = snapstore("restore", "latest", cwd=root, user="65534")
    assert back.returncode == 0, back.stderr
    assert (root / "ok.txt").read_bytes() == b"ok\n"
    assert (root / "secret.txt").read_bytes() == b"secret\n"
    assert (root / "locked/in.txt").read_bytes() == b"in\n"
    # A restore into a directory it may not write to fails clean and is rolled back.
    (root / "ro/f.txt").write_bytes(b"edited\n")
    (root / "ok.txt").write_bytes(b"edited too\n")
    (root / "ro").chmod(0o555)
    before = read_tree(root, exclude={".snapstore", "locked", "secret.txt"})
    denied = snapstore("restore", "A", cwd=root, user="65534")
    one_line(denied.stderr)
    assert read_tree(root, exclude={".snapstore", "locked", "secret.txt"}) == before
    ver = snapstore("verify", cwd=root, user="65534")
    assert ver.returncode == 0, ver.stdout + ver.stderr
    # The right answer is a file-system error (8: ro/ is not writable).  Today the unreadable
    # `locked` directory is taken for a concurrent change first (9, "changed while the restore
    # ran"): issue 16.2, the restore helper's.  Only that known answer is let through, marked.
    if denied.returncode == ConflictError.exit_code and b"locked changed" in denied.stderr:
        pytest.xfail("issue 16.2: an unreadable directory reads as a concurrent change")
    assert denied.returncode == TreeIOError.exit_code, denied.stderr
