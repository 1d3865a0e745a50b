"""What the walk takes and what it leaves: special files, .git, the store, ignore rules."""

from __future__ import annotations

import os
import socket

from snapstore.records.manifest import DIR, FILE, SYMLINK
from snapstore.store import Store
from snapstore.testing import EmptyDir, Exec, Symlink, build_tree
from snapstore.tree import scan


def _paths(store, ref="latest") -> set[bytes]:
    return {e.path for e in store.entries(ref)}


def test_fifos_and_sockets_are_skipped_and_counted(tree, store):
    build_tree(tree, {"a.txt": b"a", "sub/b.txt": b"b", "only-special/x": b""})
    (tree / "only-special" / "x").unlink()
    os.mkfifo(tree / "fifo")
    os.mkfifo(tree / "only-special" / "pipe")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.getcwd()
    os.chdir(tree / "sub")  # short relative name: AF_UNIX paths are limited to ~107 bytes
    try:
        sock.bind("s.sock")
    finally:
        os.chdir(old)
    try:
        cp = store.snapshot("specials")
    finally:
        sock.close()
    assert cp.stats["skipped"] == {"special": 3, "vanished": 0, "unreadable": 0}
    assert len(cp.warnings) == 3
    assert any("fifo" in w for w in cp.warnings) and any("s.sock" in w for w in cp.warnings)
    entries = {e.path: e.kind for e in store.entries(cp.id)}
    assert entries == {b"a.txt": FILE, b"sub/b.txt": FILE, b"only-special": DIR}


def test_git_dirs_and_the_store_are_never_snapshotted(tree, store):
    build_tree(
        tree,
        {
            ".git/config": b"[core]\n",
            ".git/objects/ab/cdef": b"blob",
            "src/.git": b"gitdir: ../.git/modules/src\n",  # a submodule's .git *file*
            "src/main.c": b"int main;",
            "vendor/lib/.git/HEAD": b"ref: refs/heads/main\n",
            "vendor/lib/lib.py": b"x = 1\n",
            "vendor/lib/.gitignore": b"*.o\n",
            "vendor/lib/built.o": b"\x7fELF",
        },
    )
    cp = store.snapshot("repos")
    paths = _paths(store, cp.id)
    assert paths == {
        b"src/main.c",
        b"vendor/lib/lib.py",  # a nested repository's files are plain content
        b"vendor/lib/.gitignore",
    }
    assert not any(p.startswith(b".snapstore") for p in paths)
    # the nested repository was not renamed or touched
    assert (tree / "vendor/lib/.git/HEAD").read_bytes() == b"ref: refs/heads/main\n"
    assert (tree / "src/.git").is_file()


def test_store_inside_tree_under_another_name_is_excluded(tmp_path):
    root = tmp_path / "tree"
    build_tree(root, {"a": b"a", "keep/b": b"b"})
    with Store.init(root, store=root / "keep" / "snaps") as store:
        cp = store.snapshot("x")
        assert _paths(store, cp.id) == {b"a", b"keep/b"}


def test_store_outside_the_tree(tmp_path):
    root = tmp_path / "tree"
    build_tree(root, {"a": b"a"})
    with Store.init(root, store=tmp_path / "elsewhere") as store:
        cp = store.snapshot("x")
        assert _paths(store, cp.id) == {b"a"}
    assert not (root / ".snapstore").exists()
    with Store.open(store=tmp_path / "elsewhere") as again:
        assert again.read_bytes("latest", "a") == b"a"


def test_gitignore_at_several_levels_with_negation_and_snapignore(tree, store):
    spec = {
        ".gitignore": b"# top\n*.log\n!keep.log\nbuild/\n/rootonly.txt\n",
        "app.log": b"ignored",
        "keep.log": b"kept by negation",
        "build/out.bin": b"ignored dir",
        "build-notes.txt": b"not a dir match",
        "rootonly.txt": b"anchored: ignored at the root only",
        "sub/rootonly.txt": b"kept: the pattern is anchored",
        "sub/.gitignore": b"secret*\n!secret-ok\n!*.log\n",
        "sub/secret.key": b"ignored",
        "sub/secret-ok": b"re-included at this level",
        "sub/debug.log": b"re-included by the deeper negation",
        "sub/deeper/.snapignore": b"*.tmp\n",
        "sub/deeper/x.tmp": b"ignored by .snapignore",
        "sub/deeper/x.txt": b"kept",
        "sub/deeper/secret.pem": b"ignored by the parent's .gitignore",
        ".snapignore": b"node_modules/\n*.cache\n",
        "node_modules/pkg/index.js": b"ignored",
        "a.cache": b"ignored",
        "docs/readme.md": b"kept",
    }
    build_tree(tree, spec)
    cp = store.snapshot("ignores")
    assert _paths(store, cp.id) == {
        b".gitignore",
        b".snapignore",
        b"keep.log",
        b"build-notes.txt",
        b"sub/rootonly.txt",
        b"sub/.gitignore",
        b"sub/secret-ok",
        b"sub/debug.log",
        b"sub/deeper/.snapignore",
        b"sub/deeper/x.txt",
        b"docs/readme.md",
    }


def test_snapignore_overrides_gitignore_in_the_same_directory(tree, store):
    build_tree(tree, {".gitignore": b"*.dat\n", ".snapignore": b"!wanted.dat\n",
                      "wanted.dat": b"w", "other.dat": b"o"})  # fmt: skip
    cp = store.snapshot("x")
    assert _paths(store, cp.id) == {b".gitignore", b".snapignore", b"wanted.dat"}


def test_ignored_directory_is_not_entered(tree, store, monkeypatch):
    build_tree(tree, {".gitignore": b"big/\n!big/keep\n", "big/keep": b"k", "big/d/e": b"e"})
    opened = []
    real = scan._open_dir

    def spy(name, dir_fd=None):
        opened.append(os.fsencode(name))
        return real(name, dir_fd)

    monkeypatch.setattr(scan, "_open_dir", spy)  # the scan's seam: os.open stays untouched
    cp = store.snapshot("x")
    assert _paths(store, cp.id) == {b".gitignore"}  # as in git: no re-include below an ignored dir
    assert b"big" not in opened and b"d" not in opened
    assert opened and os.fsencode(tree) in opened  # the spy saw the walk


def test_symlinks_are_recorded_not_followed(tree, store):
    outside = tree.parent / "outside"
    build_tree(outside, {"secret": b"s"})
    build_tree(tree, {"to-outside": Symlink(str(outside)), "dangling": Symlink("nope"),
                      "dir/x": b"x", "to-dir": Symlink("dir")})  # fmt: skip
    cp = store.snapshot("links")
    kinds = {e.path: (e.kind, e.ref) for e in store.entries(cp.id)}
    assert kinds == {
        b"to-outside": (SYMLINK, os.fsencode(outside)),
        b"dangling": (SYMLINK, b"nope"),
        b"to-dir": (SYMLINK, b"dir"),
        b"dir/x": (FILE, kinds[b"dir/x"][1]),
    }


def test_empty_directories_recorded_only_when_empty(tree, store):
    build_tree(tree, {"a/b/c": EmptyDir, "d/e": EmptyDir, "d/f": b"", "x/y": Exec(b"")})
    cp = store.snapshot("dirs")
    kinds = {e.path: e.kind for e in store.entries(cp.id)}
    assert {p for p, k in kinds.items() if k == DIR} == {b"a/b/c", b"d/e"}


def test_walk_result_is_sorted_and_excludes(tmp_path):
    build_tree(tmp_path, {"b": b"", "a/z": b"", "a/b": b"", ".git/x": b"", "skip/me": b""})
    report = scan.ScanReport()
    found = scan.walk(os.fsencode(tmp_path), frozenset({b"skip"}), report)
    assert [f.path for f in found] == [b"a/b", b"a/z", b"b"]
    assert report.warnings == []


def test_a_relisting_keeps_a_known_file_only_with_its_inode_and_unnamed(tmp_path):
    """scan_dir's ``known``: a file found before with the same inode, and named by no event,
    is kept as found (no stat); a file with another inode now, or one an event names, is
    examined again."""
    from snapstore.tree import ignore

    d = tmp_path / "d"
    d.mkdir()
    for name in ("same", "replaced", "named"):
        (d / name).write_bytes(b"old\n")
    first: list[scan.Found] = []
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        scan.scan_dir(fd, b"d", ignore.NO_RULES, frozenset(), scan.ScanReport(), first)
    finally:
        os.close(fd)
    known = {f.path: f for f in first}
    (d / "replaced.tmp").write_bytes(b"a new file, under the old name\n")
    os.rename(d / "replaced.tmp", d / "replaced")
    (d / "named").write_bytes(b"rewritten in place\n")
    (d / "same").write_bytes(b"rewritten, but no event says so\n")  # (as if: it is not named)
    again: list[scan.Found] = []
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        scan.scan_dir(fd, b"d", ignore.NO_RULES, frozenset(), scan.ScanReport(), again, None, known, {b"d/named"})
    finally:
        os.close(fd)
    got = {f.path: f for f in again}
    assert got[b"d/same"] is known[b"d/same"]  # kept, not examined
    assert got[b"d/replaced"].st.st_ino == os.lstat(d / "replaced").st_ino != known[b"d/replaced"].st.st_ino
    assert got[b"d/named"].st.st_size == len(b"rewritten in place\n")
