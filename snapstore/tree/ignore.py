"""Ignore rules with git's semantics: ``.gitignore`` at every level, plus ``.snapignore``.

A directory's rules apply to the paths below it, relative to it; deeper files override shallower
ones, and within a level ``.snapignore`` overrides ``.gitignore``.  An ignored directory is not
entered, so (as in git) a file below it cannot be re-included.  ``.git`` and the store itself are
excluded by the scanner before any rule is consulted.

Ignore files come from the tree, which may be hostile (a downloaded project):

* they are opened relative to their directory's fd with O_NOFOLLOW|O_NONBLOCK and read only when
  they are regular files: a symlinked ignore file is not followed (git stopped in 2.32), a FIFO
  cannot block the scan, ``-> /dev/zero`` cannot fill memory;
* a file over MAX_IGNORE_BYTES is skipped with a warning;
* pathspec compiles each pattern to a backtracking Python regex, whose matching time grows with
  the path's length to the power of the number of wildcards.  Runs of ``*`` are collapsed (git
  treats them alike) and a pattern with more wildcards than the budget (see :func:`sanitize`) is
  dropped with a warning, so matching stays polynomial of a small degree.

pathspec is imported only when a tree has an ignore file: most no-change snapshots of trees
without one should not pay for its import.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any, NamedTuple

from snapstore.tree.paths import display

IGNORE_FILES = (b".gitignore", b".snapignore")

#: Larger ignore files are skipped (with a warning): real ones are a few KiB.
MAX_IGNORE_BYTES = 1 << 20

#: Wildcard budget of one pattern.  ``*`` matches within a path segment, ``**`` (and the implicit
#: "at any depth" of a pattern without a slash) across segments; each unbounded wildcard
#: multiplies the worst-case backtracking by the path's length, so a hostile ignore file could
#: stall every walk.  The limits below keep the worst case of pathspec's regexes short for
#: adversarial names and far shorter for real ones (docs/benchmarks-design.md).
MAX_STARS = 3
MAX_CROSS = 2
MAX_WILDCARDS = 4

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _RuleLevel(NamedTuple):  # (not a frozen dataclass: it would slow every CLI process's start)
    base: str  # the directory's path relative to the root, '' or ending in '/'
    spec: Any  # pathspec.GitIgnoreSpec (untyped library)


Rules = tuple[_RuleLevel, ...]

NO_RULES: Rules = ()


def _compile(lines: list[str]) -> Any:
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _segments(pattern: str) -> list[list[str]]:
    """Split a pattern into segments of tokens: '*' for an unescaped star outside brackets,
    every other character (or escape pair, or bracket expression) as one literal token."""
    segs: list[list[str]] = [[]]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            segs[-1].append(pattern[i : i + 2])
            i += 2
        elif c == "[":
            end = pattern.find("]", i + 2)  # a ']' right after '[' (or '[!') is literal
            if end < 0:
                segs[-1].append(c)
                i += 1
            else:
                segs[-1].append(pattern[i : end + 1])
                i = end + 1
        elif c == "/":
            segs.append([])
            i += 1
        else:
            segs[-1].append(c)
            i += 1
    return segs


def sanitize(line: str) -> tuple[str | None, str]:
    """``(pattern to compile, reason)``: the line with runs of ``*`` collapsed, or None (and why)
    when its wildcards exceed the budget.  Comments and blank lines come back unchanged."""
    body = line.rstrip("\n")
    if not body.strip() or body.startswith("#") or "*" not in body:
        return body, ""
    neg = "!" if body.startswith("!") else ""
    segs = _segments(body[len(neg) :])
    out: list[str] = []
    cross = stars = 0
    for tokens in segs:
        if tokens and all(t == "*" for t in tokens) and len(tokens) >= 2:
            if out and out[-1] == "**":
                continue  # '**/**' is '**'
            out.append("**")
            cross += 1
            continue
        collapsed: list[str] = []
        for t in tokens:
            if t == "*" and collapsed and collapsed[-1] == "*":
                continue  # 'a**b' is 'a*b' in git
            collapsed.append(t)
        n = collapsed.count("*")
        if n > MAX_STARS:
            return None, f"more than {MAX_STARS} '*' in one path segment"
        stars += n
        out.append("".join(collapsed))
    parts = out[:-1] if len(out) > 1 and out[-1] == "" else out  # a trailing '/' only marks dirs
    if len(parts) == 1:
        cross += 1  # no slash before the end: the pattern has git's implicit '**/' in front
    if cross > MAX_CROSS:
        return None, f"more than {MAX_CROSS} wildcards that cross directories"
    if cross + stars > MAX_WILDCARDS:
        return None, f"more than {MAX_WILDCARDS} wildcards"
    return neg + "/".join(out), ""


def read_ignore_file(dir_fd: int, name: bytes, shown: str, warn: Callable[[str], None]) -> str | None:
    """The text of ignore file ``name`` in the directory ``dir_fd``, or None when it is not a
    regular file (symlink, FIFO, device), cannot be read, or is too large (warned)."""
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None  # a symlink (ELOOP), gone, unreadable: it ignores nothing
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > MAX_IGNORE_BYTES:
            warn(f"{shown} is larger than {MAX_IGNORE_BYTES} bytes; its rules are not used")
            return None
        data = os.read(fd, MAX_IGNORE_BYTES + 1)
        if len(data) > MAX_IGNORE_BYTES:  # grew since the fstat
            warn(f"{shown} is larger than {MAX_IGNORE_BYTES} bytes; its rules are not used")
            return None
        return data.decode("utf-8", "surrogateescape")
    except OSError:
        return None
    finally:
        os.close(fd)


def rules_for_dir(
    parent: Rules, dir_fd: int, rel_dir: bytes, names: set[bytes], warn: Callable[[str], None]
) -> Rules:
    """The rules in force inside the directory ``dir_fd`` whose entry names are ``names``."""
    present = [n for n in IGNORE_FILES if n in names]
    if not present:
        return parent
    levels = list(parent)
    base = os.fsdecode(rel_dir + b"/") if rel_dir else ""
    for name in present:
        shown = display(rel_dir + b"/" + name if rel_dir else name)
        text = read_ignore_file(dir_fd, name, shown, warn)
        if text is None:
            continue
        lines: list[str] = []
        for number, line in enumerate(text.splitlines(), 1):
            pattern, reason = sanitize(line)
            if pattern is None:
                warn(f"{shown}:{number}: pattern not used ({reason}): {line.strip()[:80]}")
                continue
            lines.append(pattern)
        if any(line.strip() and not line.lstrip().startswith("#") for line in lines):
            levels.append(_RuleLevel(base, _compile(lines)))
    return tuple(levels)


#: Answers of :func:`is_ignored` per rules object (rules are immutable: a changed ignore file
#: makes new ones): a watching Store re-lists the same directories again and again, and a
#: pattern match costs ~100 times a dict lookup.  Bounded: cleared when it grows past the caps.
_answers: dict[int, tuple[Rules, dict[tuple[bytes, bool], bool]]] = {}
_MAX_RULES = 256
_MAX_ANSWERS = 1 << 16


def is_ignored(rules: Rules, rel: bytes, is_dir: bool) -> bool:
    """True when ``rel`` (a path relative to the root) is excluded by ``rules``."""
    if not rules:
        return False
    slot = _answers.get(id(rules))
    if slot is None or slot[0] is not rules:  # (an id is reused only once its rules are gone)
        if len(_answers) >= _MAX_RULES:
            _answers.clear()
        slot = _answers[id(rules)] = (rules, {})
    known = slot[1].get((rel, is_dir))
    if known is None:
        known = _matches(rules, rel, is_dir)
        if len(slot[1]) < _MAX_ANSWERS:
            slot[1][(rel, is_dir)] = known
    return known


def _matches(rules: Rules, rel: bytes, is_dir: bool) -> bool:
    path = os.fsdecode(rel) + ("/" if is_dir else "")
    for level in reversed(rules):
        if level.base:
            if not path.startswith(level.base):
                continue
            sub = path[len(level.base) :]
        else:
            sub = path
        result = level.spec.check_file(sub)
        if result.include is not None:
            return bool(result.include)
    return False
