"""The command line: what each command prints, and every reachable exit code."""

from __future__ import annotations

import json
import re

import click
import pytest
from helpers import REPO, assert_one_line_error, run_snapstore

from snapstore.cli import cli
from snapstore.store import Store
from snapstore.testing import Exec, build_tree, random_bytes

CHECKPOINT_KEYS = {"id", "time", "message", "task", "tags", "parent"}


@pytest.fixture
def inited(tree, run_cli):
    build_tree(tree, {"a.txt": b"alpha\n", "bin/run": Exec(b"#!/bin/sh\n"), "b.bin": bytes(range(256)) * 3})
    r = run_cli("init", cwd=tree)
    assert r.code == 0, r.err
    return tree


def _snap(run_cli, tree, *args):
    r = run_cli("snapshot", "--json", *args, cwd=tree)
    assert r.code == 0, r.err
    return json.loads(r.out)


# -- commands ---------------------------------------------------------------------------------


def test_init_creates_a_store_in_the_tree(tree, run_cli):
    r = run_cli("init", cwd=tree)
    assert r.code == 0 and r.err == ""
    assert (tree / ".snapstore" / "data.mdb").exists()
    assert "initialised" in r.text
    assert run_cli("init", "-q", cwd=tree).code == 3  # a store already exists


def test_init_with_store_outside_the_tree(tmp_path, run_cli):
    tree = tmp_path / "work"
    build_tree(tree, {"x": b"x"})
    store_dir = tmp_path / "snaps"
    r = run_cli("init", "-q", "--store", str(store_dir), cwd=tree)
    assert (r.code, r.out, r.err) == (0, b"", "")
    assert (store_dir / "data.mdb").exists() and not (tree / ".snapstore").exists()
    r = run_cli("--store", str(store_dir), "snapshot", "-q", "-m", "outside", cwd=tree / ".")
    assert (r.code, r.out) == (0, b"")
    # Outside the tree the store refuses (it would act on a tree the user is not in).
    r = run_cli("--store", str(store_dir), "snapshot", "-q", "-m", "elsewhere", cwd=tmp_path)
    assert r.code == 3 and "belongs to the tree" in r.err
    with Store.open(store=store_dir) as s:
        assert s.read_bytes("latest", "x") == b"x"
        assert s.resolve("latest").message == "outside"


def test_snapshot_options_and_json(inited, run_cli, tmp_path):
    conv = [{"role": "user", "content": "fix the bug ✓"}, {"role": "assistant", "content": None}]
    conv_file = tmp_path / "conv.json"
    conv_file.write_text(json.dumps(conv), encoding="utf-8")
    doc = _snap(run_cli, inited, "-m", "first", "--tag", "t1", "--tag", "t2", "--task", "T",
                "--meta", "tool=write_file", "--meta", "k=a=b", "--conversation", str(conv_file))  # fmt: skip
    assert CHECKPOINT_KEYS <= set(doc)
    assert doc["message"] == "first" and doc["task"] == "T" and doc["parent"] is None
    assert sorted(doc["tags"]) == ["t1", "t2"]
    assert doc["metadata"] == {"tool": "write_file", "k": "a=b"}
    assert doc["has_conversation"] is True and doc["reused"] is False and doc["warnings"] == []
    assert doc["stats"]["files"] == 3 and doc["stats"]["added"] == 3
    r = run_cli("show", "--conversation", "--json", cwd=inited)
    assert r.code == 0 and json.loads(r.out) == conv


def test_snapshot_conversation_from_stdin(inited, run_cli):
    conv = [{"role": "user", "content": "from stdin"}, 42, "text", [1, 2]]
    r = run_cli("snapshot", "-q", "--conversation", "-", cwd=inited, stdin=json.dumps(conv).encode())
    assert (r.code, r.out) == (0, b"")
    r = run_cli("show", "latest", "--conversation", "--json", cwd=inited)
    assert json.loads(r.out) == conv


@pytest.mark.parametrize("payload", [b"{not json", b'{"a": 1}', b"\xff\xfe", b""])
def test_bad_conversation_exits_2(inited, run_cli, tmp_path, payload):
    bad = tmp_path / "bad.json"
    bad.write_bytes(payload)
    r = run_cli("snapshot", "--conversation", str(bad), cwd=inited)
    assert r.code == 2
    assert_one_line_error(r.err)
    r = run_cli("snapshot", "--conversation", "-", cwd=inited, stdin=payload)
    assert r.code == 2
    assert_one_line_error(r.err)
    with Store.open(inited) as s:
        assert s.checkpoints() == []


def test_skip_unchanged_and_quiet(inited, run_cli):
    first = _snap(run_cli, inited, "-m", "one")
    again = _snap(run_cli, inited, "--skip-unchanged")
    assert again["reused"] is True and again["id"] == first["id"]
    r = run_cli("snapshot", "--skip-unchanged", cwd=inited)
    assert r.code == 0 and "unchanged" in r.text
    (inited / "a.txt").write_bytes(b"changed\n")
    changed = _snap(run_cli, inited, "--skip-unchanged")
    assert changed["reused"] is False and changed["parent"] == first["id"]
    r = run_cli("snapshot", "-q", "-m", "quiet", cwd=inited)
    assert (r.code, r.out, r.err) == (0, b"", "")
    with Store.open(inited) as s:
        assert [c.message for c in s.checkpoints()] == ["quiet", "", "one"]


def test_snapshot_human_output(inited, run_cli):
    r = run_cli("snapshot", "-m", "hi", cwd=inited)
    assert r.code == 0
    with Store.open(inited) as s:
        short = s.resolve("latest").short_id
    assert re.fullmatch(rf"{short} \+3 ~0 -0 files, .* new\n", r.text)


def test_list(inited, run_cli):
    one = _snap(run_cli, inited, "-m", "one", "--task", "A")
    (inited / "a.txt").write_bytes(b"2")
    two = _snap(run_cli, inited, "-m", "two", "--task", "B", "--tag", "v2")
    r = run_cli("list", "--json", cwd=inited)
    rows = json.loads(r.out)["checkpoints"]
    assert [c["id"] for c in rows] == [two["id"], one["id"]]
    for row in rows:
        assert CHECKPOINT_KEYS <= set(row)
    assert rows[0]["tags"] == ["v2"] and rows[0]["parent"] == one["id"] and rows[0]["task"] == "B"
    assert rows[1]["message"] == "one" and rows[1]["parent"] is None
    only_a = json.loads(run_cli("list", "--task", "A", "--json", cwd=inited).out)["checkpoints"]
    assert [c["id"] for c in only_a] == [one["id"]]
    text = run_cli("list", cwd=inited).text.splitlines()
    assert len(text) == 2 and text[0].startswith("#2") and two["short_id"] in text[0]
    assert "[v2]" in text[0] and text[1].startswith("#1")
    assert len(run_cli("list", "-n", "1", cwd=inited).text.splitlines()) == 1


def test_list_empty_store(inited, run_cli):
    r = run_cli("list", cwd=inited)
    assert (r.code, r.text) == (0, "no checkpoints yet\n")
    assert json.loads(run_cli("list", "--json", cwd=inited).out) == {"checkpoints": []}


def test_show(inited, run_cli):
    one = _snap(run_cli, inited, "-m", "one", "--meta", "tool=edit")
    (inited / "a.txt").write_bytes(b"changed")
    (inited / "new.txt").write_bytes(b"new")
    (inited / "b.bin").unlink()
    two = _snap(run_cli, inited, "-m", "two")
    doc = json.loads(run_cli("show", "--json", cwd=inited).out)
    assert doc["id"] == two["id"] and doc["parent"] == one["id"]
    assert {(c["status"], c["path"]) for c in doc["changes"]} == {
        ("M", "a.txt"), ("A", "new.txt"), ("D", "b.bin"),
    }  # fmt: skip
    text = run_cli("show", one["short_id"], cwd=inited).text
    assert f"checkpoint {one['id']}" in text and "meta:     tool=edit" in text
    r = run_cli("show", "--conversation", cwd=inited)
    assert r.code == 4
    assert_one_line_error(r.err)


def test_cat_exact_bytes(inited, run_cli):
    blob = random_bytes(300_000, 9) + b"\x00\r\n\xff"
    (inited / "blob.bin").write_bytes(blob)
    _snap(run_cli, inited)
    assert run_cli("cat", "latest", "blob.bin", cwd=inited).out == blob
    assert run_cli("cat", "latest", "b.bin", cwd=inited).out == bytes(range(256)) * 3
    assert run_cli("cat", "#1", "./bin//run", cwd=inited).out == b"#!/bin/sh\n"
    proc = run_snapstore("cat", "latest", "blob.bin", cwd=inited)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, blob, b"")


def test_verify_ok(inited, run_cli):
    _snap(run_cli, inited)
    r = run_cli("verify", cwd=inited)
    assert r.code == 0 and r.text.startswith("verified ") and r.text.rstrip().endswith("ok")
    doc = json.loads(run_cli("verify", "--json", cwd=inited).out)
    assert doc["ok"] is True and doc["problems"] == [] and doc["checkpoints"] == 1
    assert run_cli("verify", "-q", cwd=inited).out == b""


def test_warnings_go_to_stderr(inited, run_cli):
    import os

    os.mkfifo(inited / "pipe")
    r = run_cli("snapshot", cwd=inited)
    assert r.code == 0
    assert r.err.startswith("snapstore: warning: ") and "pipe" in r.err
    assert "1 skipped" in r.text


# -- exit codes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, code",
    [
        (["--no-such-option"], 2),
        (["snapshot", "--bogus"], 2),
        (["no-such-command"], 2),
        (["cat", "latest"], 2),  # missing argument
        (["snapshot", "--meta", "novalue"], 2),
        (["snapshot", "--tag", "latest"], 2),
        (["snapshot", "--conversation", "/nonexistent/conv.json"], 2),
        (["init", "--compression", "99"], 2),
        (["init"], 3),  # already exists
        (["show", "nope"], 4),
        (["show", "#7"], 4),
        (["cat", "latest", "no/such/file"], 4),
        (["cat", "latest", "bin"], 4),  # a directory, not a file
        (["show", "abc"], 4),  # prefix too short
    ],
)
def test_exit_codes_in_process(inited, run_cli, args, code):
    _snap(run_cli, inited)
    r = run_cli(*args, cwd=inited)
    assert r.code == code, r.err
    assert_one_line_error(r.err)


def test_no_store_exits_3(tmp_path, run_cli):
    for args in (["list"], ["snapshot"], ["cat", "latest", "x"], ["verify"]):
        r = run_cli(*args, cwd=tmp_path)
        assert r.code == 3, args
        assert_one_line_error(r.err)
    r = run_cli("--store", str(tmp_path / "missing"), "list", cwd=tmp_path)
    assert r.code == 3
    assert_one_line_error(r.err)


def test_a_missing_directory_is_an_error_not_the_parents_tree(inited, run_cli):
    """`-C typo` inside a tree must not act on the enclosing tree (as git -C refuses)."""
    for args in (["list"], ["snapshot", "-m", "x"], ["snapshot", "-q"], ["log", "a.txt"]):
        r = run_cli("-C", "no-such-dir", *args, cwd=inited)
        assert r.code == 2, (args, r.out, r.err)
        assert "cannot change to no-such-dir" in r.err
        assert_one_line_error(r.err)
    r = run_cli("-C", "no-such-dir", "snapshot", cwd=inited)
    assert r.code == 2
    assert run_cli("list", "--json", cwd=inited).out.count(b'"id"') == 0  # nothing was recorded


def test_init_in_a_path_that_is_a_file_exits_8(tmp_path, run_cli):
    f = tmp_path / "plain-file"
    f.write_bytes(b"x")
    r = run_cli("-C", str(f), "init", cwd=tmp_path)
    assert r.code == 8
    assert_one_line_error(r.err)
    r = run_cli("init", "--store", str(f / "sub"), cwd=tmp_path)
    assert r.code == 8
    assert_one_line_error(r.err)


def test_internal_error_is_one_line_exit_70(inited, run_cli, monkeypatch):
    """A bug (here: an unexpected exception injected into a Store method) gives one line and 70."""

    def boom(self, *args, **kwargs):
        raise ZeroDivisionError("injected bug")

    monkeypatch.setattr(Store, "numbered_checkpoints", boom)
    r = run_cli("list", cwd=inited)
    assert r.code == 70
    assert_one_line_error(r.err)
    assert "internal error" in r.err and "ZeroDivisionError" in r.err
    with pytest.raises(ZeroDivisionError):
        run_cli("list", cwd=inited, env={"SNAPSTORE_DEBUG": "1"})


@pytest.mark.parametrize("script", [False, True], ids=["python-m", "console-script"])
def test_exit_codes_of_real_processes(tmp_path, script):
    tree = tmp_path / "tree"
    build_tree(tree, {"f.txt": b"content\n"})

    def run(*args, code):
        proc = run_snapstore(*args, cwd=tree, script=script)
        assert proc.returncode == code, (args, proc.stderr)
        if code:
            assert_one_line_error(proc.stderr)
        else:
            assert b"Traceback" not in proc.stderr
        return proc

    run("list", code=3)
    run("init", "-q", code=0)
    run("init", code=3)
    run("snapshot", "-q", "-m", "one", code=0)
    assert run("cat", "latest", "f.txt", code=0).stdout == b"content\n"
    run("show", "nope", code=4)
    run("--bogus", code=2)
    run("-C", str(tree / "f.txt"), "init", code=8)


def test_version_and_help(run_cli):
    r = run_cli("--version")
    assert r.code == 0 and "snapstore" in r.text
    r = run_cli("--help")
    assert r.code == 0 and "Exit codes" in r.text
    listed = r.text.split("Every command takes --help")[0]
    missing = [name for name in cli.commands if name not in listed]
    assert not missing, f"the group help does not list {missing}"


# -- docs -------------------------------------------------------------------------------------


def _commands():
    return sorted(cli.commands.items())


@pytest.mark.parametrize("name, command", _commands(), ids=[n for n, _ in _commands()])
def test_every_command_has_help(name, command):
    assert command.help and command.help.strip(), name
    ctx = click.Context(command, info_name=name)
    assert command.get_short_help_str().strip()
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts} has no help"
    assert command.get_help(ctx)


@pytest.mark.parametrize("name", [n for n, _ in _commands()])
def test_every_command_has_a_section_in_docs_cli_md(name):
    doc = REPO / "docs" / "cli.md"
    assert doc.exists(), "docs/cli.md is missing"
    headings = [line for line in doc.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert any(f"`snapstore {name}`" in h for h in headings), f"no heading for `snapstore {name}`"
