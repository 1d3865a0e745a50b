"""Hostile or unusual trees: ignore files that are FIFOs, links or bombs; stores inside the tree;
directories holding only ignored files; plugins planted in the tree."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from snapstore.errors import UsageError
from snapstore.records.manifest import DIR
from snapstore.store import Store
from snapstore.testing import build_tree
from snapstore.tree import ignore, scan, statcache


def _paths(store: Store, cid: str) -> set[bytes]:
    return {e.path for e in store.entries(cid)}


def _content(store: Store, cid: str) -> set[tuple[bytes, int, bytes]]:
    return {(e.path, e.kind, e.ref) for e in store.entries(cid)}


def make_deep(root: Path, parts: list[str], name: str, data: bytes) -> bytes:
    """Create ``root/parts.../name`` through directory fds (it may exceed PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            try:
                os.mkdir(part, dir_fd=fd)
            except FileExistsError:
                pass
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=fd)
        os.write(out, data)
        os.close(out)
    finally:
        os.close(fd)
    return os.fsencode("/".join([*parts, name]))


def read_deep(root: Path, rel: bytes) -> bytes:
    *parts, name = rel.split(b"/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        f = os.open(name, os.O_RDONLY, dir_fd=fd)
        try:
            return os.read(f, 1 << 20)
        finally:
            os.close(f)
    finally:
        os.close(fd)


# -- ignore files -------------------------------------------------------------------------------


def test_fifo_gitignore_does_not_block_and_is_not_read(tree, store):
    build_tree(tree, {"a.txt": b"a", "sub/b.pyc": b"b"})
    os.mkfifo(tree / "sub" / ".gitignore")  # opening it for reading would block forever
    cp = store.snapshot("fifo")
    # not a regular file: no rules from it; it is skipped like any other FIFO
    assert _paths(store, cp.id) == {b"a.txt", b"sub/b.pyc"}
    assert cp.stats["skipped"]["special"] == 1


def test_symlinked_gitignore_is_not_followed(tree, store):
    build_tree(tree, {"a.txt": b"a", "b.log": b"b", "rules": b"*.log\n"})
    os.symlink("/dev/zero", tree / ".gitignore")  # following it would read forever
    os.symlink("../rules", tree / "rules-link")
    os.mkdir(tree / "d")
    os.symlink("../rules", tree / "d" / ".snapignore")
    build_tree(tree, {"d/c.log": b"c"})
    cp = store.snapshot("links")
    # neither link is followed, so *.log is not ignored (git >= 2.32 behaves the same)
    assert {b"b.log", b"d/c.log"} <= _paths(store, cp.id)


def test_oversized_ignore_file_is_skipped_with_a_warning(tree, store, monkeypatch):
    monkeypatch.setattr(ignore, "MAX_IGNORE_BYTES", 64)
    build_tree(tree, {".gitignore": b"*.log\n" + b"#" * 100 + b"\n", "x.log": b"x"})
    cp = store.snapshot("big rules")
    assert b"x.log" in _paths(store, cp.id)
    assert any(".gitignore" in w and "larger than 64 bytes" in w for w in cp.warnings)


def test_catastrophic_pattern_is_dropped_not_matched(tree, store, monkeypatch):
    pattern = "*a*a*a*a*a*a*a*a*b"
    assert ignore.sanitize(pattern)[0] is None
    compiled: list[list[str]] = []
    real = ignore._compile

    def spy(lines):
        compiled.append(list(lines))
        return real(lines)

    monkeypatch.setattr(ignore, "_compile", spy)
    build_tree(tree, {".gitignore": f"{pattern}\n*.tmp\n".encode(), "y.tmp": b"y"})
    deep = make_deep(tree, ["a" * 250] * 20, "a" * 250, b"x")  # a 5,000-byte path of 'a's
    cp = store.snapshot("hostile pattern")
    # the work bound: the pattern never reached the regex compiler; the others still apply
    assert compiled == [["*.tmp"]]
    assert deep in _paths(store, cp.id)
    assert b"y.tmp" not in _paths(store, cp.id)
    assert any("pattern not used" in w and ".gitignore:1" in w for w in cp.warnings)


@pytest.mark.parametrize(
    "line, expected",
    [
        ("*.pyc", "*.pyc"),
        ("a***b", "a*b"),  # git treats a run of '*' inside a segment as one '*'
        ("**/**/x", "**/x"),
        ("!*.tar.*", "!*.tar.*"),
        (r"\*\*\*\*\*x", r"\*\*\*\*\*x"),  # escaped stars are literals, not wildcards
        ("[*][*][*][*][*]", "[*][*][*][*][*]"),
        ("*a*a*a*b", None),  # 4 stars in a segment
        ("**/a/**/a/**/b", None),  # 3 wildcards that cross directories
    ],
)
def test_sanitize(line, expected):
    assert ignore.sanitize(line)[0] == expected


# -- stores inside the tree -------------------------------------------------------------------


def test_store_as_tree_root_is_refused(tmp_path):
    root = tmp_path / "t"
    root.mkdir()
    with pytest.raises(UsageError, match="cannot be the tree's root"):
        Store.init(root, store=root)
    assert not (root / "data.mdb").exists()


def test_cli_init_store_dot_is_refused(tree, run_cli):
    result = run_cli("init", "--store", ".", cwd=tree)
    assert result.code == UsageError.exit_code
    assert "cannot be the tree's root" in result.err and "Traceback" not in result.err
    assert os.listdir(tree) == []


def test_store_files_at_the_tree_root_are_left_out(tmp_path):
    """An existing store whose directory is the tree (made before the refusal) is not copied."""
    root = tmp_path / "t"
    build_tree(root, {"data.mdb": b"d", "lock.mdb": b"l", "lock": b"", "src.py": b"s"})
    report = scan.ScanReport()
    assert [f.path for f in scan.walk(os.fsencode(root), frozenset(), report)] == [b"src.py"]


def test_inner_store_is_never_snapshotted_nor_restored(tmp_path):
    outer_root = tmp_path / "outer"
    build_tree(outer_root, {"app.py": b"v1", "sub/lib.py": b"lib"})
    inner_root = outer_root / "sub"
    # another project's store, in both layouts: `.snapstore` inside, and `--store elsewhere`
    with Store.init(inner_root) as inner, Store.init(inner_root, store=outer_root / "ext") as ext:
        inner.snapshot("inner 1")
        ext.snapshot("ext 1")
        with Store.init(outer_root, store=tmp_path / "outer-store") as outer:
            cp = outer.snapshot("outer 1")
            paths = _paths(outer, cp.id)
            assert paths == {b"app.py", b"sub/lib.py"}  # no .snapstore, no ext/ files
            build_tree(outer_root, {"app.py": b"v2"})
            inner.snapshot("inner 2")  # the inner store moves on after the outer checkpoint
            ext.snapshot("ext 2")
            outer.restore(cp.id)
            assert (outer_root / "app.py").read_bytes() == b"v1"
            assert outer.diff(cp.id) == []
        # the inner stores were neither deleted nor rolled back
        assert [c.message for c in inner.checkpoints()] == ["inner 2", "inner 1"]  # newest first
        assert [c.message for c in ext.checkpoints()] == ["ext 2", "ext 1"]
        assert inner.verify().ok and ext.verify().ok


# -- directories holding only ignored files ---------------------------------------------------


def test_directory_with_only_ignored_files_is_not_an_empty_directory(tree, store):
    build_tree(tree, {".gitignore": b"*.pyc\n", "pkg/mod.py": b"m", "pkg/__pycache__/mod.pyc": b"c"})
    os.mkdir(tree / "empty")
    cp = store.snapshot("one")
    entries = {e.path: e.kind for e in store.entries(cp.id)}
    assert b"pkg/__pycache__" not in entries
    assert entries[b"empty"] == DIR  # a really empty directory is still recorded
    build_tree(tree, {"pkg/mod.py": b"m2"})
    report = store.restore(cp.id)
    assert (tree / "pkg/__pycache__/mod.pyc").read_bytes() == b"c"
    assert store.diff(cp.id) == []
    assert report.warnings == []
    again = store.snapshot("two")
    assert _content(store, again.id) == _content(store, cp.id)  # no phantom directory
    undo = store.undo()
    assert undo.warnings == []
    assert (tree / "pkg/mod.py").read_bytes() == b"m2"


# -- plugins ------------------------------------------------------------------------------------


def test_plugin_planted_in_the_tree_is_not_loaded(tmp_path: Path):
    tree = tmp_path / "tree"
    pwned = tmp_path / "pwned"
    build_tree(tree, {
        "x.dist-info/METADATA": b"Metadata-Version: 2.1\nName: x\nVersion: 1\n",
        "x.dist-info/entry_points.txt": b"[snapstore.plugins]\nx = x:plugin\n",
        "x.py": f"open({str(pwned)!r}, 'w').write('ran')\ndef plugin(store):\n    pass\n".encode(),
    })  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "SNAPSTORE_NO_PLUGINS"}
    for args in (["init", "-q"], ["snapshot", "-q", "-m", "m"]):
        proc = subprocess.run(
            [sys.executable, "-m", "snapstore", *args], cwd=tree, env=env, capture_output=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
    assert not pwned.exists()
    # the same plugin from a directory outside the tree (on PYTHONPATH) is loaded
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(tree)!r})
        from snapstore.hooks import trusted_path
        assert {str(tree)!r} not in trusted_path({str(tree)!r})
        assert {str(tree)!r} in trusted_path({str(tmp_path / 'elsewhere')!r})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# -- paths deeper than PATH_MAX -----------------------------------------------------------------


def test_tree_deeper_than_path_max_snapshots_and_round_trips(tree, store, monkeypatch):
    parts = [f"{i:03d}" + "d" * 46 for i in range(125)]  # 125 levels of 50 bytes: 6,250 bytes
    deep = make_deep(tree, parts, "leaf.txt", b"deep v1")
    assert len(deep) > 6000
    build_tree(tree, {"top.txt": b"top"})
    cp = store.snapshot("deep")
    assert store.read_bytes(cp.id, os.fsdecode(deep)) == b"deep v1"
    assert {b"top.txt", deep} <= _paths(store, cp.id)
    make_deep(tree, parts, "leaf.txt", b"deep v2")
    make_deep(tree, parts, "new.txt", b"new")
    assert {c.path for c in store.diff(cp.id)} == {deep, deep[: -len(b"leaf.txt")] + b"new.txt"}
    store.restore(cp.id)
    assert read_deep(tree, deep) == b"deep v1"
    assert store.diff(cp.id) == []
    store.undo()
    assert read_deep(tree, deep) == b"deep v2"
    # the stat cache keys a path too long for an LMDB key by its hash, and still answers
    monkeypatch.setattr(statcache, "RACY_MARGIN_NS", 0)
    store.snapshot("cache filled")
    assert store.snapshot("cache used").stats["files_read"] == 0


def test_walk_holds_a_bounded_number_of_directory_fds(tree, monkeypatch):
    parts = [f"level{i:02d}" for i in range(40)]
    make_deep(tree, parts, "bottom", b"b")
    for i in range(1, 40):  # a sibling at every level keeps each parent's fd waiting for it
        make_deep(tree, [*parts[:i], "sibling"], "s", b"s")
    make_deep(tree, [f"{i:03d}" + "x" * 60 for i in range(70)], "far", b"f")  # > PATH_MAX
    build_tree(tree, {"level00/side/file": b"s", "top": b"t"})
    expected = [f.path for f in scan.walk(os.fsencode(tree), frozenset(), scan.ScanReport())]

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    baseline = open_fds()
    counts: list[int] = []
    real = scan._scandir
    monkeypatch.setattr(scan, "MAX_HELD_FDS", 10_000)

    class SiblingsFirst:
        """List 'sibling' first, so it is visited last and every parent's fd waits for it."""

        def __init__(self, fd):
            counts.append(open_fds())
            self.it = real(fd)

        def __enter__(self):
            return sorted(self.it.__enter__(), key=lambda d: d.name != "sibling")

        def __exit__(self, *exc):
            return self.it.__exit__(*exc)

    monkeypatch.setattr(scan, "_scandir", SiblingsFirst)
    report = scan.ScanReport()
    assert [f.path for f in scan.walk(os.fsencode(tree), frozenset(), report)] == expected
    assert max(counts) - baseline > 30  # without a cap: one fd per level
    counts.clear()
    monkeypatch.setattr(scan, "MAX_HELD_FDS", 4)
    assert [f.path for f in scan.walk(os.fsencode(tree), frozenset(), report)] == expected
    assert report.warnings == []
    assert len(counts) > 100  # every directory was listed
    assert max(counts) - baseline <= 4 + 2  # the cap, plus the one being listed (and its dup)
