"""Control characters in untrusted text never reach the terminal raw (issue 38 class 13, local
part): checkpoint messages, tasks, tags, file names, metadata (tool names), conversation text and
error messages are printed with C0/C1 controls shown as ``\\xNN`` by every human-readable
output; ``--json`` stays valid JSON that decodes to the exact text; ``cat`` and a piped patch
stay the exact bytes (they are data), a patch shown on a terminal is escaped."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import subprocess_env

from snapstore.render import dump_json, printable, printable_bytes
from snapstore.store import Store

#: OSC 52 (writes the clipboard), CSI 2J (clears the screen), BEL, a C1 CSI, DEL, a CR.
EVIL = "\x1b]52;c;cHduZWQ=\x07 \x1b[2J \x07 \x9b31m \x7f \r"
NAME = "f\x1b[2J\x9b.txt"
#: Any control byte a terminal obeys: C0 but newline and tab, DEL, C1 as UTF-8.
CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    with Store.init(root) as store:
        store.snapshot("first")
        (root / NAME).write_bytes(b"content \x1b[2J\n")
        (root / "a.txt").write_text("b\n")
        store.snapshot("msg " + EVIL, task="task" + EVIL, tags=["v1"],
                       metadata={"tool_name": "Bash" + EVIL, "actor": "agent"},
                       conversation=[{"role": "user", "content": "hello " + EVIL}])
    return root


def _run(tree: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "snapstore", *args], cwd=tree, capture_output=True,
                          env=subprocess_env(), timeout=60)


@pytest.mark.parametrize("args", [
    ("list",), ("show", "latest"), ("show", "latest", "--conversation"), ("diff", "latest~1", "latest"),
    ("diff", "latest~1", "latest", "--stat"), ("log", NAME), ("show", ":/" + EVIL),
    ("show", "nope" + EVIL), ("cat", "latest", "missing" + EVIL),
])
def test_no_control_character_reaches_the_terminal(tree: Path, args: tuple[str, ...]):
    done = _run(tree, *args)
    for stream in (done.stdout, done.stderr):
        assert not CONTROL.search(stream), (args, stream[:600])
    shown = done.stdout + done.stderr
    assert re.search(rb"\\x(1b|9b)|\\u001b", shown), (args, shown[:600])  # shown escaped, not dropped


@pytest.mark.parametrize("args", [("list", "--json"), ("show", "latest", "--json"), ("diff", "latest~1", "latest", "--json")])
def test_json_is_exact_and_escapes_every_control(tree: Path, args: tuple[str, ...]):
    done = _run(tree, *args)
    assert done.returncode in (0, 1), done.stderr  # (diff: 1 when different)
    assert not CONTROL.search(done.stdout), done.stdout[:600]
    with Store.open(tree) as store:
        message = store.checkpoints()[0].message  # (as stored: the store keeps the C0 controls)
    assert "\x1b]52" in message
    text = json.dumps(json.loads(done.stdout), ensure_ascii=False)
    assert json.dumps(message, ensure_ascii=False) in text or json.dumps(NAME, ensure_ascii=False) in text, text[:600]


def test_cat_and_a_piped_patch_are_the_exact_bytes(tree: Path):
    assert _run(tree, "cat", "latest", NAME).stdout == b"content \x1b[2J\n"
    patch = _run(tree, "diff", "latest~1", "latest", "-p").stdout
    assert b"+content \x1b[2J\n" in patch


def test_a_patch_on_a_terminal_is_escaped(tree: Path):
    primary, secondary = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "snapstore", "diff", "latest~1", "latest", "-p"], cwd=tree,
                              stdout=secondary, stderr=subprocess.PIPE, env=subprocess_env(), timeout=60)
        os.close(secondary)
        out = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the other side closed
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(primary)
    assert done.returncode == 1, done.stderr  # (1: different)
    assert b"+content \\x1b[2J" in out and not CONTROL.sub(b"", out.replace(b"\r\n", b"\n")).count(b"\x1b")


def test_the_helpers():
    assert printable("a\tb\nc\x1b[2J\x9b\x7f\r") == "a\tb\nc\\x1b[2J\\x9b\\x7f\\x0d"
    assert printable("line\n", keep="") == "line\\x0a"
    assert printable("plain é ü 字") == "plain é ü 字"
    assert printable_bytes("a\x1b\x9bb\n".encode()) == b"a\\x1b\\x9bb\n"
    assert json.loads(dump_json({"m": EVIL})) == {"m": EVIL} and not CONTROL.search(dump_json({"m": EVIL}).encode())
