"""Exit codes: one table (snapstore.errors.EXIT_CODES), and every code produced by a real run.

Each code in the table is checked twice: the class-to-code mapping of ``cli.main`` for every
error class, and a real situation that produces it (a missing store, a damaged chunk, a held
lock, a hostile manifest, a refusing plugin, ...).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import REPO, assert_one_line_error, run_snapstore, subprocess_env

from snapstore import errors
from snapstore.store import Store
from snapstore.testing import build_tree


@pytest.fixture
def inited(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    build_tree(root, {"a.txt": b"alpha\n", "src/b.py": b"print(1)\n"})
    with Store.init(root) as s:
        s.snapshot("first")
    return root


def test_the_table_has_every_class_and_the_two_statuses():
    codes = {code for code, _ in errors.EXIT_CODES}
    assert {cls.exit_code for cls in errors.ERROR_CLASSES} | {0, 1} == codes
    assert sorted(codes) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 70, 130]


def test_docs_cli_md_holds_the_generated_table():
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert errors.exit_code_markdown() in text


def test_help_epilog_lists_every_code(run_cli):
    r = run_cli("--help")
    assert r.code == 0
    for code, _ in errors.EXIT_CODES:
        assert any(line.strip().startswith(f"{code}  ") for line in r.text.splitlines()), code


@pytest.mark.parametrize("cls", errors.ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_exits_with_its_code(cls, inited, run_cli, monkeypatch):
    def fail(self, **kwargs):
        raise cls(f"injected {cls.__name__}")

    monkeypatch.setattr(Store, "numbered_checkpoints", fail)
    r = run_cli("list", cwd=inited)
    assert r.code == cls.exit_code
    assert_one_line_error(r.err)
    assert f"injected {cls.__name__}" in r.err


def test_interrupt_exits_130_and_a_bug_exits_70(inited, run_cli, monkeypatch):
    def interrupt(self, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Store, "numbered_checkpoints", interrupt)
    r = run_cli("list", cwd=inited)
    assert r.code == 130
    # click ends the interrupted terminal line first: one error line after that newline.
    assert_one_line_error(r.err.lstrip("\n"))

    def bug(self, **kwargs):
        raise ZeroDivisionError("injected bug")

    monkeypatch.setattr(Store, "numbered_checkpoints", bug)
    r = run_cli("list", cwd=inited)
    assert r.code == 70
    assert_one_line_error(r.err)


# -- each code from a real situation -------------------------------------------------------


def test_0_and_1_diff(inited, run_cli):
    assert run_cli("diff", "-q", cwd=inited).code == 0
    (inited / "a.txt").write_bytes(b"changed\n")
    assert run_cli("diff", "-q", cwd=inited).code == 1


def test_2_usage(inited, run_cli):
    r = run_cli("list", "--no-such-option", cwd=inited)
    assert r.code == 2
    assert_one_line_error(r.err)
    r = run_cli("snapshot", "--meta", "novalue", cwd=inited)
    assert r.code == 2


def test_3_no_store_and_store_exists(tmp_path, inited, run_cli):
    r = run_cli("list", cwd=tmp_path)
    assert r.code == 3 and "--store" in r.err  # names the way to a store kept elsewhere
    assert run_cli("init", cwd=inited).code == 3


def test_4_unknown_reference_and_path(inited, run_cli):
    assert run_cli("show", "no-such-tag", cwd=inited).code == 4
    assert run_cli("cat", "latest", "missing.txt", cwd=inited).code == 4
    assert run_cli("undo", cwd=inited).code == 4


def test_5_locked(inited):
    from snapstore.storage.lock import WriterLock

    lock = WriterLock(str(inited / ".snapstore" / "lock"), 0)
    with lock.held():
        r = run_snapstore("--lock-timeout", "0.2", "snapshot", "-m", "x", cwd=inited)
    assert r.returncode == 5
    assert_one_line_error(r.stderr)


def test_6_damaged_chunk(inited, run_cli):
    with Store.open(inited) as s:
        with s.backend.read() as view:
            keys = [k for k, _ in view.items("chunks")]
        with s.backend.write() as batch:
            for k in keys:
                batch.put("chunks", k, b"\x00garbage")
    r = run_cli("cat", "latest", "a.txt", cwd=inited)
    assert r.code == 6
    assert_one_line_error(r.err)
    assert run_cli("verify", "-q", cwd=inited).code == 6


def test_7_unknown_format(inited, run_cli):
    with Store.open(inited) as s:
        with s.backend.write() as batch:
            batch.put("meta", b"format", b"99")
    r = run_cli("list", cwd=inited)
    assert r.code == 7
    assert_one_line_error(r.err)


def test_8_file_system_error(tmp_path, run_cli):
    (tmp_path / "plain-file").write_bytes(b"x")
    r = run_cli("-C", str(tmp_path / "plain-file"), "init")
    assert r.code == 8
    assert_one_line_error(r.err)


def test_9_conflict_tree_changed_during_restore(inited, monkeypatch):
    from snapstore.ops import restore as restore_mod

    with Store.open(inited) as s:
        (inited / "a.txt").write_bytes(b"agent edit\n")
        (inited / "new.txt").write_bytes(b"added later\n")

        def hook(i: int) -> None:
            if i == 1:
                (inited / "a.txt").write_bytes(b"someone else wrote this\n")

        monkeypatch.setattr(restore_mod, "step_hook", hook)
        with pytest.raises(errors.ConflictError) as info:
            s.restore("latest")
    assert info.value.exit_code == 9


def test_10_unsafe_path_in_a_manifest(inited, run_cli):
    from restore_helpers import plant_checkpoint

    from snapstore.records.manifest import FILE, Entry
    from snapstore.storage.objects import chunk_id

    content = b"pwned\n"
    with Store.open(inited) as s:
        ref = plant_checkpoint(s, [Entry(b"../escape", FILE, 0o644, len(content), 0, chunk_id(content))], content)
    r = run_cli("restore", ref, cwd=inited)
    assert r.code == 10
    assert_one_line_error(r.err)
    assert not (inited.parent / "escape").exists()


def test_11_a_plugin_refuses(inited, tmp_path):
    # A real installed plugin (a dist-info with an entry point, on PYTHONPATH outside the tree).
    site = tmp_path / "site"
    (site / "refuser-1.0.dist-info").mkdir(parents=True)
    (site / "refuser-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: refuser\nVersion: 1.0\n")
    (site / "refuser-1.0.dist-info" / "entry_points.txt").write_text("[snapstore.plugins]\nrefuser = refuser:plugin\n")
    (site / "refuser.py").write_text(
        textwrap.dedent(
            """
            def plugin(store):
                def refuse(store, **kwargs):
                    raise RuntimeError("not now")
                store.hooks.register("before_snapshot", refuse)
            """
        )
    )
    env = subprocess_env()
    env["PYTHONPATH"] = str(site) + os.pathsep + env["PYTHONPATH"]
    r = subprocess.run(
        [sys.executable, "-m", "snapstore", "snapshot", "-m", "x"],
        cwd=inited, env=env, capture_output=True, timeout=60,
    )
    assert r.returncode == 11, r.stderr
    assert_one_line_error(r.stderr)


def test_14_a_missing_key_file_for_an_encrypted_remote(tmp_path, inited, run_cli):
    r = run_cli("remote", "add", "origin", "s3://bucket/p", "--key-file", str(tmp_path / "gone.key"), cwd=inited)
    assert r.code == 14
    assert_one_line_error(r.err)
    assert "gone.key" in r.err


def test_every_command_help_has_an_example(run_cli):
    from snapstore.cli import cli

    for name in cli.commands:
        r = run_cli(name, "--help")
        assert r.code == 0, name
        assert "Example:" in r.text, f"`snapstore {name} --help` has no example"


def test_cat_json_gives_the_hash_edit_compares_with(inited, run_cli):
    import json

    from snapstore.ops.edit import content_hash

    r = run_cli("cat", "latest", "a.txt", "--json", cwd=inited)
    assert r.code == 0
    info = json.loads(r.out)
    assert info["hash"] == content_hash(b"alpha\n") and info["size"] == 6 and info["kind"] == "file"
