"""The click-free ``snapshot`` (snapstore.cli.lean) behaves exactly like the click command.

The console script runs a plain ``snapshot`` without importing click; any other form goes to
click.  Each case below runs both ways on twin stores and compares exit code, stdout and
stderr (checkpoint ids and times differ between the twins: they are masked).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
from helpers import call_cli, subprocess_env

from snapstore.cli import lean

HEX = re.compile(rb"[0-9a-f]{12,64}")
TIME = re.compile(rb'"(time|timestamp)": [^,\n]*')


def _call_lean(monkeypatch, argv, cwd, env=None):
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    with monkeypatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        mp.setattr(sys, "stderr", err)
        for key, value in (env or {}).items():
            mp.setenv(key, value)
        mp.chdir(cwd)
        code = lean.main(argv)
    return code, out.buffer.getvalue(), err.buffer.getvalue()


def _mask(data: bytes) -> bytes:
    return TIME.sub(b"TIME", HEX.sub(b"ID", data))


@pytest.fixture
def twins(tmp_path, monkeypatch):
    """Two identical trees with a store each (one for each path) and one checkpoint."""
    roots = []
    for name in ("a", "b"):
        root = tmp_path / name
        (root / "src").mkdir(parents=True)
        (root / "src" / "app.py").write_text("print(1)\n")
        (root / "README").write_text("hello\n")
        assert call_cli(monkeypatch, ["init", "-q"], cwd=root).code == 0
        assert call_cli(monkeypatch, ["snapshot", "-m", "first", "-q"], cwd=root).code == 0
        roots.append(root)
    return roots


CASES = [
    ["snapshot", "-m", "x"],
    ["snapshot", "-mattached", "--tag", "t1", "--tag=t2", "--task", "job", "--meta", "tool=bash"],
    ["snapshot", "--message=m", "--json"],
    ["snapshot", "-m", "x", "--json", "-q"],
    ["snapshot", "-q", "-m", "quiet"],
    ["snapshot", "--skip-unchanged", "-m", "same"],
    ["snapshot", "--skip-unchanged", "--json"],
    ["--lock-timeout", "5", "snapshot", "-m", "x"],
    ["snapshot", "-m", "x", "--lock-timeout=5"],
    ["-C", "src", "snapshot", "-m", "from a subdirectory"],
    ["snapshot", "-Csrc", "-m", "x"],
    ["snapshot", "--meta", "novalue"],  # UsageError, exit code and message
    ["snapshot", "--tag", "bad tag", "-m", "x"],  # the Store refuses the tag name
    ["--store", "/nonexistent/store", "snapshot", "-m", "x"],  # StoreNotFoundError
]


def _same_times(*roots) -> None:
    # The twins' manifests record mtimes: equal times make equal bytes, so the "B new" counts
    # (compressed sizes) are equal too.
    for root in roots:
        for dirpath, _, names in os.walk(root):
            if ".snapstore" in dirpath:
                continue
            for name in names:
                os.utime(os.path.join(dirpath, name), ns=(1_700_000_000 * 10**9,) * 2)


@pytest.mark.parametrize("argv", CASES, ids=[" ".join(c) for c in CASES])
def test_lean_snapshot_matches_click(twins, monkeypatch, argv):
    a, b = twins
    (a / "new.txt").write_text("added\n")
    (b / "new.txt").write_text("added\n")
    _same_times(a, b)
    code, out, err = _call_lean(monkeypatch, argv, a)
    assert code is not None, "this form must take the click-free path"
    ref = call_cli(monkeypatch, argv, cwd=b)
    assert code == ref.code
    assert _mask(out) == _mask(ref.out)
    assert _mask(err) == _mask(ref.err.encode())
    if "--json" in argv and code == 0:
        assert json.loads(out)["message"] == json.loads(ref.out)["message"]


@pytest.mark.parametrize("env", [{"SNAPSTORE_STORE": "/nonexistent/store"}, {"SNAPSTORE_LOCK_TIMEOUT": "2.5"}])
def test_lean_reads_the_environment_like_click(twins, monkeypatch, env):
    a, b = twins
    code, out, err = _call_lean(monkeypatch, ["snapshot", "-m", "x"], a, env)
    ref = call_cli(monkeypatch, ["snapshot", "-m", "x"], cwd=b, env=env)
    assert (code, _mask(out), _mask(err)) == (ref.code, _mask(ref.out), _mask(ref.err.encode()))


@pytest.mark.parametrize(
    "argv",
    [
        ["snapshot", "--help"],
        ["snapshot", "-h"],
        ["--help"],
        ["--version"],
        ["list"],
        ["snapshot", "extra"],
        ["snapshot", "--mess", "abbreviated"],
        ["snapshot", "-qm", "x"],
        ["snapshot", "-m", "-q"],
        ["snapshot", "-m"],
        ["snapshot", "--quiet=yes"],
        ["snapshot", "--conversation", "c.json"],
        ["snapshot", "--", "x"],
        ["snapshot", "--lock-timeout", "soon"],
        ["-q", "snapshot"],
        ["snapshot", "snapshot"],
    ],
)
def test_unusual_forms_are_left_to_click(argv):
    assert lean.parse_snapshot(argv) is None


def test_parse_last_value_wins_and_globals_on_both_sides(monkeypatch):
    monkeypatch.delenv("SNAPSTORE_STORE", raising=False)
    monkeypatch.delenv("SNAPSTORE_LOCK_TIMEOUT", raising=False)
    opts = lean.parse_snapshot(["--store", "A", "-C", "d1", "snapshot", "-m", "1", "--message", "2", "--store=B", "-Cd2"])
    assert opts is not None
    assert (opts["store_dir"], opts["directory"], opts["message"], opts["lock_timeout"]) == ("B", "d2", "2", 30.0)


def test_console_script_snapshot_imports_no_click(twins):
    """`snapshot -q` without a service: no click, and none of the modules it does not use (a file
    or two changed are read inline: no thread pool, so no concurrent.futures and its logging)."""
    a, _ = twins
    (a / "more.txt").write_text("x\n")
    code = (
        "import sys\n"
        "from snapstore.service import client\n"
        "sys.argv = ['snapstore', 'snapshot', '-m', 'lean', '-q']\n"
        "rc = client.main()\n"
        "heavy = [m for m in ('click', 'snapstore.cli.app', 'snapstore.ops.merge', 'snapstore.ops.revert',"
        " 'snapstore.ops.renames', 'snapstore.records.conversation', 'snapstore.ops.gc',"
        " 'snapstore.ops.retention', 'snapstore.render', 'json', 'dataclasses', 'difflib',"
        " 'snapstore.ops.textdiff', 'concurrent.futures', 'logging', 'queue') if m in sys.modules]\n"
        "print(rc, ','.join(heavy))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=subprocess_env(), cwd=a, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().split() == ["0"], r.stdout
    listing = subprocess.run(
        [sys.executable, "-m", "snapstore", "list", "--json"], capture_output=True, env=subprocess_env(), cwd=a, timeout=120
    )
    assert json.loads(listing.stdout)["checkpoints"][0]["message"] == "lean"


def test_a_no_change_snapshot_does_not_import_zstandard(twins):
    """Nothing is compressed or decompressed when nothing changed: zstd stays unloaded, and so do
    the modules only a change needs (dataclasses, json, the diff that counts changes)."""
    a, _ = twins
    code = (
        "import sys\n"
        "from snapstore.service import client\n"
        "sys.argv = ['snapstore', 'snapshot', '-q']\n"
        "rc = client.main()\n"
        "print(rc, 'zstandard' in sys.modules, *(m for m in ('dataclasses', 'json', 'snapstore.ops.diff') if m in sys.modules))\n"
    )
    for _ in range(2):  # the first may store a change; the second has none
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=subprocess_env(), cwd=a, timeout=120)
        assert r.returncode == 0, r.stderr
    assert r.stdout.decode().split() == ["0", "False"], r.stdout


def test_console_script_ends_early_with_all_output_flushed(twins):
    """The console script leaves with os._exit after a click-free snapshot: every byte it wrote
    to a pipe (block-buffered, unlike a terminal) still arrives, and the exit code is kept."""
    a, _ = twins
    (a / "new.txt").write_text("new\n")
    env = subprocess_env()
    env.pop("PYTHONUNBUFFERED", None)  # buffered stdout, as for any real pipe
    code = "import sys; from snapstore.service.client import run; sys.argv[0] = 'snapstore'; run()"
    ok = subprocess.run([sys.executable, "-c", code, "snapshot", "-m", "early"], capture_output=True, env=env, cwd=a, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert re.fullmatch(r"[0-9a-f]{12} \+1 ~0 -0 files, \d+ B new\n", ok.stdout.decode()), ok.stdout
    bad = subprocess.run([sys.executable, "-c", code, "snapshot", "-C", "missing-dir"], capture_output=True, env=env, cwd=a, timeout=120)
    assert bad.returncode != 0 and bad.stderr.startswith(b"snapstore: error: "), bad


def test_one_table_of_global_options_matches_the_click_group_and_every_command():
    # The click-free parser and the service client read GLOBAL_OPTIONS; click must accept
    # exactly those as value-taking global options, under the same names.
    from snapstore.cli import cli
    from snapstore.cli.lean import GLOBAL_OPTIONS

    def value_options(params: list[Any]) -> dict[str, str]:
        return {
            opt: p.name for p in params if p.param_type_name == "option" and not p.is_flag for opt in p.opts
            if opt in GLOBAL_OPTIONS or p.name in GLOBAL_OPTIONS.values()
        }

    assert value_options(cli.params) == GLOBAL_OPTIONS
    for name, command in cli.commands.items():
        after = value_options(command.params)
        # After the command: the same options (a command with its own --store keeps it).
        assert {k: v for k, v in after.items() if k != "--store"} == {
            k: v for k, v in GLOBAL_OPTIONS.items() if k != "--store"
        }, name
