"""Rename detection (``diff -M``, ``show -M``): exact and similar renames, their JSON and patch
forms, and the bounds of the similarity pass."""

from __future__ import annotations

import os

import pytest

from snapstore.ops import renames, textdiff
from snapstore.ops.diff import Change
from snapstore.records.manifest import FILE, Entry
from snapstore.testing import build_tree


@pytest.fixture
def moved(store, tree):
    body = b"".join(b"line %d of a file that moves\n" % i for i in range(20))
    build_tree(tree, {"old/name.py": body, "stay.txt": b"s\n", "other.txt": b"unrelated\n" * 3})
    a = store.snapshot("a")
    os.unlink(tree / "old/name.py")
    (tree / "new").mkdir()
    (tree / "new/name.py").write_bytes(body)
    os.unlink(tree / "other.txt")
    (tree / "fresh.txt").write_bytes(b"completely different\n")
    b = store.snapshot("b")
    return a, b, body


def test_exact_rename(store, moved):
    a, b, _ = moved
    plain = [(c.status, c.path) for c in store.diff(a.id, b.id)]
    assert ("D", b"old/name.py") in plain and ("A", b"new/name.py") in plain
    got = store.diff(a.id, b.id, renames=True)
    assert [(c.status, c.path) for c in got] == [
        ("A", b"fresh.txt"),
        ("R", b"new/name.py"),
        ("A", b"old"),  # now an empty directory: recorded as one
        ("D", b"other.txt"),
    ]
    r = got[1]
    assert (r.old_path, r.similarity, r.display_path) == (b"old/name.py", 100, "old/name.py => new/name.py")
    assert r.to_json()["old_path"] == "old/name.py" and r.to_json()["similarity"] == 100
    assert r.to_json()["status"] == "R"
    assert textdiff.count(r) == (0, 0, False, 0)
    assert textdiff.unified(r) == (
        b"diff --snapstore a/old/name.py b/new/name.py\n"
        b"similarity index 100%\nrename from old/name.py\nrename to new/name.py\n"
    )
    # show -M: the checkpoint against its parent.
    assert [c.status for c in store.changes(b.id, renames=True)].count("R") == 1


def test_similar_rename_with_an_edit(store, tree, moved):
    a, b, body = moved
    os.unlink(tree / "new/name.py")
    (tree / "moved.py").write_bytes(body.replace(b"line 3 ", b"LINE 3 "))
    changes = store.diff(a.id, renames=True)
    renamed = [c for c in changes if c.status == "R"]
    assert [(c.old_path, c.path) for c in renamed] == [(b"old/name.py", b"moved.py")]
    assert 90 <= renamed[0].similarity < 100
    assert textdiff.count(renamed[0])[:2] == (1, 1)
    patch = textdiff.unified(renamed[0])
    assert b"rename from old/name.py\nrename to moved.py\n" in patch
    assert b"--- a/old/name.py\n+++ b/moved.py\n" in patch
    assert b"-line 3 of a file that moves\n+LINE 3 of a file that moves\n" in patch


def test_dissimilar_files_are_not_paired(store, moved):
    a, b, _ = moved
    got = store.diff(a.id, b.id, renames=True)
    assert ("D", b"other.txt") in [(c.status, c.path) for c in got]
    assert ("A", b"fresh.txt") in [(c.status, c.path) for c in got]


def test_similarity_pass_is_bounded(store, tree):
    build_tree(tree, {"a1": b"x\n" * 10 + b"a\n", "a2": b"y\n" * 10 + b"a\n", "same": b"z\n" * 5})
    a = store.snapshot("a")
    for name in ("a1", "a2", "same"):
        os.rename(tree / name, tree / ("b" + name))
    (tree / "ba1").write_bytes(b"x\n" * 10 + b"b\n")
    (tree / "ba2").write_bytes(b"y\n" * 10 + b"b\n")
    changes = store.diff(a.id)
    full = renames.detect(changes)
    assert sorted((c.old_path, c.path) for c in full if c.status == "R") == [
        (b"a1", b"ba1"),
        (b"a2", b"ba2"),
        (b"same", b"bsame"),
    ]
    # 2 x 2 candidate pairs exceed a limit of 3: only the exact rename is found, nothing read.
    capped = renames.detect(changes, max_candidates=3)
    assert [(c.old_path, c.path) for c in capped if c.status == "R"] == [(b"same", b"bsame")]


def test_sizes_far_apart_are_never_compared(monkeypatch):
    def boom(entry):
        raise AssertionError("read")

    small = Entry(b"s", FILE, 0o644, 10, 0, b"\x01" * 32)
    large = Entry(b"l", FILE, 0o644, 1000, 0, b"\x02" * 32)
    changes = [Change("D", b"s", small, None, boom, boom), Change("A", b"l", None, large, boom, boom)]
    assert renames.detect(changes) == changes


def test_similarity_pass_gives_up_past_the_total_byte_bound(store, tree, monkeypatch):
    body = b"".join(b"line %d\n" % i for i in range(50))
    build_tree(tree, {"a.txt": body})
    a = store.snapshot("a")
    os.unlink(tree / "a.txt")
    (tree / "b.txt").write_bytes(body + b"one more\n")
    changes = store.diff(a.id)
    assert [c.status for c in renames.detect(changes)] == ["R"]
    monkeypatch.setattr(renames, "MAX_TOTAL_BYTES", 2 * len(body))
    assert [c.status for c in renames.detect(changes)] == ["D", "A"]
