"""A store acts only on its own tree (issue: `--store` used to ignore -C and the cwd)."""

from __future__ import annotations

import shutil
from pathlib import Path

from helpers import assert_one_line_error

from snapstore.store import Store
from snapstore.testing import build_tree, read_tree


def _outside_store(tmp_path: Path) -> tuple[Path, Path]:
    tree, store_dir = tmp_path / "orig", tmp_path / "orig-snaps"
    build_tree(tree, {"a.txt": b"original\n"})
    with Store.init(tree, store=store_dir) as s:
        s.snapshot("A")
    return tree, store_dir


def test_a_copied_store_refuses_the_copy_and_leaves_the_original_alone(tmp_path, run_cli):
    tree, store_dir = _outside_store(tmp_path)
    copy, copy_store = tmp_path / "copy", tmp_path / "copy-snaps"
    shutil.copytree(tree, copy)
    shutil.copytree(store_dir, copy_store)
    (copy / "a.txt").write_bytes(b"edited in the copy\n")
    (tree / "a.txt").write_bytes(b"edited in the original\n")
    before = read_tree(tree)
    for command in (["snapshot", "-m", "x"], ["restore", "latest"]):
        r = run_cli("--store", str(copy_store), "-C", str(copy), *command)
        assert r.code == 3, r.err
        assert_one_line_error(r.err)
        assert str(tree) in r.err and str(copy) in r.err and "relocate" in r.err
    assert read_tree(tree) == before  # the original tree was neither read into nor rewritten
    assert (copy / "a.txt").read_bytes() == b"edited in the copy\n"

    # Adopting the copy explicitly makes it the store's tree.
    r = run_cli("--store", str(copy_store), "relocate", str(copy))
    assert r.code == 0, r.err
    r = run_cli("--store", str(copy_store), "-C", str(copy), "restore", "latest", "-q")
    assert r.code == 0, r.err
    assert (copy / "a.txt").read_bytes() == b"original\n"
    assert read_tree(tree) == before


def test_library_open_with_another_root_is_refused(tmp_path):
    import pytest

    from snapstore.errors import StoreNotFoundError

    tree, store_dir = _outside_store(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(StoreNotFoundError, match="belongs to the tree"):
        Store.open(other, store=store_dir)
    with Store.open(tree, store=store_dir) as s:
        assert s.root == str(tree)


def test_subdirectory_of_the_tree_is_fine(tmp_path, run_cli):
    tree, store_dir = _outside_store(tmp_path)
    (tree / "sub").mkdir()
    r = run_cli("--store", str(store_dir), "list", cwd=tree / "sub")
    assert r.code == 0, r.err


def test_global_options_after_the_command(tmp_path, run_cli):
    tree, store_dir = _outside_store(tmp_path)
    r = run_cli("list", "--store", str(store_dir), "-C", str(tree), "--json")
    assert r.code == 0, r.err
    assert b'"message": "A"' in r.out


def test_relocate_refuses_a_store_inside_its_tree(tmp_path, run_cli):
    tree = tmp_path / "t"
    build_tree(tree, {"x": b"x"})
    Store.init(tree).close()
    r = run_cli("--store", str(tree / ".snapstore"), "-C", str(tree), "relocate", str(tmp_path))
    assert r.code == 2
    assert_one_line_error(r.err)
