"""What restore checks before it writes: every field of every target entry, and the tree.

Restore validates the whole target manifest before the first write (paths, kinds, modes, sizes,
references, symlink targets), so a hostile or damaged checkpoint fails with one clear error
(UnsafePathError or CorruptError) and the tree is never left half-restored.  It also holds the
concurrent-edit rule: a path is touched only while it is still as the plan saw it.
"""

from __future__ import annotations

import os
import re
import stat
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping

from snapstore.errors import CorruptError, UnsafePathError
from snapstore.records.manifest import DIR, EXEC, FILE, KIND_NAMES, SYMLINK, UNREADABLE, Entry
from snapstore.tree.paths import display, from_user, parents
from snapstore.tree.scan import Found

#: Longest symlink target restore writes (Linux PATH_MAX includes the final NUL).
MAX_LINK_TARGET = 4095
#: Bounds of the integer fields of an entry (an int64, as every file system reports them).
_INT_MAX = (1 << 63) - 1
#: The file type bits an exact mode may carry for each kind.
_TYPE_OF_KIND = {FILE: stat.S_IFREG, EXEC: stat.S_IFREG, SYMLINK: stat.S_IFLNK, DIR: stat.S_IFDIR}

# Any empty, ".", ".." or ".git" component, a leading "/" or a NUL: the common case (a clean
# path) is one regex search, which matters when a restore validates a whole manifest.
_SUSPECT = re.compile(rb"(?:^|/)(?:|\.|\.\.|\.git)(?:/|$)|\x00")


def check_path(path: bytes) -> None:
    """Raise UnsafePathError unless ``path`` is a plain relative path inside the tree."""
    if path and _SUSPECT.search(path) is None:
        return
    shown = display(path)
    if not path:
        raise UnsafePathError("empty path in manifest")
    if b"\x00" in path:
        raise UnsafePathError(f"path with a NUL byte in manifest: {shown!r}")
    if path.startswith(b"/"):
        raise UnsafePathError(f"absolute path in manifest: {shown}")
    for part in path.split(b"/"):
        if part in (b"", b".", b".."):
            raise UnsafePathError(f"path with an empty, '.' or '..' part in manifest: {shown}")
        if part == b".git":
            raise UnsafePathError(f"path inside a .git directory in manifest: {shown}")


def check_entry(e: Entry) -> None:
    """Raise UnsafePathError or CorruptError unless every field of ``e`` is restorable."""
    check_path(e.path)
    shown = display(e.path)
    if type(e.kind) is not int or e.kind not in KIND_NAMES:
        raise CorruptError(f"entry {shown} has an unknown kind {e.kind!r}")
    for name, value in (("mode", e.mode), ("size", e.size)):
        if type(value) is not int or not 0 <= value <= _INT_MAX:
            raise CorruptError(f"entry {shown} has an impossible {name} {value!r}")
    if type(e.mtime_ns) is not int or not -_INT_MAX <= e.mtime_ns <= _INT_MAX:
        raise CorruptError(f"entry {shown} has an impossible time {e.mtime_ns!r}")
    ftype = stat.S_IFMT(e.mode)
    if ftype:
        # An exact mode: its type must be the entry's, and only the permission bits may be set.
        if _TYPE_OF_KIND.get(e.kind) != ftype or e.mode & 0o7000:
            raise CorruptError(f"entry {shown} has a mode {e.mode:o} that does not fit its kind")
    elif e.mode > 0o7777:
        raise CorruptError(f"entry {shown} has an impossible mode {e.mode:o}")
    if type(e.ref) is not bytes:
        raise CorruptError(f"entry {shown} has a bad reference")
    if e.kind in (FILE, EXEC):
        if len(e.ref) != 32:
            raise CorruptError(f"entry {shown} has a bad content id")
    elif e.kind == SYMLINK:
        if not e.ref:
            raise UnsafePathError(f"symlink {shown} has an empty target")
        if b"\x00" in e.ref:
            raise UnsafePathError(f"symlink {shown} has a target with a NUL byte")
        if len(e.ref) > MAX_LINK_TARGET:
            raise UnsafePathError(f"symlink {shown} has a target longer than {MAX_LINK_TARGET} bytes")
    elif e.ref:
        raise CorruptError(f"entry {shown} ({KIND_NAMES[e.kind]}) has a reference it cannot have")


def check_manifest(
    entries: dict[bytes, Entry], excluded: frozenset[bytes], within: Mapping[bytes, Entry] | None = None
) -> None:
    """Validate every entry of a manifest (and its place in the tree) before any of it is used.

    Runs on every restore, so the common entry (a plain file) is checked by one combined test
    and the "below a non-directory" rule by the few distinct parents.  With ``within`` (the
    whole manifest ``entries`` is part of), a parent is looked up there.
    """
    within = entries if within is None else within
    suspect = _SUSPECT.search
    ex_prefixes = tuple(ex + b"/" for ex in excluded)
    reg = stat.S_IFREG
    parent_dirs: set[bytes] = set()
    for path, e in entries.items():
        kind, mode, size, mtime, ref = e.kind, e.mode, e.size, e.mtime_ns, e.ref
        if not (
            e.path == path
            and type(kind) is int
            and (kind == FILE or kind == EXEC)
            and type(mode) is int
            and (mode & ~0o777 == reg or 0 <= mode <= 0o7777)
            and type(size) is int
            and 0 <= size <= _INT_MAX
            and type(mtime) is int
            and -_INT_MAX <= mtime <= _INT_MAX
            and type(ref) is bytes
            and len(ref) == 32
            and suspect(path) is None
        ):
            if e.path != path:
                raise CorruptError(f"entry {display(e.path)} is filed under {display(path)}")
            check_entry(e)
        if path in excluded or path.startswith(ex_prefixes):
            raise UnsafePathError(f"path inside the store in manifest: {display(path)}")
        cut = path.rfind(b"/")
        if cut > 0:
            parent_dirs.add(path[:cut])
    ancestors = set(parent_dirs)
    for d in parent_dirs:
        ancestors.update(parents(d))
    clash = {d for d in ancestors if d in within and within[d].kind != DIR}
    if clash:
        for path in entries:
            below = next((d for d in parents(path) if d in clash), None)
            if below is not None:
                raise UnsafePathError(
                    f"{display(path)} lies below {display(below)}, which is not a directory "
                    "in the same checkpoint"
                )


def check_difference(
    target: Mapping[bytes, Entry], new: dict[bytes, Entry], current: Mapping[bytes, Entry], excluded: frozenset[bytes]
) -> None:
    """Validate a target known as the tree's own entries (``current``, recorded from the tree
    by this process) with the entries ``new`` in their place: only those are checked, each in
    full, and for its place in ``target`` (no new entry below a non-directory, no entry of the
    tree left below a new non-directory)."""
    check_manifest(new, excluded, within=target)
    # Only a path that is a directory in the tree (or not there) can have tree entries below it.
    files = [p for p, e in new.items() if e.kind != DIR and (p not in current or current[p].kind == DIR)]
    if not files:
        return
    keys = sorted(current)
    for p in files:
        prefix = p + b"/"
        i = bisect_left(keys, prefix)
        while i < len(keys) and keys[i].startswith(prefix):
            if keys[i] in target and keys[i] not in new:  # still there, from the tree's chunks
                raise UnsafePathError(
                    f"{display(keys[i])} lies below {display(p)}, which is not a directory "
                    "in the same checkpoint"
                )
            i += 1


def selector(paths: Iterable[str | bytes] | None) -> Callable[[bytes], bool]:
    """A predicate for the paths a partial restore or diff covers (exact path or directory)."""
    if not paths:
        return lambda p: True
    wanted = [from_user(p) for p in paths]
    if any(w == b"" for w in wanted):
        return lambda p: True

    def selected(p: bytes) -> bool:
        return any(p == w or p.startswith(w + b"/") for w in wanted)

    return selected


def under(paths: set[bytes]) -> Callable[[bytes], bool]:
    """A predicate for ``paths`` and everything below them."""

    def selected(p: bytes) -> bool:
        return p in paths or any(d in paths for d in parents(p))

    return selected


def same_as_seen(st: os.stat_result | None, seen: Found | None) -> bool:
    """Is the path still as the plan saw it (``seen`` is what the scan found, None for absent)?"""
    if seen is None:
        return st is None
    if st is None or seen.st is None:
        return False
    a, b = st, seen.st
    return (
        stat.S_IFMT(a.st_mode) == stat.S_IFMT(b.st_mode)
        and a.st_ino == b.st_ino
        and a.st_size == b.st_size
        and a.st_mtime_ns == b.st_mtime_ns
    )


def unrecorded(current: dict[bytes, Entry]) -> set[bytes]:
    """The paths present in the tree whose content the safety checkpoint could not record."""
    return {p for p, e in current.items() if e.kind == UNREADABLE}
