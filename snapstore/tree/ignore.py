"""Ignore rules with git's semantics: ``.gitignore`` at every level, plus ``.snapignore``.

A directory's rules apply to the paths below it, relative to it; deeper files override shallower
ones, and within a level ``.snapignore`` overrides ``.gitignore``.  An ignored directory is not
entered, so (as in git) a file below it cannot be re-included.  ``.git`` and the store itself are
excluded by the scanner before any rule is consulted.

pathspec is imported only when a tree has an ignore file: most no-change snapshots of trees
without one should not pay for its import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

IGNORE_FILES = (b".gitignore", b".snapignore")


@dataclass(frozen=True)
class _Level:
    base: str  # the directory's path relative to the root, '' or ending in '/'
    spec: object  # pathspec.GitIgnoreSpec


Rules = tuple[_Level, ...]

NO_RULES: Rules = ()


def _compile(lines: list[str]):
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def rules_for_dir(parent: Rules, abs_dir: bytes, rel_dir: bytes, names: set[bytes]) -> Rules:
    """The rules in force inside a directory whose entry names are ``names``."""
    present = [n for n in IGNORE_FILES if n in names]
    if not present:
        return parent
    levels = list(parent)
    base = os.fsdecode(rel_dir + b"/") if rel_dir else ""
    for name in present:
        try:
            with open(os.path.join(abs_dir, name), "rb") as f:
                text = f.read().decode("utf-8", "surrogateescape")
        except OSError:
            continue  # an unreadable ignore file ignores nothing (the scanner reports files)
        lines = text.splitlines()
        if any(line.strip() and not line.lstrip().startswith("#") for line in lines):
            levels.append(_Level(base, _compile(lines)))
    return tuple(levels)


def is_ignored(rules: Rules, rel: bytes, is_dir: bool) -> bool:
    """True when ``rel`` (a path relative to the root) is excluded by ``rules``."""
    if not rules:
        return False
    path = os.fsdecode(rel) + ("/" if is_dir else "")
    for level in reversed(rules):
        if level.base:
            if not path.startswith(level.base):
                continue
            sub = path[len(level.base) :]
        else:
            sub = path
        result = level.spec.check_file(sub)  # type: ignore[attr-defined]
        if result.include is not None:
            return bool(result.include)
    return False
