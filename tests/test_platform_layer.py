"""Only the platform layer (snapstore/platform/) names a Linux-only facility (issue 43).

Every other module asks snapstore.platform, which answers with the Linux call on Linux and with
a portable one (or a documented weaker mode) elsewhere and under ``SNAPSTORE_PLATFORM=portable``.
The check reads each module's syntax tree: imported modules, names, attributes and string
constants (docstrings and comments may speak of the facilities; code may not use them).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "snapstore"
LAYER = PACKAGE / "platform"

#: What names a Linux-only facility: in a string (a path, a ctypes name) or as an identifier.
IN_STRINGS = re.compile(r"/proc\b|inotify|syncfs|sock_diag|mountinfo|\bO_PATH\b|SO_PEERCRED|getrandom|memfd")
IN_NAMES = re.compile(
    r"inotify|^syncfs$|SO_PEERCRED|^O_PATH$|AF_NETLINK|NETLINK_|getrandom|memfd_create|sched_getaffinity|^pipe2$|^statfs$"
)
#: Names a module may define for itself though they match (a test seam's name, not the call).
OWN_SEAMS = {"syncfs"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def offences(source: str) -> list[str]:
    """Where ``source`` names a Linux-only facility (line: what)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if IN_STRINGS.search(node.value):
                found.append(f"line {node.lineno}: {node.value[:60]!r}")
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Name) and node.id not in OWN_SEAMS:
            names = [node.id]
        found += [f"line {node.lineno}: {n}" for n in names if any(IN_NAMES.search(part) for part in n.split("."))]
    return found


def test_no_module_outside_the_platform_layer_names_a_linux_only_facility():
    bad = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if LAYER in path.parents:
            continue
        hits = offences(path.read_text())
        if hits:
            bad[str(path.relative_to(PACKAGE.parent))] = hits
    assert not bad, f"Linux-only facilities outside snapstore/platform/: {bad}"


def test_the_check_sees_each_kind_of_use():
    # The check itself must be able to fail: each way the package used these facilities before
    # the platform layer existed is caught.
    cases = [
        "from inotify_simple import INotify\n",
        "import socket\nx = socket.SO_PEERCRED\n",
        "open('/proc/net/tcp')\n",
        "import ctypes\nfn = ctypes.CDLL(None).syncfs\n",
        "import os\nf = getattr(os, 'O_PATH', 0)\n",
        "import os\nr, w = os.pipe2(0)\n",
        "import os\nn = len(os.sched_getaffinity(0))\n",
        "import socket\ns = socket.socket(socket.AF_NETLINK)\n",
        "p = f'/proc/{1}/stat'\n",
    ]
    for source in cases:
        assert offences(source), source
    assert not offences('"""Reads /proc and inotify events."""\n# syncfs\nsyncfs = None\n')


def test_the_c_client_makes_no_linux_only_call():
    # The native client builds on macOS and the BSDs as is: no /proc, getrandom or memfd, and
    # SO_PEERCRED only inside the Linux branch of one #if whose other branches are portable.
    source = (PACKAGE / "service" / "cclient" / "snapstore.c").read_text()
    code = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    for facility in ("/proc", "getrandom", "memfd_create", "_GNU_SOURCE", "sys/random.h"):
        assert facility not in code, facility
    linux_only = re.findall(r"#if defined\(__linux__\).*?#endif", code, flags=re.S)
    assert "SO_PEERCRED" not in re.sub(r"#if defined\(__linux__\).*?#endif", "", code, flags=re.S)
    assert all("#else" in block or "#elif" in block for block in linux_only)
