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

:class:`EntryMap` does the same for the entries a watching Store keeps (the manifest memo's,
the tree state's): one packed value a path (~80 bytes) instead of an
:class:`~snapstore.records.manifest.Entry` tuple with its stream id and mtime objects (~210).
"""

from __future__ import annotations

import struct
from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    ValuesView,
)
from typing import Any

from snapstore.records.manifest import EXEC, Entry
from snapstore.tree.scan import Found, KeptPaths, Stat

#: kind, st_mode, st_ino, st_size, st_mtime_ns, st_ctime_ns (times may be before 1970): 31
#: bytes, so the value fits the allocator's 64-byte blocks (it allocates in steps of 16),
#: when the mode fits 16 bits and the size 32 (nearly every file); else the wide layout (37
#: bytes, told apart by its length).
_RECORD = struct.Struct("<BHQIqq")
_WIDE = struct.Struct("<BIQQqq")
RECORD_SIZE = _RECORD.size
_pack = _RECORD.pack
_pack_wide = _WIDE.pack
_unpack_narrow = _RECORD.unpack
_unpack_wide = _WIDE.unpack


def _unpack(value: bytes) -> tuple[int, int, int, int, int, int]:
    fields: tuple[int, int, int, int, int, int] = (
        _unpack_narrow(value) if len(value) == RECORD_SIZE else _unpack_wide(value)
    )
    return fields
_new = tuple.__new__  # (a Found or a Stat without the NamedTuple constructor's Python frame)


def pack(f: Found) -> bytes | Found:
    """A file's record as one packed value; anything else as it is."""
    kind, st, target = f[1], f[2], f[3]
    if kind <= EXEC and st is not None and not target:
        mode, size = st[0], st[2]
        if mode < 0x10000 and 0 <= size < 0x100000000:
            return _pack(kind, mode, st[1], size, st[3], st[4])
        return _pack_wide(kind, mode, st[1], size, st[3], st[4])
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


#: An entry's fields after its path: kind, mode, size, mtime; its ref (stream id, link
#: target's id, or empty) follows as it is.  15 bytes (with a 32-byte id, the value fits the
#: allocator's 80-byte blocks) when the mode fits 16 bits and the size 32; else the wide
#: layout, its kind byte marked with :data:`_WIDE_ENTRY`.
_ENTRY = struct.Struct("<BHIq")
_ENTRY_WIDE = struct.Struct("<BIQq")
_WIDE_ENTRY = 0x80
_entry_pack = _ENTRY.pack
_entry_pack_wide = _ENTRY_WIDE.pack
_entry_narrow = _ENTRY.unpack_from
_entry_wide = _ENTRY_WIDE.unpack_from
_NARROW_HEAD, _WIDE_HEAD = _ENTRY.size, _ENTRY_WIDE.size


def _entry_head(value: bytes) -> tuple[int, int, int, int, int]:
    """kind, mode, size, mtime and where the ref starts, of a packed entry."""
    if value[0] & _WIDE_ENTRY:
        kind, mode, size, mtime = _entry_wide(value)
        return kind & ~_WIDE_ENTRY, mode, size, mtime, _WIDE_HEAD
    kind, mode, size, mtime = _entry_narrow(value)
    return kind, mode, size, mtime, _NARROW_HEAD
_dict_get = dict.get
_dict_set: Callable[[dict[bytes, Any], bytes, Any], None] = dict.__setitem__
_dict_pop = dict.pop
_MISSING = object()


def pack_entry(path: bytes, e: Entry) -> bytes | Entry:
    """An entry as one packed value (~90 bytes instead of a 6-tuple, its stream id and its
    mtime's int: ~210); an entry that does not fit the layout as it is."""
    ref = e[5]
    if e[0] is path or e[0] == path:
        try:
            if type(ref) is bytes and 0 <= e[1] < _WIDE_ENTRY:
                if e[2] < 0x10000 and 0 <= e[3] < 0x100000000:
                    return _entry_pack(e[1], e[2], e[3], e[4]) + ref
                return _entry_pack_wide(e[1] | _WIDE_ENTRY, e[2], e[3], e[4]) + ref
        except (struct.error, TypeError):
            pass
    return e


def unpack_entry(path: bytes, value: bytes | Entry) -> Entry:
    """The :class:`Entry` of a value :func:`pack_entry` made for ``path``."""
    if type(value) is not bytes:
        return value  # type: ignore[return-value]
    kind, mode, size, mtime, head = _entry_head(value)
    return _new(Entry, (path, kind, mode, size, mtime, value[head:]))


def entry_kind_size(value: bytes | Entry) -> tuple[int, int]:
    """``(kind, size)`` of a kept value, without making its entry."""
    if type(value) is bytes:
        kind, _, size, _, _ = _entry_head(value)
        return kind, size
    return value[1], value[3]


class EntryMap(dict[bytes, Entry]):
    """path -> :class:`Entry`, each kept as one packed value and made again when asked for.

    A watching Store keeps the tree's entries between checkpoints (the resident service, for as
    long as it runs): as tuples that is ~210 bytes a file beside the path, ~90 packed.  It is a
    ``dict`` to its users (every method that gives or takes an entry packs or unpacks it);
    :meth:`raw` gives the packed values themselves (ops.snapshot.ordered keeps those in path
    order: no entry object a file there either).  ``__iter__`` is defined so that ``dict(m)``
    and ``d.update(m)`` go through the mapping's methods, never its packed values."""

    __slots__ = ()

    def __init__(self, entries: Mapping[bytes, Entry] | None = None) -> None:
        super().__init__()
        if entries:
            self.update(entries)

    def raw(self, path: bytes) -> bytes | Entry | None:
        """The kept value of ``path`` (packed, or the entry when it does not pack), or None."""
        value: bytes | Entry | None = _dict_get(self, path)
        return value

    def __getitem__(self, path: bytes) -> Entry:
        return unpack_entry(path, dict.__getitem__(self, path))

    def __setitem__(self, path: bytes, e: Entry) -> None:
        _dict_set(self, path, pack_entry(path, e))

    def __iter__(self) -> Iterator[bytes]:
        return dict.__iter__(self)

    def get(self, path: bytes, default: Any = None) -> Any:
        value = _dict_get(self, path)
        return default if value is None else unpack_entry(path, value)

    def pop(self, path: bytes, default: Any = _MISSING) -> Any:
        value = _dict_pop(self, path, None)
        if value is None:
            if default is _MISSING:
                raise KeyError(path)
            return default
        return unpack_entry(path, value)

    def setdefault(self, path: bytes, default: Any = None) -> Any:
        value = _dict_get(self, path)
        if value is None:
            self[path] = default
            return default
        return unpack_entry(path, value)

    def popitem(self) -> tuple[bytes, Entry]:
        path, value = dict.popitem(self)
        return path, unpack_entry(path, value)

    def update(self, *others: Any, **kw: Any) -> None:
        for other in others:
            pairs = other.items() if isinstance(other, Mapping) else other
            for path, e in pairs:
                _dict_set(self, path, pack_entry(path, e))
        if kw:
            raise TypeError("entries are keyed by bytes")

    def values(self) -> ValuesView[Entry]:  # type: ignore[override]
        return ValuesView(self)  # (through __iter__ and __getitem__: entries, not packed values)

    def items(self) -> ItemsView[bytes, Entry]:  # type: ignore[override]
        return ItemsView(self)

    def copy(self) -> EntryMap:
        out = EntryMap()
        dict.update(out, dict.items(self))  # (the packed values as they are)
        return out

    def __eq__(self, other: object) -> bool:
        if type(other) is EntryMap:
            return dict.__eq__(self, other)  # (packed values: equal bytes, equal entries)
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and all(other.get(p, _MISSING) == unpack_entry(p, v) for p, v in dict.items(self))

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def __or__(self, other: Any) -> EntryMap:  # type: ignore[override]
        out = self.copy()
        out.update(other)
        return out

    def __ior__(self, other: Any) -> EntryMap:  # type: ignore[override]
        self.update(other)
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (EntryMap, (dict(self.items()),))
