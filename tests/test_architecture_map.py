"""docs/architecture.md's package map names every module and subpackage of the package.

A newcomer finds a module through the map; a module the map leaves out is one they cannot find.
The map is the indented block under "## The package map": a subpackage is named as ``name/`` at
the indent of its members' parent, a module by its file name (``scan.py``) or a glob that covers it
(``lmdb_*.py``) anywhere under its package's line.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "snapstore"
DOC = ROOT / "docs" / "architecture.md"


def map_block(text: str) -> list[str]:
    """The lines of the first indented block after the "## The package map" heading."""
    lines = text.splitlines()
    start = lines.index("## The package map")
    block: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("    "):
            block.append(line)
        elif block and line.strip():
            break
    return block


def sections(block: list[str]) -> dict[str, str]:
    """Package path (``snapstore/ops/snapshot``) -> the text of the map lines under it."""
    found: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []
    for line in block:
        indent = len(line) - len(line.lstrip())
        first = line.split()[0] if line.split() else ""
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if first.endswith("/"):
            parent = stack[-1][1] if stack else ""
            path = f"{parent}/{first[:-1]}" if parent else first[:-1]
            stack.append((indent, path))
            found.setdefault(path, [])
        for _, path in stack:
            found.setdefault(path, []).append(line)
    return {path: "\n".join(lines) for path, lines in found.items()}


def named(text: str, filename: str) -> bool:
    words = re.findall(r"[\w*.]+\.py", text)
    return any(fnmatch.fnmatch(filename, word) for word in words)


def missing(doc_text: str) -> list[str]:
    by_package = sections(map_block(doc_text))
    gaps: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT)
        package = "/".join(rel.parts[:-1])
        if package not in by_package:
            gaps.append(f"{package}/ (holding {rel})")
            continue
        if path.name != "__init__.py" and not named(by_package[package], path.name):
            gaps.append(str(rel))
    return sorted(set(gaps))


def test_the_map_names_every_module_and_subpackage():
    gaps = missing(DOC.read_text())
    assert not gaps, "docs/architecture.md's package map does not name: " + ", ".join(gaps)


def test_the_check_sees_a_module_left_out():
    # The check itself must be able to fail: drop one module's name from the map.
    text = DOC.read_text()
    block = map_block(text)
    victim = next(line for line in block if "scan.py" in line)
    broken = text.replace(victim, victim.replace("scan.py", "sc4n.py"), 1)
    assert "snapstore/tree/scan.py" in missing(broken)
