"""``diff``: statuses, ``--stat``, ``-p`` (textdiff.unified), ``--json``, ``-- PATH``, the three
forms (latest vs tree, REF vs tree, A vs B) and the exit codes 0 (same) and 1 (different)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import subprocess_env

from snapstore.ops import textdiff
from snapstore.ops.diff import Change
from snapstore.records.manifest import FILE, Entry
from snapstore.testing import build_tree


def _change(old: bytes | None, new: bytes | None, path: bytes = b"f.txt", status: str = "M") -> Change:
    """A Change between two in-memory contents (None: that side is absent)."""

    def entry(data: bytes | None) -> Entry | None:
        if data is None:
            return None
        return Entry(path, FILE, 0o644, len(data), 0, bytes(32))

    content = {"old": old, "new": new}
    return Change(
        status,
        path,
        entry(old),
        entry(new),
        _old_loader=lambda e: content["old"],  # type: ignore[arg-type,return-value]
        _new_loader=lambda e: content["new"],  # type: ignore[arg-type,return-value]
    )


# -- textdiff.unified: exact output ------------------------------------------------------------


def test_unified_modified_file_exact():
    c = _change(b"one\ntwo\nthree\n", b"one\nTWO\nthree\nfour\n")
    assert textdiff.unified(c) == (
        b"diff --snapstore a/f.txt b/f.txt\n"
        b"--- a/f.txt\n"
        b"+++ b/f.txt\n"
        b"@@ -1,3 +1,4 @@\n"
        b" one\n"
        b"-two\n"
        b"+TWO\n"
        b" three\n"
        b"+four\n"
    )


def test_unified_added_file_exact():
    c = _change(None, b"a\nb\n", status="A")
    assert textdiff.unified(c) == (
        b"diff --snapstore a/f.txt b/f.txt\n"
        b"--- /dev/null\n"
        b"+++ b/f.txt\n"
        b"@@ -0,0 +1,2 @@\n"
        b"+a\n"
        b"+b\n"
    )


def test_unified_deleted_file_exact():
    c = _change(b"gone\n", None, status="D")
    assert textdiff.unified(c) == (
        b"diff --snapstore a/f.txt b/f.txt\n"
        b"--- a/f.txt\n"
        b"+++ /dev/null\n"
        b"@@ -1 +0,0 @@\n"
        b"-gone\n"
    )


def test_unified_no_newline_at_end_exact():
    c = _change(b"x\nlast", b"x\nlast\n")
    assert textdiff.unified(c) == (
        b"diff --snapstore a/f.txt b/f.txt\n"
        b"--- a/f.txt\n"
        b"+++ b/f.txt\n"
        b"@@ -1,2 +1,2 @@\n"
        b" x\n"
        b"-last\n"
        b"\\ No newline at end of file\n"
        b"+last\n"
    )


def test_unified_binary_file_is_named_not_shown():
    c = _change(b"text\n", b"\x00\x01binary", path=b"img.bin")
    assert textdiff.unified(c) == (
        b"diff --snapstore a/img.bin b/img.bin\nBinary files a/img.bin and b/img.bin differ\n"
    )
    added = _change(None, b"\x00", path=b"new.bin", status="A")
    assert textdiff.unified(added).endswith(b"Binary files /dev/null and b/new.bin differ\n")


def test_unified_context_is_three_lines_and_hunks_split():
    old = b"".join(b"%d\n" % i for i in range(20))
    new = old.replace(b"2\n", b"two\n", 1).replace(b"17\n", b"seventeen\n")
    out = textdiff.unified(_change(old, new)).decode()
    assert out.count("@@ ") == 2
    assert "@@ -1,6 +1,6 @@" in out and "@@ -15,6 +15,6 @@" in out


# -- textdiff.line_counts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "old, new, expected",
    [
        (b"a\nb\nc\n", b"a\nB\nc\n", (1, 1, False)),
        (b"a\n", b"a\nb\nc\n", (2, 0, False)),
        (None, b"a\nb\n", (2, 0, False)),
        (b"a\nb\nc\n", None, (0, 3, False)),
        (b"a\nb", b"a\nb\n", (1, 1, False)),  # a missing final newline changes the last line
        (b"same\n", b"same\n", (0, 0, False)),
        (b"\x00bin", b"\x00bin2", (0, 0, True)),
        (b"text\n", b"\x00", (0, 0, True)),
    ],
)
def test_line_counts(old, new, expected):
    assert textdiff.line_counts(_change(old, new)) == expected


# -- the store and the CLI ---------------------------------------------------------------------


@pytest.fixture
def two(store, tree):
    """Two checkpoints: ``a`` then ``b`` (keep.txt same, mod.txt modified, del.txt deleted,
    add.txt added, sub/x.txt modified); the tree equals ``b``."""
    build_tree(
        tree,
        {
            "keep.txt": b"keep\n",
            "mod.txt": b"one\ntwo\n",
            "del.txt": b"bye\n",
            "sub/x.txt": b"x1\n",
        },
    )
    a = store.snapshot("a")
    (tree / "mod.txt").write_bytes(b"one\nTWO\nthree\n")
    os.unlink(tree / "del.txt")
    (tree / "add.txt").write_bytes(b"new\n")
    (tree / "sub/x.txt").write_bytes(b"x2\n")
    b = store.snapshot("b")
    return a, b


def test_library_two_checkpoints(store, two):
    a, b = two
    got = [(c.status, c.path) for c in store.diff(a.id, b.id)]
    assert got == [
        ("A", b"add.txt"),
        ("D", b"del.txt"),
        ("M", b"mod.txt"),
        ("M", b"sub/x.txt"),
    ]
    mod = next(c for c in store.diff(a.id, b.id) if c.path == b"mod.txt")
    assert (mod.old_bytes(), mod.new_bytes()) == (b"one\ntwo\n", b"one\nTWO\nthree\n")
    assert store.diff(b.id, b.id) == []


def test_library_against_the_tree(store, tree, two):
    a, b = two
    assert store.diff() == []  # latest (b) vs the tree
    (tree / "keep.txt").write_bytes(b"kept\n")
    assert [(c.status, c.path) for c in store.diff()] == [("M", b"keep.txt")]
    # REF vs the tree: a vs (b + keep.txt edit)
    assert [c.path for c in store.diff(a.id)] == [b"add.txt", b"del.txt", b"keep.txt", b"mod.txt", b"sub/x.txt"]
    changed = next(c for c in store.diff() if c.path == b"keep.txt")
    assert changed.new_bytes() == b"kept\n"


def test_library_paths_limit_the_comparison(store, two):
    a, b = two
    assert [c.path for c in store.diff(a.id, b.id, paths=["sub"])] == [b"sub/x.txt"]
    assert [c.path for c in store.diff(a.id, b.id, paths=["mod.txt", "del.txt"])] == [b"del.txt", b"mod.txt"]
    assert store.diff(a.id, b.id, paths=["keep.txt"]) == []


def test_cli_exit_codes_and_status_lines(run_cli, tree, two):
    a, b = two
    same = run_cli("diff", cwd=tree)
    assert (same.code, same.out) == (0, b"")
    r = run_cli("diff", a.id, b.id, cwd=tree)
    assert r.code == 1, r.err
    assert r.text == "A\tadd.txt\nD\tdel.txt\nM\tmod.txt\nM\tsub/x.txt\n"
    quiet = run_cli("diff", "-q", a.id, b.id, cwd=tree)
    assert (quiet.code, quiet.out) == (1, b"")
    assert run_cli("diff", "-q", b.id, b.id, cwd=tree).code == 0
    # One ref: that checkpoint vs the tree.
    assert run_cli("diff", b.id, cwd=tree).code == 0
    assert run_cli("diff", a.id, cwd=tree).code == 1


def test_cli_paths_after_double_dash(run_cli, tree, two):
    a, b = two
    r = run_cli("diff", a.id, b.id, "--", "sub", cwd=tree)
    assert (r.code, r.text) == (1, "M\tsub/x.txt\n")
    r = run_cli("diff", a.id, b.id, "--", "keep.txt", cwd=tree)
    assert (r.code, r.text) == (0, "")
    (tree / "keep.txt").write_bytes(b"edited\n")
    r = run_cli("diff", "--", "keep.txt", cwd=tree)  # latest vs the tree, one path
    assert (r.code, r.text) == (1, "M\tkeep.txt\n")
    r = run_cli("diff", "--", "mod.txt", cwd=tree)
    assert (r.code, r.text) == (0, "")


def test_cli_stat(run_cli, tree, two):
    a, b = two
    r = run_cli("diff", "--stat", a.id, b.id, cwd=tree)
    assert r.code == 1
    assert r.text == (
        " add.txt   |     1 +\n"
        " del.txt   |     1 -\n"
        " mod.txt   |     3 ++-\n"
        " sub/x.txt |     2 +-\n"
        " 4 file(s) changed, 4 insertion(s)(+), 3 deletion(s)(-)\n"
    )


def test_cli_stat_binary(run_cli, tree, store):
    build_tree(tree, {"b.bin": b"\x00\x01"})
    a = store.snapshot("a")
    (tree / "b.bin").write_bytes(b"\x00\x02")
    r = run_cli("diff", "--stat", a.id, cwd=tree)
    assert (r.code, r.text.splitlines()[0]) == (1, " b.bin | Bin")


def test_cli_patch(run_cli, tree, two):
    a, b = two
    r = run_cli("diff", "-p", a.id, b.id, "--", "mod.txt", "add.txt", cwd=tree)
    assert r.code == 1
    assert r.out == (
        b"diff --snapstore a/add.txt b/add.txt\n"
        b"--- /dev/null\n"
        b"+++ b/add.txt\n"
        b"@@ -0,0 +1 @@\n"
        b"+new\n"
        b"diff --snapstore a/mod.txt b/mod.txt\n"
        b"--- a/mod.txt\n"
        b"+++ b/mod.txt\n"
        b"@@ -1,2 +1,3 @@\n"
        b" one\n"
        b"-two\n"
        b"+TWO\n"
        b"+three\n"
    )


def test_cli_json(run_cli, tree, two):
    a, b = two
    r = run_cli("diff", "--json", a.id, b.id, cwd=tree)
    assert r.code == 1
    doc = json.loads(r.out)
    assert [(c["status"], c["path"]) for c in doc["changes"]] == [
        ("A", "add.txt"),
        ("D", "del.txt"),
        ("M", "mod.txt"),
        ("M", "sub/x.txt"),
    ]
    mod = doc["changes"][2]
    assert mod["old"]["kind"] == mod["new"]["kind"] == "file"
    assert (mod["old"]["size"], mod["new"]["size"]) == (8, 14)
    assert doc["changes"][0]["old"] is None and doc["changes"][1]["new"] is None
    stat = json.loads(run_cli("diff", "--json", "--stat", a.id, b.id, cwd=tree).out)
    assert [(c["added"], c["removed"], c["binary"]) for c in stat["changes"]] == [
        (1, 0, False),
        (0, 1, False),
        (2, 1, False),
        (1, 1, False),
    ]
    same = run_cli("diff", "--json", b.id, b.id, cwd=tree)
    assert (same.code, json.loads(same.out)) == (0, {"changes": []})


def test_python_m_snapstore_diff(tree, two):
    """A real process: the exit code and the ``--`` split come through argv."""
    a, b = two
    proc = subprocess.run(
        [sys.executable, "-m", "snapstore", "diff", "--stat", a.id, b.id, "--", "sub"],
        cwd=tree,
        capture_output=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == b" sub/x.txt |     2 +-\n 1 file(s) changed, 1 insertion(s)(+), 1 deletion(s)(-)\n"
    same = subprocess.run(
        [sys.executable, "-m", "snapstore", "diff", b.id],
        cwd=tree,
        capture_output=True,
        env=subprocess_env(),
        timeout=60,
    )
    assert (same.returncode, same.stdout, same.stderr) == (0, b"", b"")


# -- too large to count, binary sniffing ------------------------------------------------------


def _unreadable_change(size: int) -> Change:
    def boom(entry):
        raise AssertionError("a too large file must not be read")

    entry = Entry(b"big.txt", FILE, 0o644, size, 0, bytes(32))
    return Change("M", b"big.txt", entry, entry._replace(size=size - 1), boom, boom)


def test_too_large_files_are_not_read_and_say_so(monkeypatch):
    monkeypatch.setattr(textdiff, "MAX_COUNT_BYTES", 1000)
    c = _unreadable_change(768 << 20)
    n = textdiff.count(c)
    assert n == (0, 0, False, 768 << 20)
    assert n.note == "(not counted: 768.0 MiB)"
    assert n.to_json() == {"added": 0, "removed": 0, "binary": False, "not_counted": 768 << 20}
    assert textdiff.line_counts(c) == (0, 0, False)
    assert textdiff.unified(c) == (
        b"diff --snapstore a/big.txt b/big.txt\n"
        b"Files a/big.txt and b/big.txt differ (not shown: 768.0 MiB)\n"
    )
    # At the bound it is still counted.
    small = _change(b"a\n" * 500, b"b\n" * 500)
    assert textdiff.count(small) == (500, 500, False, 0)


def test_binary_is_decided_by_the_first_8000_bytes():
    late_nul = b"x" * 8000 + b"\x00\n"
    assert textdiff.count(_change(b"", late_nul)) == (1, 0, False, 0)
    early_nul = b"x" * 7999 + b"\x00\n"
    assert textdiff.count(_change(b"", early_nul)).binary


def test_patience_counts_match_git_where_difflib_does_not():
    # `git diff --numstat` (default and --patience) says 1 added, 2 removed; difflib's matcher
    # alone matches "e" and says 2 and 3.
    old, new = b"e\nd\na\ne\n", b"d\ne\nc\n"
    assert textdiff.count(_change(old, new))[:2] == (1, 2)


def test_file_history_says_which_versions_were_not_counted(store, tree, monkeypatch):
    build_tree(tree, {"f.txt": b"a\n"})
    store.snapshot("small")
    (tree / "f.txt").write_bytes(b"b\n" * 100)
    store.snapshot("large")
    monkeypatch.setattr(textdiff, "MAX_COUNT_BYTES", 50)
    versions = store.history("f.txt")
    assert [(v.status, v.added, v.removed, v.not_counted) for v in versions] == [
        ("A", 1, 0, 0),
        ("M", 0, 0, 200),
    ]
    assert versions[1].to_json()["not_counted"] == 200
    assert versions[0].to_json()["not_counted"] is None


def test_diff_against_the_tree_decodes_only_the_manifest_chunks_that_differ(tmp_path, monkeypatch):
    """The tree's entries are encoded like a snapshot's manifest, so comparing them with the
    checkpoint skips every chunk both share: one changed file among 2,000 decodes a few chunks,
    not the ~60 of the whole manifest."""
    from snapstore.records import manifest as manifest_mod
    from snapstore.store import Store
    from snapstore.testing import build_tree

    root = tmp_path / "t"
    build_tree(root, {f"d{i % 20}/f{i}.txt": f"{i}\n".encode() for i in range(2000)})
    store = Store.init(root)
    store.snapshot("one")
    (root / "d7" / "f7.txt").write_bytes(b"changed\n")
    (root / "new.txt").write_bytes(b"new\n")
    decoded = []
    real = manifest_mod.iter_entries_of_chunks

    def counting(mid, chunks):
        for e in real(mid, chunks):
            decoded.append(e.path)
            yield e

    monkeypatch.setattr(manifest_mod, "iter_entries_of_chunks", counting)
    changes = store.diff("latest")
    assert [(c.status, c.path) for c in changes] == [("M", b"d7/f7.txt"), ("A", b"new.txt")]
    assert len(decoded) < 400  # entries of the differing chunks only (2,000 in all, twice over)
    store.close()


@pytest.mark.parametrize("inline", [True, False])
def test_tree_diff_hashes_misses_inline_or_pooled_alike(tmp_path, monkeypatch, inline):
    from snapstore.store import Store
    from snapstore.testing import build_tree
    from snapstore.tree import worktree

    if not inline:
        monkeypatch.setattr(worktree, "HASH_INLINE_FILES", 0)  # every miss through the pool
    root = tmp_path / "t"
    build_tree(root, {f"f{i}.txt": f"{i}\n".encode() for i in range(12)})
    store = Store.init(root)
    store.snapshot("one")
    for i in (2, 5, 7):
        (root / f"f{i}.txt").write_bytes(f"edited {i}\n".encode())
    changes = store.diff("latest")  # every file is a miss here (written within the racy window)
    assert [(c.status, c.path) for c in changes] == [("M", b"f2.txt"), ("M", b"f5.txt"), ("M", b"f7.txt")]
    assert [c.new_bytes() for c in changes] == [b"edited 2\n", b"edited 5\n", b"edited 7\n"]
    store.close()
