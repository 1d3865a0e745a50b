"""Tree builders for tests: write a tree from a spec, read it back, compare.

A *spec* is a dict from a root-relative path (``str`` or ``bytes``, ``/``-separated) to one of:

* ``bytes``: a regular file (mode 0o644) with that content;
* :class:`Exec`: an executable regular file (mode 0o755);
* :class:`Symlink`: a symbolic link (the target is stored as given, it may dangle);
* :data:`EmptyDir` (or ``EmptyDir()``): an empty directory.

Directories that hold something are implied by the paths below them, as in a manifest.  Specs
read back (:func:`read_tree`, :func:`tree_from_store`) always have ``bytes`` keys, so compare
them with :func:`diff_trees` / :func:`assert_trees_equal`, which normalise both sides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snapstore.store import Store

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import blake3

__all__ = [
    "EmptyDir",
    "Exec",
    "Symlink",
    "assert_trees_equal",
    "build_tree",
    "diff_trees",
    "normalize",
    "random_bytes",
    "read_tree",
    "tree_from_store",
]


@dataclass(frozen=True)
class Exec:
    """An executable regular file holding ``data``."""

    data: bytes


@dataclass(frozen=True)
class Symlink:
    """A symbolic link to ``target`` (``str`` or ``bytes``; not followed, may dangle)."""

    target: bytes | str

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Symlink):
            return NotImplemented
        return os.fsencode(self.target) == os.fsencode(other.target)

    def __hash__(self) -> int:
        return hash(os.fsencode(self.target))


@dataclass(frozen=True)
class _EmptyDirType:
    """An empty directory (use the :data:`EmptyDir` value, or call it: ``EmptyDir()``)."""

    def __call__(self) -> _EmptyDirType:
        return self

    def __repr__(self) -> str:
        return "EmptyDir"


EmptyDir = _EmptyDirType()

Node = bytes | Exec | Symlink | _EmptyDirType

#: Names never read back by :func:`read_tree` (what snapstore never snapshots by default).
DEFAULT_EXCLUDE = frozenset({b".git", b".snapstore"})


def random_bytes(size: int, seed: bytes | str | int = b"") -> bytes:
    """``size`` deterministic pseudo-random bytes (the BLAKE3 XOF of ``seed``)."""
    if isinstance(seed, int):
        seed = str(seed)
    if isinstance(seed, str):
        seed = seed.encode()
    return blake3.blake3(seed).digest(length=size) if size else b""


def _key(path: str | bytes) -> bytes:
    raw = os.fsencode(path)
    parts = [p for p in raw.split(b"/") if p]
    if not parts or any(p in (b".", b"..") for p in parts) or b"\0" in raw:
        raise ValueError(f"bad spec path {path!r}")
    return b"/".join(parts)


def _node(value: object) -> Node:
    if value is _EmptyDirType or isinstance(value, _EmptyDirType):
        return EmptyDir
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, bytes | Exec):
        return value
    if isinstance(value, Symlink):
        return Symlink(os.fsencode(value.target))
    raise TypeError(f"unknown spec value {value!r}")


def normalize(spec: Mapping[str | bytes, object]) -> dict[bytes, Node]:
    """The spec with ``bytes`` keys and canonical values (checks that paths do not clash)."""
    out: dict[bytes, Node] = {}
    for path, value in spec.items():
        key = _key(path)
        if key in out:
            raise ValueError(f"path {key!r} appears twice in the spec")
        out[key] = _node(value)
    for key in out:
        parent = key
        while b"/" in parent:
            parent = parent.rsplit(b"/", 1)[0]
            if parent in out:
                raise ValueError(f"{parent!r} is a {out[parent]!r} but {key!r} is below it")
    return out


def build_tree(root: str | os.PathLike[str], spec: Mapping[str | bytes, object]) -> dict[bytes, Node]:
    """Create the files of ``spec`` under ``root`` (created if missing); returns the normalised spec.

    Regular files get mode 0o644, :class:`Exec` files 0o755 (set explicitly, whatever the umask).
    Existing files at the same paths are replaced; nothing else under ``root`` is touched.
    """
    tree = normalize(spec)
    base = os.fsencode(os.fspath(root))
    os.makedirs(base, exist_ok=True)
    for rel, value in sorted(tree.items()):
        path = os.path.join(base, rel)
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        if isinstance(value, _EmptyDirType):
            os.makedirs(path, exist_ok=True)
            continue
        if os.path.lexists(path) and not os.path.isdir(path):
            os.unlink(path)
        if isinstance(value, Symlink):
            os.symlink(os.fsencode(value.target), path)
            continue
        data, mode = (value.data, 0o755) if isinstance(value, Exec) else (value, 0o644)
        with open(path, "wb") as f:
            f.write(data)
        os.chmod(path, mode)
    return tree


def read_tree(
    root: str | os.PathLike[str], *, exclude: Iterable[bytes | str] = DEFAULT_EXCLUDE
) -> dict[bytes, Node]:
    """Read the tree under ``root`` back into a spec (``bytes`` keys).

    Directories appear (as :data:`EmptyDir`) only when empty, like in a manifest.  Entries whose
    *name* is in ``exclude`` (``.git`` and ``.snapstore`` by default) are skipped at any depth.
    Special files (FIFOs, sockets, devices) raise ValueError: a spec cannot hold them.
    """
    excluded = {os.fsencode(e) for e in exclude}
    base = os.fsencode(os.fspath(root))
    out: dict[bytes, Node] = {}

    def walk(rel: bytes) -> bool:
        """Read directory ``rel``; True when something below it was recorded."""
        here = os.path.join(base, rel) if rel else base
        recorded = False
        for name in sorted(os.listdir(here)):
            if name in excluded:
                continue
            sub = rel + b"/" + name if rel else name
            path = os.path.join(base, sub)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                if not walk(sub):
                    out[sub] = EmptyDir
            elif stat.S_ISLNK(st.st_mode):
                out[sub] = Symlink(os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    data = f.read()
                out[sub] = Exec(data) if st.st_mode & 0o100 else data
            else:
                raise ValueError(f"{sub!r} is a special file; a spec cannot hold it")
            recorded = True
        return recorded

    walk(b"")
    return out


def tree_from_store(store: Store, ref: str) -> dict[bytes, Node]:
    """The spec of checkpoint ``ref`` of ``store``: its entries, file contents read back.

    Raises ValueError on an entry that a spec cannot hold (an unreadable file).
    """
    from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK

    cp = store.resolve(ref)
    out: dict[bytes, Node] = {}
    for e in store.entries(cp.id):
        if e.kind == FILE:
            out[e.path] = store.read_bytes(cp.id, e.path)
        elif e.kind == EXEC:
            out[e.path] = Exec(store.read_bytes(cp.id, e.path))
        elif e.kind == SYMLINK:
            out[e.path] = Symlink(e.ref)
        elif e.kind == DIR:
            out[e.path] = EmptyDir
        else:
            raise ValueError(f"{e.path!r} is recorded as unreadable")
    return out


def _describe(value: Node | None) -> str:
    if value is None:
        return "absent"
    if isinstance(value, bytes):
        return f"file of {len(value)} bytes"
    if isinstance(value, Exec):
        return f"exec file of {len(value.data)} bytes"
    if isinstance(value, Symlink):
        return f"symlink to {value.target!r}"
    return "empty dir"


def diff_trees(
    expected: Mapping[str | bytes, object], actual: Mapping[str | bytes, object]
) -> list[str]:
    """Human-readable differences between two specs (empty when they are equal)."""
    a, b = normalize(expected), normalize(actual)
    problems = []
    for path in sorted(a.keys() | b.keys()):
        x, y = a.get(path), b.get(path)
        if x == y:
            continue
        what = f"{_describe(x)} expected, {_describe(y)} found"
        if type(x) is type(y) and x is not None and not isinstance(x, Symlink):
            what = f"{_describe(x)}: content differs ({_describe(y)} found)"
        problems.append(f"{path!r}: {what}")
    return problems


def assert_trees_equal(
    expected: Mapping[str | bytes, object], actual: Mapping[str | bytes, object]
) -> None:
    """Raise AssertionError listing every difference between two specs."""
    problems = diff_trees(expected, actual)
    if problems:
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise AssertionError(f"trees differ ({len(problems)} paths):\n  {shown}{more}")
