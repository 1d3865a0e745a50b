"""Restore, undo, diff: behaviour on real trees and a real LMDB store."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from restore_helpers import plant_checkpoint, read_tree, sample_spec, write_tree

from snapstore.errors import ConflictError, CorruptError, RefError, UnsafePathError
from snapstore.ops import restore as restore_mod
from snapstore.records.manifest import DIR, FILE, SYMLINK, Entry
from snapstore.storage import objects
from snapstore.store import Store


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    write_tree(root, sample_spec())
    return root


def _edit(root: Path) -> None:
    (root / "src/f1.txt").write_bytes(b"edited by the agent\n")
    (root / "docs").exists() and shutil.rmtree(root / "docs")
    (root / "new/sub").mkdir(parents=True)
    (root / "new/sub/added.py").write_bytes(b"print('new')\n")
    (root / "bin/tool").chmod(0o644)
    os.unlink(root / "link")
    os.symlink("big.bin", root / "link")
    (root / "empty/dir").rmdir()
    (root / "empty/dir").write_bytes(b"now a file\n")


def test_restore_makes_the_tree_equal_and_undo_puts_it_back(tree: Path):
    with Store.init(tree) as store:
        store.snapshot("A")
        state_a = read_tree(tree)
        _edit(tree)
        state_edited = read_tree(tree)
        assert state_edited != state_a
        report = store.restore("latest")
        assert read_tree(tree) == state_a
        assert report.safety is not None and report.safety.is_safety
        # The safety checkpoint is hidden from latest / list, shown by list --all.
        assert store.resolve("latest").message == "A"
        assert report.safety.id in {c.id for c in store.checkpoints(include_safety=True)}
        assert report.safety.id not in {c.id for c in store.checkpoints()}
        store.undo()
        assert read_tree(tree) == state_edited
        store.undo()  # undoing the undo
        assert read_tree(tree) == state_a
        kinds = [op.kind for op in store.operations()]
        assert kinds == ["undo", "undo", "restore"]
        assert store.verify().ok


def test_only_differing_paths_are_written(tree: Path):
    with Store.init(tree) as store:
        store.snapshot("A")
        (tree / "src/f1.txt").write_bytes(b"changed\n")
        untouched = tree / "deep/a/b/c"
        inodes = {p: p.lstat().st_ino for p in tree.rglob("*") if ".snapstore" not in p.parts}
        report = store.restore("latest")
        assert [c.path for c in report.changes] == [b"src/f1.txt"]
        for p, ino in inodes.items():
            if p.name != "f1.txt" or p.parent.name != "src":
                assert p.lstat().st_ino == ino, f"{p} was rewritten"
        assert untouched.exists()


def test_dry_run_changes_nothing(tree: Path):
    with Store.init(tree) as store:
        store.snapshot("A")
        _edit(tree)
        before_tree = read_tree(tree)
        before_cps = store.checkpoints(include_safety=True)
        data = (tree / ".snapstore/data.mdb").read_bytes()
        report = store.restore("latest", dry_run=True)
        assert report.dry_run and report.changes
        real = store.diff("latest")
        assert {c.path for c in report.changes} == {c.path for c in real}
        assert read_tree(tree) == before_tree
        assert store.checkpoints(include_safety=True) == before_cps
        assert (tree / ".snapstore/data.mdb").read_bytes() == data
        assert store.operations() == []


def test_partial_restore_touches_only_the_given_paths(tree: Path):
    with Store.init(tree) as store:
        store.snapshot("A")
        a = read_tree(tree)
        _edit(tree)
        edited = read_tree(tree)
        store.restore("latest", ["src/f1.txt", "new"])
        now = read_tree(tree)
        assert now["src/f1.txt"] == a["src/f1.txt"]
        assert not any(k.startswith("new") for k in now)
        assert now["link"] == edited["link"]  # not selected: left as edited
        store.undo()
        assert read_tree(tree) == edited


def test_ignored_files_git_and_store_are_never_touched(tree: Path):
    (tree / ".gitignore").write_bytes(b"*.log\nbuild/\n")
    (tree / ".git").mkdir()
    (tree / ".git/HEAD").write_bytes(b"ref: refs/heads/main\n")
    with Store.init(tree) as store:
        store.snapshot("A")
        (tree / "debug.log").write_bytes(b"ignored\n")
        (tree / "build").mkdir()
        (tree / "build/out.o").write_bytes(b"obj")
        (tree / ".git/HEAD").write_bytes(b"changed by git\n")
        (tree / "src/f1.txt").write_bytes(b"x")
        store.restore("latest")
        assert (tree / "debug.log").read_bytes() == b"ignored\n"
        assert (tree / "build/out.o").read_bytes() == b"obj"
        assert (tree / ".git/HEAD").read_bytes() == b"changed by git\n"
        assert store.verify().ok


def test_a_file_the_checkpoint_holds_but_now_ignored_is_left_alone_with_a_warning(tree: Path, run_cli):
    # The checkpoint holds debug.log; *.log is ignored since, and the user changed the file.
    # Restore must not write it (the scan no longer sees it, so it cannot tell an unsaved edit
    # from a stale copy): it leaves it, says so, and succeeds.
    (tree / "debug.log").write_bytes(b"v1\n")
    (tree / "build").mkdir()
    (tree / "build/keep.txt").write_bytes(b"k1\n")
    assert run_cli("init", cwd=tree).code == 0
    assert run_cli("snapshot", "-m", "A", cwd=tree).code == 0
    (tree / ".gitignore").write_bytes(b"*.log\nbuild/\n")
    (tree / "debug.log").write_bytes(b"v2, the user's\n")
    (tree / "build/keep.txt").write_bytes(b"k2, the user's\n")
    (tree / "src/f1.txt").write_bytes(b"x")
    result = run_cli("restore", "latest", cwd=tree)
    assert result.code == 0, result.err
    assert (tree / "debug.log").read_bytes() == b"v2, the user's\n"
    assert (tree / "build/keep.txt").read_bytes() == b"k2, the user's\n"
    assert "left debug.log alone: debug.log is ignored" in result.err + result.text
    assert "left build/keep.txt alone: build is ignored" in result.err + result.text
    assert (tree / "src/f1.txt").read_bytes() != b"x"  # the rest was restored


def test_directory_that_holds_ignored_files_is_not_removed(tree: Path):
    (tree / ".gitignore").write_bytes(b"*.log\n")
    with Store.init(tree) as store:
        store.snapshot("A")
        (tree / "later").mkdir()
        (tree / "later/code.py").write_bytes(b"x")
        (tree / "later/run.log").write_bytes(b"log")
        store.restore("latest")
        assert not (tree / "later/code.py").exists()
        assert (tree / "later/run.log").read_bytes() == b"log"


def test_restore_with_no_terminal_and_closed_stdin(tree: Path):
    import subprocess
    import sys

    original = (tree / "src/f1.txt").read_bytes()
    with Store.init(tree) as store:
        store.snapshot("A")
    (tree / "src/f1.txt").write_bytes(b"changed")
    proc = subprocess.run(
        [sys.executable, "-m", "snapstore", "restore", "latest"],
        cwd=tree,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tree / "src/f1.txt").read_bytes() == original == b"file 1\n" * 10


def test_damaged_store_fails_before_touching_the_tree(tree: Path):
    with Store.init(tree) as store:
        store.snapshot("A")
        (tree / "big.bin").write_bytes(b"replaced")
        edited = read_tree(tree)
        entry = next(e for e in store.entries("latest") if e.path == b"big.bin")
        chunk = objects.leaf_ids(_getter(store), entry.ref)[0]
        env = store.backend.env
        with env.begin(write=True) as txn:
            db = env.open_db(b"chunks", txn=txn)
            value = bytearray(txn.get(chunk, db=db))
            value[-1] ^= 0xFF
            txn.put(chunk, bytes(value), db=db)
        with pytest.raises(CorruptError, match=chunk.hex()):
            store.restore("latest")
        assert read_tree(tree) == edited


def _getter(store):
    def get(table, key):
        with store.backend.read() as view:
            return view.get(table, key)

    return get


def test_concurrent_edit_stops_rolls_back_and_names_the_file(tree: Path, monkeypatch):
    with Store.init(tree) as store:
        store.snapshot("A")
        for name in ("src/f1.txt", "src/f3.txt"):
            if (tree / name).exists():
                (tree / name).write_bytes(b"agent edit " + name.encode())
        (tree / "zz-last.txt").write_bytes(b"added later")
        edited = read_tree(tree)

        def hook(i: int) -> None:
            # Step 0 deletes zz-last.txt (added since A); the writes come later.
            if i == 1:
                (tree / "src/f3.txt").write_bytes(b"someone else wrote this")

        monkeypatch.setattr(restore_mod, "step_hook", hook)
        with pytest.raises(ConflictError, match="src/f3.txt"):
            store.restore("latest")
        monkeypatch.setattr(restore_mod, "step_hook", None)
        now = read_tree(tree)
        expected = dict(edited)  # zz-last.txt is back: the rollback undid the deletion
        expected["src/f3.txt"] = ("file", b"someone else wrote this", False)
        assert now == expected
        assert store.operations() == []


def _file(path: bytes) -> Entry:
    from snapstore.storage.objects import chunk_id

    return Entry(path, FILE, 0o644, 6, 0, chunk_id(b"pwned\n"))


@pytest.mark.parametrize(
    "entries",
    [
        [_file(b"../escape")],
        [_file(b"/tmp/absolute")],
        [_file(b"a//b")],
        [_file(b"a/./b")],
        [_file(b"nul\x00byte")],
        [_file(b".git/hooks/post-checkout")],
        [_file(b"sub/.git/config")],
        [Entry(b"evil", SYMLINK, 0o777, 4, 0, b"/etc"), _file(b"evil/passwd")],
        [_file(b"plain"), _file(b"plain/below")],
        [_file(b".snapstore/data.mdb")],
    ],
    ids=["dotdot", "absolute", "empty-part", "dot-part", "nul", "git", "nested-git",
         "symlinked-parent", "below-a-file", "the-store"],
)
def test_hostile_manifests_are_refused_and_nothing_is_written(tmp_path: Path, entries):
    sandbox = tmp_path / "sandbox"
    root = sandbox / "tree"
    root.mkdir(parents=True)
    (root / "keep.txt").write_bytes(b"mine\n")
    outside_before = read_tree(tmp_path, skip=set())
    with Store.init(root) as store:
        store.snapshot("honest")
        outside_before = read_tree(tmp_path, skip={"sandbox"})
        tree_before = read_tree(root)
        ref = plant_checkpoint(store, entries)
        with pytest.raises(UnsafePathError):
            store.restore(ref)
        assert read_tree(root) == tree_before
        assert read_tree(tmp_path, skip={"sandbox"}) == outside_before
        assert not Path("/tmp/absolute").exists() or Path("/tmp/absolute").read_bytes() != b"pwned\n"


def test_symlinked_parent_on_disk_is_never_followed(tmp_path: Path):
    root = tmp_path / "tree"
    outside = tmp_path / "outside"
    outside.mkdir()
    root.mkdir()
    (root / "sub").mkdir()
    (root / "sub/file.txt").write_bytes(b"original\n")
    with Store.init(root) as store:
        store.snapshot("A")
        # An agent (or an attacker) replaces the directory by a link to somewhere else.
        (root / "sub/file.txt").unlink()
        (root / "sub").rmdir()
        os.symlink(outside, root / "sub")
        store.restore("latest")
        assert not (outside / "file.txt").exists()
        assert not (root / "sub").is_symlink()
        assert (root / "sub/file.txt").read_bytes() == b"original\n"


def test_symlink_swapped_in_during_restore_is_not_followed(tmp_path: Path, monkeypatch):
    root = tmp_path / "tree"
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "a").mkdir(parents=True)
    (root / "a/x.txt").write_bytes(b"x1\n")
    (root / "z").mkdir()
    (root / "z/y.txt").write_bytes(b"y1\n")
    with Store.init(root) as store:
        store.snapshot("A")
        (root / "a/x.txt").write_bytes(b"x2\n")
        (root / "z/y.txt").write_bytes(b"y2\n")

        def hook(i: int) -> None:
            if i == 1:  # after a/x.txt is restored, swap z for a link outside
                shutil.rmtree(root / "z")
                os.symlink(outside, root / "z")

        monkeypatch.setattr(restore_mod, "step_hook", hook)
        with pytest.raises(ConflictError):
            store.restore("latest")
        monkeypatch.setattr(restore_mod, "step_hook", None)
        assert list(outside.iterdir()) == []
        assert (root / "a/x.txt").read_bytes() == b"x2\n"  # rolled back


def test_directory_becomes_file_and_file_becomes_directory(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    write_tree(root, {"x/inner.txt": b"inner", "y": b"plain file"})
    with Store.init(root) as store:
        store.snapshot("A")
        a = read_tree(root)
        shutil.rmtree(root / "x")
        (root / "x").write_bytes(b"x is a file now")
        (root / "y").unlink()
        (root / "y").mkdir()
        (root / "y/deep.txt").write_bytes(b"deep")
        b = read_tree(root)
        store.restore("latest")
        assert read_tree(root) == a
        store.undo()
        assert read_tree(root) == b


def test_undo_with_nothing_to_undo(tree: Path):
    with Store.init(tree) as store:
        store.snapshot("A")
        with pytest.raises(RefError, match="nothing to undo"):
            store.undo()


def test_diff_between_checkpoints_and_worktree(tree: Path):
    with Store.init(tree) as store:
        store.snapshot("A")
        assert store.diff("latest") == []
        (tree / "src/f1.txt").write_bytes(b"new content\n")
        (tree / "added.txt").write_bytes(b"added\n")
        os.unlink(tree / "big.bin")
        (tree / "bin/tool").chmod(0o644)
        changes = {c.path: c for c in store.diff("latest")}
        assert {p: c.status for p, c in changes.items()} == {
            b"src/f1.txt": "M",
            b"added.txt": "A",
            b"big.bin": "D",
            b"bin/tool": "X",
        }
        assert changes[b"src/f1.txt"].new_bytes() == b"new content\n"
        assert changes[b"src/f1.txt"].old_bytes().startswith(b"file 1\n")
        assert changes[b"big.bin"].new_bytes() is None
        store.snapshot("B")
        between = {c.path: c.status for c in store.diff("latest~1", "latest")}
        assert between == {p: c.status for p, c in changes.items()}
        assert store.diff("latest", "latest") == []
        only_src = store.diff("latest~1", "latest", paths=["src"])
        assert [c.path for c in only_src] == [b"src/f1.txt"]


def test_manifest_difference_skips_shared_chunks(tmp_path: Path, monkeypatch):
    root = tmp_path / "t"
    root.mkdir()
    write_tree(root, {f"d{i // 50}/f{i:04d}.txt": f"{i}\n".encode() for i in range(2000)})
    with Store.init(root) as store:
        store.snapshot("A")
        (root / "d3/f0150.txt").write_bytes(b"changed\n")
        store.snapshot("B")
        from snapstore.ops import diff as diff_mod
        from snapstore.records import manifest as manifest_mod

        decoded = []
        real = manifest_mod._check

        def counting(raw):
            decoded.append(raw[0])
            return real(raw)

        monkeypatch.setattr(diff_mod.manifest, "_check", counting)
        changes = store.diff("latest~1", "latest")
        assert [c.path for c in changes] == [b"d3/f0150.txt"]
        # Only the chunk holding the changed entry is decoded on each side, not 2 x 2000, and
        # of its records only the one that differs is made an entry.
        assert decoded == [b"d3/f0150.txt"] * 2
        with store.backend.read() as view:
            a, b = store.resolve("latest~1").manifest, store.resolve("latest").manifest
            old, new = diff_mod.manifest_difference(view.get, a, b)
            assert list(old) == list(new) == [b"d3/f0150.txt"]


def test_empty_dirs_symlinks_and_exec_bits_round_trip(tmp_path: Path):
    root = tmp_path / "t"
    root.mkdir()
    write_tree(root, {"e1": None, "e2/e3": None, "run.sh": ("exec", b"#!/bin/sh\n"), "l": ("link", "nowhere")})
    with Store.init(root) as store:
        store.snapshot("A")
        a = read_tree(root)
        shutil.rmtree(root / "e1")
        shutil.rmtree(root / "e2")
        (root / "run.sh").unlink()
        (root / "l").unlink()
        store.restore("latest")
        assert read_tree(root) == a
        entries = {e.path: e.kind for e in store.entries("latest")}
        assert entries[b"e1"] == DIR and entries[b"e2/e3"] == DIR


def test_a_symlink_and_a_directory_the_checkpoint_holds_but_now_ignored_are_left_alone(tree: Path, run_cli):
    """The same guard for the other kinds of step: a symlink and an empty directory the
    checkpoint holds, at paths ignored since, where the user now keeps files of their own.
    Restore must neither replace the file with the link nor with the directory (the review's
    mutation M1b: only file writes were checked, and nothing failed)."""
    (tree / "data").write_bytes(b"d\n")
    os.symlink("data", tree / "lnk")
    (tree / "hollow").mkdir()
    assert run_cli("init", cwd=tree).code == 0
    assert run_cli("snapshot", "-m", "A", cwd=tree).code == 0
    (tree / ".gitignore").write_bytes(b"lnk\nhollow\n")
    os.unlink(tree / "lnk")
    (tree / "lnk").write_bytes(b"the user's file\n")
    (tree / "hollow").rmdir()
    (tree / "hollow").write_bytes(b"the user's other file\n")
    (tree / "data").write_bytes(b"changed\n")
    result = run_cli("restore", "latest", cwd=tree)
    assert result.code == 0, result.err
    assert not (tree / "lnk").is_symlink() and (tree / "lnk").read_bytes() == b"the user's file\n"
    assert (tree / "hollow").is_file() and (tree / "hollow").read_bytes() == b"the user's other file\n"
    said = result.err + result.text
    assert "left lnk alone: lnk is ignored" in said and "left hollow alone: hollow is ignored" in said
    assert (tree / "data").read_bytes() == b"d\n"  # the rest was restored
