"""The working tree's current state as a manifest, without storing anything.

Used by ``diff`` against the working tree and by ``restore --dry-run``: files whose stat cache
entry is still valid are not read; the others are hashed (BLAKE3 of the whole content, which is
exactly their stream id) in a thread pool.  Nothing is written to the store or the tree.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from typing import Protocol

import blake3

from snapstore.records.manifest import DIR, EXEC, FILE, MODE_KEEP, SYMLINK, UNREADABLE, Entry
from snapstore.storage.backend import Backend
from snapstore.tree import scan, statcache
from snapstore.tree.paths import open_beneath

_BLOCK = 1 << 20


class Tree(Protocol):
    """What :func:`current_state` needs: a StageContext (or the Store) satisfies it."""

    @property
    def backend(self) -> Backend: ...
    @property
    def root_bytes(self) -> bytes: ...
    @property
    def excluded(self) -> frozenset[bytes]: ...


def hash_file(root: bytes, rel: bytes) -> tuple[bytes, os.stat_result] | None:
    """``(stream id, stat)`` of a regular file, or None if it is gone or not a regular file.

    The file is re-statted after reading; a file that changed while read is reported as None
    so the caller treats it as unknown rather than trusting a torn hash.
    """
    try:
        fd = open_beneath(root, rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        h = blake3.blake3()
        while True:
            block = os.read(fd, _BLOCK)
            if not block:
                break
            h.update(block)
        after = os.fstat(fd)
        if (after.st_mtime_ns, after.st_ctime_ns, after.st_size) != (st.st_mtime_ns, st.st_ctime_ns, st.st_size):
            return None
        return h.digest(), st
    except OSError:
        return None
    finally:
        os.close(fd)


def entry_for(f: scan.Found, sid: bytes | None = None) -> Entry:
    """The entry of something the scan found (a file's ``sid`` is its stream id)."""
    st = f.st
    if st is None:
        return Entry(f.path, UNREADABLE, 0, 0, 0, b"")
    if f.kind in (FILE, EXEC):
        return Entry(f.path, f.kind, st.st_mode & MODE_KEEP, st.st_size, st.st_mtime_ns, sid or b"")
    if f.kind == SYMLINK:
        return Entry(f.path, SYMLINK, st.st_mode & MODE_KEEP, st.st_size, st.st_mtime_ns, f.target)
    if f.kind == DIR:
        return Entry(f.path, DIR, st.st_mode & MODE_KEEP, 0, st.st_mtime_ns, b"")
    return Entry(f.path, UNREADABLE, 0, 0, 0, b"")


def file_entry(path: bytes, st: os.stat_result | scan.Stat, sid: bytes) -> Entry:
    """The entry of a regular file read (or hashed) under ``st``."""
    kind = EXEC if st.st_mode & 0o100 else FILE
    return Entry(path, kind, st.st_mode & MODE_KEEP, st.st_size, st.st_mtime_ns, sid)


def classify(found: list[scan.Found], cache: dict[bytes, bytes]) -> tuple[dict[bytes, Entry], list[scan.Found]]:
    """Entries for everything the stat cache vouches for, and the files that must be read."""
    entries: dict[bytes, Entry] = {}
    misses: list[scan.Found] = []
    lookup = statcache.lookup
    kept, kept_mtime = statcache.KEPT_HEADER[0], statcache.kept_mtime
    get = cache.get
    max_key = statcache.MAX_KEY
    new = tuple.__new__  # Entry(...) without the NamedTuple constructor's Python frame
    for f in found:
        path, kind, st, _ = f
        if kind <= EXEC and st is not None:  # FILE or EXEC: the hot path, once per file
            value = get(path)
            if value is None and len(path) > max_key:  # rare: keyed by its hash
                value = get(statcache.long_key(path))
            sid = lookup(value, st)
            if sid is None:
                misses.append(f)
                continue
            # (the mtime the value keeps, when the file was touched: its parent entry's)
            mtime = st.st_mtime_ns if value is None or value[0] != kept else kept_mtime(value)
            entries[path] = new(Entry, (path, kind, st.st_mode & MODE_KEEP, st.st_size, mtime, sid))
        else:
            entries[path] = entry_for(f)
    return entries, misses


def classify_sorted(
    found: Iterable[scan.Found], cache_items: Iterable[tuple[bytes, bytes]], into: dict[bytes, Entry] | None = None
) -> tuple[dict[bytes, Entry], list[scan.Found], list[bytes]]:
    """:func:`classify` for a walk sorted by path and the stat cache read in key order (an
    LMDB cursor): the same entries and misses, plus the cache keys no found path has (stale),
    without holding the whole cache as a dict (~160 bytes a file).

    Both sides are in bytes order, so one merge pass pairs each path with its cache value; the
    keys of paths longer than MAX_KEY (a NUL and a hash) sort before every path and are read
    first.  ``into``: the (empty) dict to put the entries in (a watching Store's keeps them
    packed: tree.packed.EntryMap).
    """
    entries: dict[bytes, Entry] = {} if into is None else into
    misses: list[scan.Found] = []
    stale: list[bytes] = []
    lookup = statcache.lookup
    kept, kept_mtime = statcache.KEPT_HEADER[0], statcache.kept_mtime
    max_key = statcache.MAX_KEY
    new = tuple.__new__
    end = (None, b"")
    it = iter(cache_items)
    ckey: bytes | None
    ckey, cvalue = next(it, end)
    long_values: dict[bytes, bytes] = {}
    while ckey is not None and ckey[:1] == b"\x00":
        long_values[ckey] = cvalue
        ckey, cvalue = next(it, end)
    long_present: set[bytes] = set()
    modes: dict[int, int] = {}
    for f in found:
        path, kind, st, _ = f
        while ckey is not None and ckey < path:
            stale.append(ckey)
            ckey, cvalue = next(it, end)
        value = None
        if ckey == path:
            value = cvalue
            ckey, cvalue = next(it, end)
        elif len(path) > max_key:  # rare: keyed by its hash
            hashed = statcache.long_key(path)
            long_present.add(hashed)
            value = long_values.get(hashed)
        if kind <= EXEC and st is not None:  # FILE or EXEC: the hot path, once per file
            sid = lookup(value, st)
            if sid is None:
                misses.append(f)
                continue
            mode = st.st_mode & MODE_KEEP
            mode = modes.get(mode) or modes.setdefault(mode, mode)  # (one int object a mode, not a file)
            mtime = st.st_mtime_ns if value is None or value[0] != kept else kept_mtime(value)
            entries[path] = new(Entry, (path, kind, mode, st.st_size, mtime, sid))
        else:
            entries[path] = entry_for(f)
    while ckey is not None:
        stale.append(ckey)
        ckey, cvalue = next(it, end)
    stale.extend(k for k in long_values if k not in long_present)
    return entries, misses, stale


def current_state(
    store: Tree, report: scan.ScanReport | None = None
) -> tuple[dict[bytes, Entry], dict[bytes, scan.Found]]:
    """Entries of the working tree now (path -> Entry) and what the walk found (path -> Found)."""
    report = report or scan.ScanReport()
    found = scan.walk(store.root_bytes, store.excluded, report)
    with store.backend.read() as view:
        entries, misses, _ = classify_sorted(found, view.items("statcache"))
    hash_misses(store.root_bytes, misses, entries, report)
    return entries, {f.path: f for f in found}


def hash_misses(root: bytes, misses: list[scan.Found], entries: dict[bytes, Entry], report: scan.ScanReport) -> None:
    """Add the entries of the files the stat cache could not vouch for, by hashing them."""
    if not misses:
        return
    results: Iterable[tuple[bytes, os.stat_result] | None]
    if len(misses) <= HASH_INLINE_FILES and sum(f.st.st_size for f in misses if f.st) <= HASH_INLINE_BYTES:
        # A few edited files (`status` after a tool call): a pool and its imports cost more.
        results = [hash_file(root, f.path) for f in misses]
        _record_hashes(misses, results, entries, report)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(4, os.cpu_count() or 2)) as pool:
        _record_hashes(misses, pool.map(lambda f: hash_file(root, f.path), misses), entries, report)


#: Misses hashed in the calling thread (below these, a thread pool costs more than it saves).
HASH_INLINE_FILES = 64
HASH_INLINE_BYTES = 4 << 20


def _record_hashes(
    misses: list[scan.Found],
    results: Iterable[tuple[bytes, os.stat_result] | None],
    entries: dict[bytes, Entry],
    report: scan.ScanReport,
) -> None:
    for f, res in zip(misses, results):
        if res is None:
            entries[f.path] = Entry(f.path, UNREADABLE, 0, 0, 0, b"")
            report.warn(f"could not read {f.path.decode('utf-8', 'backslashreplace')}")
        else:
            sid, st = res
            entries[f.path] = file_entry(f.path, st, sid)
