"""Walking the working tree: what is there, what is ignored, what is skipped.

The walk never follows a symlink, never enters ``.git`` or the store, and never fails on a file
that vanishes or cannot be listed: such paths are counted and reported as warnings, and the walk
goes on.  Paths are bytes end to end, so names that are not valid UTF-8 survive exactly.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import NamedTuple

from snapstore.errors import TreeIOError
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, UNREADABLE
from snapstore.tree import ignore
from snapstore.tree.paths import display

ALWAYS_EXCLUDED = frozenset({b".git"})

_new = tuple.__new__  # builds a Found without the NamedTuple constructor's Python frame
S_ISREG = stat.S_ISREG
S_ISDIR = stat.S_ISDIR


class Found(NamedTuple):
    """One path the walk found: its kind and its lstat result (None for unreadable dirs)."""

    path: bytes
    kind: int
    st: os.stat_result | None
    target: bytes = b""  # symlink target


@dataclass
class ScanReport:
    """What a walk skipped, and why (shown to the user as warnings and counts)."""

    special: int = 0  # FIFOs, sockets, devices
    vanished: int = 0
    unreadable: int = 0
    ignored: int = 0
    #: Files and directories whose setuid, setgid or sticky bit was dropped (never recorded).
    mode_bits_dropped: int = 0
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        self.warnings.append(message)



def walk(root: bytes, excluded: frozenset[bytes], report: ScanReport) -> list[Found]:
    """Return everything below ``root`` to snapshot, sorted by path.

    ``excluded`` holds root-relative paths never to enter (the store when it lives in the tree).
    A directory appears (as DIR) only when nothing below it is recorded, so restore can
    recreate empty directories.
    """
    found: list[Found] = []
    # Each frame: (rel path of dir, rules in force there); iterative so deep trees cannot
    # exhaust the Python stack.
    stack: list[tuple[bytes, ignore.Rules]] = [(b"", ignore.NO_RULES)]
    # rel dir -> 0 while nothing below it is recorded (then it is recorded as an empty DIR)
    dir_index: dict[bytes, int] = {}
    order: list[tuple[bytes, os.stat_result]] = []
    while stack:
        rel_dir, parent_rules = stack.pop()
        abs_dir = root + b"/" + rel_dir if rel_dir else root
        try:
            with os.scandir(abs_dir) as it:
                dirents = list(it)
        except OSError as exc:
            if not rel_dir:  # an unlistable root is not an empty tree
                raise TreeIOError(f"cannot list the tree {display(root)}: {exc.strerror}") from exc
            # Not recorded as an (empty) directory: it is gone, or its content is unknown.
            dir_index[rel_dir] = -1
            if isinstance(exc, FileNotFoundError):
                report.vanished += 1
                report.warn(f"directory vanished during the scan: {display(rel_dir)}")
            elif isinstance(exc, NotADirectoryError):
                report.vanished += 1
                report.warn(f"directory replaced during the scan: {display(rel_dir)}")
            else:
                report.unreadable += 1
                report.warn(f"cannot list {display(rel_dir)}: {exc.strerror}")
                found.append(Found(rel_dir, UNREADABLE, None))
                _mark_parents(dir_index, rel_dir)
            continue
        names = {d.name for d in dirents}
        rules = ignore.rules_for_dir(parent_rules, abs_dir, rel_dir, names)
        prefix = rel_dir + b"/" if rel_dir else b""
        recorded = False  # anything recorded directly in this directory (it is not empty)
        for d in dirents:
            name = d.name
            if name in ALWAYS_EXCLUDED:
                continue
            rel = prefix + name
            if rel in excluded:
                continue
            try:
                st = d.stat(follow_symlinks=False)
            except FileNotFoundError:
                report.vanished += 1
                report.warn(f"vanished during the scan: {display(rel)}")
                continue
            except OSError as exc:
                report.unreadable += 1
                report.warn(f"cannot stat {display(rel)}: {exc.strerror}")
                found.append(Found(rel, UNREADABLE, None))
                recorded = True
                continue
            mode = st.st_mode
            if mode & 0o7000:  # setuid/setgid/sticky: not recorded (manifest.MODE_KEEP)
                report.mode_bits_dropped += 1
            if S_ISREG(mode):  # the common case first
                if rules and ignore.is_ignored(rules, rel, False):
                    report.ignored += 1
                    continue
                found.append(_new(Found, (rel, EXEC if mode & 0o100 else FILE, st, b"")))
                recorded = True
                continue
            if S_ISDIR(mode):
                if rules and ignore.is_ignored(rules, rel, True):
                    report.ignored += 1
                    continue
                dir_index.setdefault(rel, 0)
                order.append((rel, st))
                stack.append((rel, rules))
                continue
            if rules and ignore.is_ignored(rules, rel, False):
                report.ignored += 1
                continue
            if stat.S_ISLNK(mode):
                try:
                    target = os.readlink(os.path.join(root, rel))
                except FileNotFoundError:
                    report.vanished += 1
                    report.warn(f"vanished during the scan: {display(rel)}")
                    continue
                except OSError as exc:
                    report.unreadable += 1
                    report.warn(f"cannot read link {display(rel)}: {exc.strerror}")
                    continue
                found.append(Found(rel, SYMLINK, st, target))
            else:
                report.special += 1
                report.warn(f"skipped special file (FIFO, socket or device): {display(rel)}")
                continue
            recorded = True
        if recorded and rel_dir:
            _mark_parents(dir_index, prefix)  # marks rel_dir and every directory above it
    # Deepest first (a directory is always listed after its parent): an empty directory makes
    # its parents non-empty, so only the leaves of a chain of empty directories are recorded.
    for rel, st in reversed(order):
        if dir_index.get(rel, 0) == 0:
            found.append(Found(rel, DIR, st))
            _mark_parents(dir_index, rel)
    found.sort()  # paths are unique, so tuples order by path alone
    return found


def _mark_parents(dir_index: dict[bytes, int], rel: bytes) -> None:
    # Walk up until a directory already marked non-empty: each directory is marked once.
    while True:
        cut = rel.rfind(b"/")
        if cut < 0:
            return
        rel = rel[:cut]
        if dir_index.get(rel):
            return
        dir_index[rel] = 1
