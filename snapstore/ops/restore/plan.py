"""Planning a restore: the steps that turn the tree's manifest into the target's.

A plan is a list of idempotent :class:`Step` s (so a journal of them can be replayed after a
crash): removals deepest first, then writes shallowest first, then directory modes deepest
first (a directory that loses its write bit does so after everything inside it is written).

Restore never removes or replaces what it could not record: a path the safety checkpoint holds
as UNREADABLE (no content), anything below it and any directory above it that would have to go
are left alone and reported in :attr:`Plan.unrecorded`.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from snapstore.errors import CorruptError
from snapstore.ops.diff import (
    ADDED,
    DELETED,
    MODE_CHANGED,
    MODIFIED,
    TYPE_CHANGED,
    Change,
    Getter,
    compare,
)
from snapstore.records import manifest
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, UNREADABLE, Entry, exact_mode
from snapstore.storage import objects
from snapstore.storage.backend import ReadView
from snapstore.tree.paths import display, parents
from snapstore.tree.scan import Found

if TYPE_CHECKING:
    from snapstore.records.manifest_codec import Codec

#: Every action a step may have.  ``chmod`` is only read from journals of older versions (it
#: is carried out as ``write``: a file's mode is never changed in place).
ACTIONS = frozenset({"delete", "rmdir", "prune", "write", "symlink", "mkdir", "dirmode", "chmod"})
#: Actions that remove what is at their path.
REMOVALS = frozenset({"delete", "rmdir", "prune"})
_WRITE_ACTION = {FILE: "write", EXEC: "write", SYMLINK: "symlink", DIR: "mkdir"}


@dataclass
class Step:
    """One idempotent action on one path (see :data:`ACTIONS`)."""

    action: str
    path: bytes


@dataclass
class Plan:
    """The changes a restore makes, the steps that make them, and what it must leave alone."""

    changes: list[Change]
    steps: list[Step]
    #: Paths in the tree that could not be recorded (unreadable), left in place.
    unrecorded: list[bytes] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def has_below(keys: list[bytes], d: bytes) -> bool:
    """Does sorted ``keys`` hold a path below directory ``d``?"""
    prefix = d + b"/"
    i = bisect_left(keys, prefix)
    return i < len(keys) and keys[i].startswith(prefix)


def plan(
    current: Mapping[bytes, Entry],
    target: Mapping[bytes, Entry],
    selected: Callable[[bytes], bool],
    among: Iterable[bytes] | None = None,
) -> Plan:
    """The plan that makes the selected paths of ``current`` equal to ``target``.

    ``among``, when given, holds every path where the two may differ (those of the manifest
    chunks they do not share): only those are compared.
    """
    if among is None:
        cur = {p: e for p, e in current.items() if selected(p)}
        tgt = {p: e for p, e in target.items() if selected(p)}
    else:
        wanted = [p for p in among if selected(p)]
        cur = {p: current[p] for p in wanted if p in current}
        tgt = {p: target[p] for p in wanted if p in target}
    blocked = _Blocked(current)
    p = Plan([], [], [], [])
    removals: list[Step] = []
    writes: list[Step] = []
    dir_modes: list[Step] = []
    removed_parents: set[bytes] = set()
    for c in compare(cur, tgt):
        new, old = c.new, c.old
        if new is not None and new.kind == UNREADABLE:
            p.warnings.append(f"not restored: {display(c.path)} was unreadable when checkpointed")
            continue
        why = blocked.by(c.path, new is not None and new.kind == DIR)
        if why is not None:
            blocked.left.add(why)
            continue
        p.changes.append(c)
        if old is not None and c.status in (DELETED, TYPE_CHANGED):
            removals.append(Step("rmdir" if old.kind == DIR else "delete", c.path))
            removed_parents.update(parents(c.path))
        if new is not None and c.status in (ADDED, MODIFIED, TYPE_CHANGED, MODE_CHANGED):
            _write_steps(c.path, new, c.status, writes, dir_modes)
    removals += _emptied_dirs(removed_parents, target, tgt, blocked)
    removals.sort(key=lambda s: s.path, reverse=True)
    writes.sort(key=lambda s: s.path)
    dir_modes.sort(key=lambda s: s.path, reverse=True)
    p.steps = removals + writes + dir_modes
    p.unrecorded = sorted(blocked.left)
    return p


class _Blocked:
    """The paths the safety checkpoint could not record (unreadable), and what they forbid
    touching: themselves, what is below them, and the directories holding them."""

    def __init__(self, current: Mapping[bytes, Entry]):
        self.paths = {p for p, e in current.items() if e.kind == UNREADABLE}
        self.above: dict[bytes, bytes] = {}
        for b in sorted(self.paths, reverse=True):
            for d in parents(b):
                self.above[d] = b
        #: The blocking paths a step was dropped for (reported: left as they are).
        self.left: set[bytes] = set()

    def by(self, path: bytes, keeps_dir: bool) -> bytes | None:
        """The unreadable path that forbids touching ``path``, if any."""
        if path in self.paths:
            return path
        for d in parents(path):
            if d in self.paths:
                return d
        if not keeps_dir and path in self.above:
            return self.above[path]
        return None


def _write_steps(path: bytes, new: Entry, status: str, writes: list[Step], dir_modes: list[Step]) -> None:
    if new.kind == DIR:
        if status != MODIFIED:  # MODIFIED: the directory is there, its mode differs
            writes.append(Step("mkdir", path))
        if exact_mode(new.mode) is not None:
            dir_modes.append(Step("dirmode", path))
    else:
        writes.append(Step(_WRITE_ACTION[new.kind], path))


def _emptied_dirs(
    removed_parents: set[bytes], target: Mapping[bytes, Entry], tgt: dict[bytes, Entry], blocked: _Blocked
) -> list[Step]:
    """The directories the removals leave empty and the target does not keep."""
    target_keys: list[bytes] = []

    def needed(d: bytes) -> bool:
        # The target keeps directory d: as an entry, or as the parent of one.
        e = target.get(d)
        if e is not None and e.kind == DIR:
            return True
        if not target_keys:
            target_keys.extend(sorted(target))
        return has_below(target_keys, d)

    out = []
    for d in removed_parents:
        if needed(d):
            continue
        if d in blocked.above:
            blocked.left.add(blocked.above[d])
            continue
        # A directory left empty by the removals goes too; one the target puts a file or
        # symlink at must go (an error if it still holds ignored files).
        out.append(Step("rmdir" if d in tgt else "prune", d))
    return out


def skip_ignored(
    root: bytes, steps: list[Step], found: Mapping[bytes, Found], warn: Callable[[str], None]
) -> list[Step]:
    """Drop steps that would touch a path the scan did not see (ignored, .git, the store)."""
    found_keys: list[bytes] = []
    hidden_cache: dict[bytes, bool] = {}
    # The parents of the steps' paths the scan saw: directories it saw, known without sorting
    # every path it found (the rest are looked up in that sorted list).
    seen_parents = {d for s in steps if s.path in found for d in parents(s.path)}

    def known_dir(rel: bytes) -> bool:
        # The scan saw directory rel: as an (empty) entry, or as the parent of something.
        if not rel or rel in seen_parents:
            return True
        f = found.get(rel)
        if f is not None and f.kind == DIR:
            return True
        if not found_keys:
            found_keys.extend(sorted(found))
        return has_below(found_keys, rel)

    def hidden(rel: bytes) -> bool:
        # Exists on disk but the scan did not report it: ignored or excluded.
        if rel in hidden_cache:
            return hidden_cache[rel]
        result = rel not in found and not known_dir(rel) and os.path.lexists(os.path.join(root, rel))
        hidden_cache[rel] = result
        return result

    kept = []
    for s in steps:
        p = s.path
        blocked = next((d for d in reversed(parents(p)) if hidden(d)), None)
        if blocked is None and s.action in _PUTS and hidden(p):
            blocked = p
        if blocked is not None:
            warn(f"left {display(p)} alone: {display(blocked)} is ignored")
            continue
        kept.append(s)
    return kept


#: The steps that put something at their own path (a dirmode too: a directory the checkpoint
#: holds where an ignored file of the user's now stands stopped the restore with exit 9).
_PUTS = frozenset({"write", "chmod", "symlink", "mkdir", "dirmode"})

#: Verified contents kept in memory for the writers (so they do not read and decompress again).
KEEP_VERIFIED_BYTES = 64 << 20


def verify_sources(
    get: Getter,
    target: Mapping[bytes, Entry],
    steps: list[Step],
    reader: Callable[[], AbstractContextManager[ReadView]] | None = None,
) -> dict[bytes, list[bytes]]:
    """Read and re-hash every chunk the steps need; raise CorruptError before any write.

    Returns the plain chunks of the streams read, by stream id, as long as they fit in
    :data:`KEEP_VERIFIED_BYTES` (the rest are read again when written).  With ``reader`` (a
    source of read views) the streams that will be kept are read by a small thread pool, each
    thread with its own view: decompressing solid frames is most of a restore's reading, and
    zstd releases the GIL.
    """
    wanted = [(s, target[s.path]) for s in steps if s.action in ("write", "chmod")]
    early: dict[bytes, list[bytes] | CorruptError] = {}
    if reader is not None:
        early = _read_ahead(reader, [e for _, e in wanted])
    seen: dict[bytes, int] = {}
    kept: dict[bytes, list[bytes]] = {}
    budget = KEEP_VERIFIED_BYTES
    for s, entry in wanted:
        sid = entry.ref
        try:
            if sid not in seen:
                got = early.get(sid)
                if isinstance(got, CorruptError):
                    raise got
                if got is None and entry.size <= budget:
                    got = list(objects.iter_stream(get, sid))
                if got is None:
                    seen[sid] = sum(len(block) for block in objects.iter_stream(get, sid))
                else:
                    seen[sid] = size = sum(len(block) for block in got)
                    if size == entry.size and size <= budget:
                        kept[sid] = got
                        budget -= size
            if seen[sid] != entry.size:
                # The entry's size is part of what the checkpoint says: a stream of another
                # length means the record or the stream is not what was written.
                raise CorruptError(f"its stream holds {seen[sid]} bytes, the checkpoint says {entry.size}")
        except CorruptError as exc:
            raise CorruptError(
                f"cannot restore {display(s.path)}: {exc}; the tree was not touched"
            ) from exc
    return kept


#: Streams below this count are read in the calling thread (a pool costs more than it saves).
PARALLEL_MIN = 8
READ_THREADS = 2


def _read_ahead(
    reader: Callable[[], AbstractContextManager[ReadView]], entries: list[Entry]
) -> dict[bytes, list[bytes] | CorruptError]:
    """The streams that fit the keep budget, read in parallel (each result or its damage)."""
    todo: list[bytes] = []
    budget = KEEP_VERIFIED_BYTES
    for e in entries:
        if e.ref not in todo and e.size <= budget:
            todo.append(e.ref)
            budget -= e.size
    if len(todo) < PARALLEL_MIN:
        return {}
    from snapstore.ops.workers import pool

    def read(sids: list[bytes]) -> dict[bytes, list[bytes] | CorruptError]:
        out: dict[bytes, list[bytes] | CorruptError] = {}
        with reader() as view:
            for sid in sids:
                try:
                    out[sid] = list(objects.iter_stream(view.get, sid))
                except CorruptError as exc:
                    out[sid] = exc
        return out

    # Contiguous shares: neighbours (often in one solid frame) are read by the same thread, whose
    # frame cache then decodes that frame once.
    step = -(-len(todo) // READ_THREADS)
    shares = [todo[i : i + step] for i in range(0, len(todo), step)]
    result: dict[bytes, list[bytes] | CorruptError] = {}
    for part in pool("verify", READ_THREADS).map(read, shares):
        result.update(part)
    return result


def difference(
    get: Getter, safety_mid: bytes, target_mid: bytes, codec: Codec | None
) -> tuple[dict[bytes, Entry], dict[bytes, Entry]]:
    """The entries of the safety checkpoint's manifest and the target's that may differ
    (:func:`snapstore.ops.diff.manifest_difference`).

    A long-lived Store's manifest ``codec`` holds the encoding it made last, chunk by chunk;
    when that is the safety checkpoint's manifest (it was just recorded, or found unchanged),
    its side is taken from memory and only the target's chunks that differ are read.
    """
    from snapstore.ops.diff import manifest_difference

    if codec is None or codec.mid != safety_mid or safety_mid == target_mid or len(codec.cids) != len(codec.ends):
        return manifest_difference(get, safety_mid, target_mid)
    theirs = objects.leaf_ids(get, target_mid)
    shared = set(codec.cids) & set(theirs)
    ours: list[Entry] = []
    start = 0
    for cid, end in zip(codec.cids, codec.ends):
        if cid not in shared:
            ours.extend(codec.entries[start:end])
        start = end
    chunks = (objects.load_chunk(get, c) for c in theirs if c not in shared)
    return manifest.difference_from_entries(ours, target_mid, chunks)


class TargetView(Mapping[bytes, Entry]):
    """The target's entries as the tree's (``base``, the safety checkpoint's) with the paths of
    ``old`` gone and those of ``new`` in their place: what :func:`difference` yields, without
    copying every entry of the tree into a dict of its own.  ``base`` must not change while the
    view is used (it is the entries the safety checkpoint just recorded)."""

    __slots__ = ("_base", "_old", "_new")

    def __init__(self, base: Mapping[bytes, Entry], old: Iterable[bytes], new: dict[bytes, Entry]):
        self._base, self._new = base, new
        self._old = {p for p in old if p not in new}

    def __getitem__(self, path: bytes) -> Entry:
        e = self._new.get(path)
        if e is not None:
            return e
        if path in self._old:
            raise KeyError(path)
        return self._base[path]

    def __contains__(self, path: object) -> bool:
        return path in self._new or (path not in self._old and path in self._base)

    def __iter__(self) -> Iterator[bytes]:
        new, old = self._new, self._old
        yield from new
        for p in self._base:
            if p not in new and p not in old:
                yield p

    def __len__(self) -> int:
        gone = sum(1 for p in self._old if p in self._base)
        return len(self._base) - gone + sum(1 for p in self._new if p not in self._base)
