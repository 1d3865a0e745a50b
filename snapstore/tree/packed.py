"""The walk's records as a watching Store keeps them between snapshots: one packed value a file.

A :class:`~snapstore.tree.scan.Found` of a file is a 4-field tuple holding a 5-field
:class:`~snapstore.tree.scan.Stat` and its ints: ~250 bytes beside its path and its entry's
shared fields.  A watching Store keeps one for every path of the tree between snapshots (the
resident service, for as long as it runs): at a million files that is a quarter of a gigabyte.
:class:`FoundMap` keeps a file's record as one ``bytes`` value of 37 bytes (its kind and the
five stat fields: ~70 bytes with the object's header) and makes the :class:`Found` again when
it is asked for one; directories, symlinks and unreadable entries (few) are kept as they are.

:class:`FoundOverlay` is a map's records with changes of its own, the map untouched: what a
read-only look (``diff`` against the tree) patches instead of copying every record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Mapping, MutableMapping

from snapstore.records.manifest import EXEC
from snapstore.tree.scan import Found, KeptPaths, Stat

#: kind, st_mode, st_ino, st_size, st_mtime_ns, st_ctime_ns (times may be before 1970).
_RECORD = struct.Struct("<BIQQqq")
RECORD_SIZE = _RECORD.size
_pack = _RECORD.pack
_unpack = _RECORD.unpack
_new = tuple.__new__  # (a Found or a Stat without the NamedTuple constructor's Python frame)


def pack(f: Found) -> bytes | Found:
    """A file's record as one packed value; anything else as it is."""
    kind, st, target = f[1], f[2], f[3]
    if kind <= EXEC and st is not None and not target:
        return _pack(kind, st[0], st[1], st[2], st[3], st[4])
    return f


def unpack(path: bytes, value: bytes | Found) -> Found:
    """The :class:`Found` of a value :func:`pack` made for ``path``."""
    if type(value) is not bytes:
        return value  # type: ignore[return-value]
    kind, mode, ino, size, mtime, ctime = _unpack(value)
    return _new(Found, (path, kind, _new(Stat, (mode, ino, size, mtime, ctime)), b""))


def inode(value: bytes | Found) -> int | None:
    """The inode number a file's value holds (None for what is not a file)."""
    if type(value) is bytes:
        ino: int = _unpack(value)[2]
        return ino
    return None


class FoundMap(MutableMapping[bytes, Found]):
    """path -> :class:`Found`, each file's record kept packed (see the module's docstring)."""

    __slots__ = ("_d",)

    def __init__(self, found: Iterable[Found] = ()) -> None:
        d: dict[bytes, bytes | Found] = {}
        for f in found:
            d[f[0]] = pack(f)
        self._d = d

    def __getitem__(self, path: bytes) -> Found:
        return unpack(path, self._d[path])

    def get(self, path: bytes, default: Found | None = None) -> Found | None:  # type: ignore[override]
        value = self._d.get(path)
        return default if value is None else unpack(path, value)

    def __setitem__(self, path: bytes, f: Found) -> None:
        self._d[path] = pack(f)

    def __delitem__(self, path: bytes) -> None:
        del self._d[path]

    def pop(self, path: bytes, default: Found | None = None) -> Found | None:  # type: ignore[override]
        value = self._d.pop(path, None)
        return default if value is None else unpack(path, value)

    def __contains__(self, path: object) -> bool:
        return path in self._d

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def records(self) -> Iterator[Found]:
        """Every record (made again from its packed value: O(files), for whole-tree passes)."""
        for path, value in self._d.items():
            yield unpack(path, value)

    def differing(self, other: FoundMap) -> Iterator[bytes]:
        """The paths whose records differ between the two maps (or are in one only): packed
        values compared as they are (equal values, equal records)."""
        a, b = self._d, other._d
        for path in a.keys() | b.keys():
            if a.get(path) != b.get(path):
                yield path

    def inodes(self) -> Iterator[int]:
        """The inode number of every file (without making its record)."""
        for value in self._d.values():
            if type(value) is bytes:
                yield _unpack(value)[2]


def records_of(found: Mapping[bytes, Found]) -> Iterable[Found]:
    """Every record of ``found`` (a :class:`FoundMap`'s made again from its packed values)."""
    return found.records() if isinstance(found, FoundMap) else found.values()


class PackedWalk(KeptPaths):
    """Where a walk puts its records (:class:`~snapstore.tree.scan.WalkSink`): each packed into
    :attr:`found` as it is found, its path appended to :attr:`paths` (sorted at the walk's
    end).  A walk into a list holds every record as objects (~250 bytes a file) until it is
    done; this holds one packed value a file, and whatever the walk made for a record is
    freed (and its memory used again) before the next one."""

    __slots__ = ("found", "_d")

    def __init__(self) -> None:
        super().__init__()
        self.found = FoundMap()
        self._d = self.found._d

    def append(self, f: Found, /) -> None:
        path = f[0]
        self.paths.append(path)
        self._d[path] = pack(f)

    def records(self) -> Iterator[Found]:
        """Every record in path order (made again from its packed value, one at a time)."""
        d = self._d
        for path in self.paths:
            yield unpack(path, d[path])


class FoundOverlay(MutableMapping[bytes, Found]):
    """``base``'s records with changes of its own; ``base`` is never changed."""

    __slots__ = ("_base", "_set", "_gone")

    def __init__(self, base: MutableMapping[bytes, Found]) -> None:
        self._base = base
        self._set: dict[bytes, Found] = {}
        self._gone: set[bytes] = set()

    def __getitem__(self, path: bytes) -> Found:
        f = self._set.get(path)
        if f is not None:
            return f
        if path in self._gone:
            raise KeyError(path)
        return self._base[path]

    def __setitem__(self, path: bytes, f: Found) -> None:
        self._set[path] = f
        self._gone.discard(path)

    def __delitem__(self, path: bytes) -> None:
        if path not in self:
            raise KeyError(path)
        self._set.pop(path, None)
        self._gone.add(path)

    def __contains__(self, path: object) -> bool:
        return path in self._set or (path not in self._gone and path in self._base)

    def __iter__(self) -> Iterator[bytes]:
        yield from self._set
        for path in self._base:
            if path not in self._set and path not in self._gone:
                yield path

    def __len__(self) -> int:
        return sum(1 for _ in self)
