"""Manifests: the sorted list of what a checkpoint holds, stored as a record stream.

Each entry is one msgpack array ``[path, kind, mode, size, mtime_ns, ref]``:

* ``path``: bytes, relative to the tree root, ``/``-separated, exactly as the file system names
  it (names that are not UTF-8 are kept byte for byte);
* ``kind``: one of :data:`FILE`, :data:`EXEC`, :data:`SYMLINK`, :data:`DIR`, :data:`UNREADABLE`;
* ``mode``: the file type and permission bits, ``st_mode & 0o170777`` (e.g. ``0o100644``,
  ``0o040700``): diff compares the permission bits of files and directories and restore applies
  them exactly (owner, setuid, setgid and sticky are never recorded).  Entries written before
  this rule hold only ``S_IMODE`` (no file type bits): their mode is informational, as it was
  then, and restore applies only the exec bit (:func:`exact_mode` tells the two apart);
* ``size``, ``mtime_ns``: as seen at snapshot time, but a file whose kind, mode, size and ``ref``
  equal its parent checkpoint's entry (rewritten with the same bytes: a touch) is recorded as that
  entry, mtime included (ops.snapshot.keep): a manifest records content changes, not touches.
  Directories and symlinks keep the mtime as seen.  mtime is informational and not compared;
* ``ref``: the content's stream id for files, the link target for symlinks, empty otherwise.

Entries are sorted by path bytes and cut into chunks between records (chunker.cut_records, keyed
by path), so a changed file rewrites one manifest chunk plus one index node per tree level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import blake3
import msgpack

from snapstore.errors import CorruptError
from snapstore.records.schema import Get, Put
from snapstore.storage import chunker, objects

FILE = 0
EXEC = 1
SYMLINK = 2
DIR = 3
UNREADABLE = 4  # present on disk but could not be read: restore and diff leave it alone

KIND_NAMES = {FILE: "file", EXEC: "exec", SYMLINK: "symlink", DIR: "dir", UNREADABLE: "unreadable"}

#: What a new entry keeps of ``st_mode``: the file type and the nine permission bits.
MODE_KEEP = 0o170777


def exact_mode(mode: int) -> int | None:
    """The permission bits restore applies exactly, or None for an old (informational) mode.

    A mode recorded with its file type bits (``0o100644``) is exact; one without them (``0o644``,
    written by older versions) is not, and restore and diff treat it as they did then.
    """
    return mode & 0o777 if mode & 0o170000 else None


class Entry(NamedTuple):
    """One path of a checkpoint."""

    path: bytes
    kind: int
    mode: int
    size: int
    mtime_ns: int
    ref: bytes

    @property
    def is_file(self) -> bool:
        return self.kind in (FILE, EXEC)


def write_manifest(
    entries: Iterable[Entry], put: Put, level: int = objects.DEFAULT_LEVEL, *, encode: bool = True
) -> tuple[bytes, int, bytes | None]:
    """Store sorted ``entries`` as a stream; returns ``(stream id, size, record or None)``.
    A manifest of more than one chunk is named by its tree (:func:`objects.tree_id`).

    ``put(id, value)`` receives each chunk, encoded (or plain when ``encode`` is False).  A
    caller that writes a manifest again and again keeps a
    :class:`~snapstore.records.manifest_codec.Codec` and calls
    :func:`~snapstore.records.manifest_codec.write_manifest` instead: only the chunks around
    the changed entries are encoded again.
    """
    listed = entries if isinstance(entries, Sequence) else list(entries)
    pairs = ((data, objects.chunk_id(data)) for _, data in cut_in_blocks(listed, packer()))
    return objects.write_stream_known(pairs, put, level, encode=encode, tree=True)


def packer() -> Callable[[Entry], bytes]:
    """How an entry is encoded: one Packer for a whole manifest (msgpack.packb builds a new one
    per call).  An Entry is a 6-tuple in record order, so it packs to exactly the array of its
    fields."""
    pack: Callable[[Entry], bytes] = msgpack.Packer(use_bin_type=True).pack
    return pack


#: Entries encoded at a time by a whole-list encoding: blocks keep the memory of the encodings
#: bounded, where a whole big tree's would be held at once.
_BLOCK = 4096


def cut_in_blocks(entries: Sequence[Entry], pack: Callable[[Entry], bytes]) -> Iterator[tuple[int, bytes]]:
    """The chunks of ``entries``, encoded and cut a block at a time, as ``(index in
    ``entries`` just past the chunk's last record, the chunk)``.  A block's last chunk is
    complete only when its last record ends it by key; otherwise its records start the next
    block's cut (a cut resets all state, so that equals cutting the whole list)."""
    keys: list[bytes] = []
    records: list[bytes] = []
    for start in range(0, len(entries), _BLOCK):
        block = entries[start : start + _BLOCK]
        keys += [e.path for e in block]
        records += [pack(e) for e in block]
        offset = start + len(block) - len(keys)  # (the index of keys[0] in entries)
        last = start + _BLOCK >= len(entries)
        pieces = list(chunker.cut_record_bytes(keys, records))
        if not last and not chunker.ends_chunk(keys[-1]):
            tail_start = pieces[-2][0] if len(pieces) > 1 else 0
            pieces.pop()
            keys, records = keys[tail_start:], records[tail_start:]
        else:
            keys, records = [], []
        for end, data in pieces:
            yield offset + end, data


_KINDS = frozenset(KIND_NAMES)


def _check(raw: Any) -> Entry:
    # Fast path first: exact types (msgpack yields exactly list/bytes/int), one combined test.
    if type(raw) is list and len(raw) == 6:
        path, kind, mode, size, mtime_ns, ref = raw
        if (
            type(path) is bytes
            and path
            and type(ref) is bytes
            and type(mode) is int
            and type(size) is int
            and type(mtime_ns) is int
            and kind in _KINDS
            and type(kind) is int
            and (len(ref) == 32 or kind > EXEC)
        ):
            return Entry(path, kind, mode, size, mtime_ns, ref)
    if not isinstance(raw, list) or len(raw) != 6:
        raise ValueError("an entry is not a 6-item array")
    path, kind, mode, size, mtime_ns, ref = raw
    if not isinstance(path, bytes) or not path:
        raise ValueError("an entry has no path")
    if not (isinstance(kind, int) and kind in KIND_NAMES):
        raise ValueError(f"entry {path!r} has an unknown kind")
    if not (isinstance(mode, int) and isinstance(size, int) and isinstance(mtime_ns, int)):
        raise ValueError(f"entry {path!r} has a non-integer field")
    if not isinstance(ref, bytes):
        raise ValueError(f"entry {path!r} has a bad reference")
    if kind in (FILE, EXEC) and len(ref) != 32:
        raise ValueError(f"entry {path!r} has a bad content id")
    return Entry(path, kind, mode, size, mtime_ns, ref)


def iter_entries_of_chunks(mid: bytes, chunks: Iterable[bytes]) -> Iterator[Entry]:
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=64 << 20)
    previous = None
    try:
        for data in chunks:
            unpacker.feed(data)
            for raw in unpacker:
                entry = _check(raw)
                if previous is not None and entry.path <= previous:
                    raise ValueError("entries are not sorted by path")
                previous = entry.path
                yield entry
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"manifest {mid.hex()} is damaged: {exc}") from exc


def difference_of_chunks(
    mid_a: bytes, chunks_a: Iterable[bytes], mid_b: bytes, chunks_b: Iterable[bytes]
) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
    """The entries of two manifests' chunks, by path, but for the records equal on both sides
    (compared as msgpack decodes them): only those that differ (or are on one side) are
    validated and made entries.  Most entries of a changed leaf did not change, and turning a record into an
    entry is most of what reading one costs (a diff of 100 changed files in a 7.7k-file tree
    decoded ~5.8k entries a side).  A record unchanged on both sides is not checked here (a
    hostile one changes nothing that is compared; ``verify`` reads every entry)."""
    raw_a = _raw_records(mid_a, chunks_a)
    raw_b = _raw_records(mid_b, chunks_b)
    return _differing(mid_a, raw_a, raw_b), _differing(mid_b, raw_b, raw_a)


def difference_from_entries(
    ours: Iterable[Entry], mid_b: bytes, chunks_b: Iterable[bytes]
) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
    """:func:`difference_of_chunks` when one side's entries are in memory already: ``ours``
    are the entries of manifest A's chunks that B does not share (as the encoder that just made
    A holds them), ``chunks_b`` B's chunks that A does not share.  Only B's are decoded."""
    a = {e.path: e for e in ours}
    raw_b = _raw_records(mid_b, chunks_b)
    old = {p: e for p, e in a.items() if tuple(raw_b.get(p, ())) != e}
    try:
        new = {p: _check(r) for p, r in raw_b.items() if a.get(p) != tuple(r)}
    except (ValueError, TypeError) as exc:
        raise CorruptError(f"manifest {mid_b.hex()} is damaged: {exc}") from exc
    return old, new


def _differing(mid: bytes, ours: dict[bytes, list[Any]], theirs: dict[bytes, list[Any]]) -> dict[bytes, Entry]:
    try:
        return {p: _check(r) for p, r in ours.items() if theirs.get(p) != r}
    except (ValueError, TypeError) as exc:
        raise CorruptError(f"manifest {mid.hex()} is damaged: {exc}") from exc


def _raw_records(mid: bytes, chunks: Iterable[bytes]) -> dict[bytes, list[Any]]:
    """The decoded records of ``chunks`` by path, their order checked, not yet their fields."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=64 << 20)
    out: dict[bytes, list[Any]] = {}
    previous = b""
    try:
        for data in chunks:
            unpacker.feed(data)
            for raw in unpacker:
                if type(raw) is not list or len(raw) != 6 or type(raw[0]) is not bytes or not raw[0]:
                    _check(raw)  # raises: the record has no entry's shape
                path = raw[0]
                if path <= previous:
                    raise ValueError("entries are not sorted by path")
                out[path] = raw
                previous = path
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"manifest {mid.hex()} is damaged: {exc}") from exc
    return out


def iter_entries(get: Get, mid: bytes) -> Iterator[Entry]:
    """Yield the entries of manifest ``mid`` in path order (validating their shape)."""
    return iter_entries_of_chunks(mid, objects.iter_stream(get, mid))


def find(get: Get, mid: bytes, path: bytes) -> Entry | None:
    """The entry of ``path`` in manifest ``mid``, or None when it holds no such path.

    A descent of the manifest's index tree: entries are sorted and never span two chunks, so
    at each level a binary search over the children, by the first path under each (its
    leftmost leaf's first record), picks the one child that may hold ``path``.  It reads
    ~height x log2(fanout) chunks where a scan decoded every entry, and a walk of the whole index
    every node.
    """
    return find_many(get, mid, [path]).get(path)


def find_many(get: Get, mid: bytes, paths: Sequence[bytes]) -> dict[bytes, Entry]:
    """The entries of ``paths`` (sorted) that manifest ``mid`` holds, by path: :func:`find`
    for several paths at once, each index node and leaf read once (the first paths the
    descents compare with are shared), so its cost grows with the leaves that hold them, never
    beyond a decode of the whole manifest."""
    record = get("streams", mid)
    if record is None:  # a one-chunk manifest
        return _in_leaf_many(mid, objects.load_chunk(get, mid), paths)
    size, height, root = objects.parse_stream_record(mid, record)
    if size > objects.MAX_STREAM_BYTES:
        raise CorruptError(f"stream {mid.hex()} claims {size} bytes, more than any stream may hold")
    firsts: dict[bytes, bytes] = {}
    out: dict[bytes, Entry] = {}
    level: list[tuple[tuple[bytes, int], list[bytes]]] = [((root, size), list(paths))]
    for h in range(height, 0, -1):  # (each level's nodes, each with the paths under it, in order)
        below: list[tuple[tuple[bytes, int], list[bytes]]] = []
        for node, under in level:
            children = objects.index_children(get, node[0], node[1])
            for path in under:
                child = children[_child_for(get, mid, children, h - 1, path, firsts)]
                if below and below[-1][0] == child:
                    below[-1][1].append(path)
                else:
                    below.append((child, [path]))
        level = below
    for leaf, under in level:
        out.update(_in_leaf_many(mid, _leaf(get, *leaf), under))
    return out


def _in_leaf_many(mid: bytes, data: bytes, paths: Sequence[bytes]) -> dict[bytes, Entry]:
    """The entries of ``paths`` in one leaf: only their records are made entries (and checked)."""
    raw = _raw_records(mid, [data])
    try:
        return {p: _check(r) for p in paths if (r := raw.get(p)) is not None}
    except (ValueError, TypeError) as exc:
        raise CorruptError(f"manifest {mid.hex()} is damaged: {exc}") from exc


def _child_for(
    get: Get, mid: bytes, children: list[tuple[bytes, int]], height: int, path: bytes, firsts: dict[bytes, bytes]
) -> int:
    """The index of the last child whose first path <= ``path``: a binary search that steps
    around a child it cannot read (a damaged leaf must not hide the paths of its neighbours;
    only when the answer may be a damaged child is its damage raised)."""
    lo, hi = 0, len(children)
    while hi - lo > 1:
        middle = (lo + hi) // 2
        try:
            before = _first_path(get, mid, children[middle], height, firsts) <= path
        except CorruptError as damage:
            lo, hi = _around(get, mid, children, height, path, firsts, (lo, middle, hi), damage)
            continue
        lo, hi = (middle, hi) if before else (lo, middle)
    return lo


def _around(
    get: Get,
    mid: bytes,
    children: list[tuple[bytes, int]],
    height: int,
    path: bytes,
    firsts: dict[bytes, bytes],
    bounds: tuple[int, int, int],
    damage: CorruptError,
) -> tuple[int, int]:
    """Narrow ``lo..hi`` with the readable children nearest the unreadable ``middle``."""
    lo, middle, hi = bounds
    for j in range(middle + 1, hi):  # the nearest readable child to the right
        try:
            if _first_path(get, mid, children[j], height, firsts) <= path:
                return j, hi
            hi = j
            break
        except CorruptError:
            continue
    for k in range(middle - 1, lo, -1):  # and to the left
        try:
            if _first_path(get, mid, children[k], height, firsts) > path:
                return lo, k
            lo = k
            break
        except CorruptError:
            continue
    # ``lo`` or one of the unreadable children after it: ``lo`` when the path is not past its end
    # (entries are sorted and never span two chunks).
    try:
        if path <= _last_path(get, mid, children[lo], height):
            return lo, lo + 1
    except CorruptError:
        pass
    raise damage  # the path's child may be one of the unreadable ones


def _last_path(get: Get, mid: bytes, node: tuple[bytes, int], height: int) -> bytes:
    """The last path under ``node`` (down its rightmost children)."""
    cur = node
    for _ in range(height):
        cur = objects.index_children(get, cur[0], cur[1])[-1]
    entries = list(iter_entries_of_chunks(mid, [_leaf(get, *cur)]))
    if not entries:
        raise CorruptError(f"manifest {mid.hex()} is damaged: an empty chunk in its index")
    return entries[-1].path


def _first_path(get: Get, mid: bytes, node: tuple[bytes, int], height: int, firsts: dict[bytes, bytes]) -> bytes:
    """The first path under ``node`` (down its leftmost children)."""
    if node[0] in firsts:
        return firsts[node[0]]
    cur = node
    for _ in range(height):
        cur = objects.index_children(get, cur[0], cur[1])[0]
    first = next(iter_entries_of_chunks(mid, [_leaf(get, *cur)]), None)
    if first is None:
        raise CorruptError(f"manifest {mid.hex()} is damaged: an empty chunk in its index")
    firsts[node[0]] = first.path
    return first.path


def _leaf(get: Get, cid: bytes, size: int) -> bytes:
    data = objects.load_chunk(get, cid, max_size=size)
    if len(data) != size:
        raise CorruptError(f"chunk {cid.hex()} has {len(data)} bytes, its index says {size}")
    return data


def load(get: Get, mid: bytes) -> dict[bytes, Entry]:
    """The whole manifest as a dict keyed by path."""
    return {e.path: e for e in iter_entries(get, mid)}


def named_chunks(get: Get, mid: bytes) -> Iterator[bytes]:
    """The chunks of manifest ``mid``, then a check that its id names them: by its tree
    (objects.tree_id, manifests written since 2026-11) or by the whole content's BLAKE3 (the
    rule before, still that of file streams).  CorruptError when neither does: a ``streams``
    record put under another manifest's id."""
    record = get("streams", mid)
    if record is None or objects.id_matches(mid, record):
        yield from objects.iter_stream(get, mid)  # (one chunk: its id is checked as it loads)
        return
    hasher = blake3.blake3()
    for data in objects.iter_stream(get, mid):
        hasher.update(data)
        yield data
    if hasher.digest() != mid:
        raise CorruptError(f"manifest {mid.hex()} is damaged: its id names neither its tree nor its content")
