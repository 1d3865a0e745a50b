"""Walking the working tree: what is there, what is ignored, what is skipped.

The walk never follows a symlink, never enters ``.git``, the store, or any other snapstore store
(a directory holding STORE_MARKERS, or named ``.snapstore``), and never fails on a file that
vanishes or cannot be listed: such paths are counted and reported as warnings, and the walk goes
on.  Paths are bytes end to end, so names that are not valid UTF-8 survive exactly.

Directories are opened relative to their parent's fd (O_NOFOLLOW|O_DIRECTORY) and listed through
that fd, so a tree deeper than PATH_MAX is walked like any other and a directory swapped for a
symlink mid-walk is never followed.  The fds held at any moment are those of the directories on
the current path that still have children to visit (about the tree's depth).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Mapping
from typing import NamedTuple, Protocol

from snapstore.errors import TreeIOError
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, UNREADABLE
from snapstore.tree import ignore
from snapstore.tree.paths import DIR_FLAGS, display, iter_parents, open_beneath, open_dir

ALWAYS_EXCLUDED = frozenset({b".git", b".snapstore"})
#: A directory holding the writer lock and a data file (LMDB's data.mdb, or the CURRENT file of a
#: generational layout) is a snapstore store: it is excluded like ``.git`` wherever it is, so an
#: outer store neither copies nor restores another project's store.  Keep in sync with the
#: store's layout (snapstore.store, snapstore.storage).
STORE_LOCK = b"lock"
STORE_DATA = frozenset({b"data.mdb", b"CURRENT"})
#: The files left out when the tree's root itself is a store (an old `init --store .`).
STORE_MARKERS = frozenset({b"data.mdb", b"lock.mdb", b"lock", b"CURRENT"})

_new = tuple.__new__  # builds a Found without the NamedTuple constructor's Python frame

# Seams for tests (patch these, not os.*, so nothing else in the process is affected).
_scandir = os.scandir
_open_dir = open_dir
_FS_ENCODING = sys.getfilesystemencoding()  # os.fsencode's, without its Python-level frame


class Stat(NamedTuple):
    """The fields of an lstat result that snapshots, the stat cache and restore's checks read.

    An ``os.stat_result`` holds about 19 objects (~750 bytes with its ints and floats); this
    holds five, which share the ints of the result they were taken from (~230 bytes).  A walk
    keeps one per path until the snapshot is written: at a million files that difference is
    half a gigabyte.
    """

    st_mode: int
    st_ino: int
    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int


def compact(st: os.stat_result) -> Stat:
    """The :class:`Stat` of an lstat/fstat result."""
    return _new(Stat, (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


class Found(NamedTuple):
    """One path the walk found: its kind and its lstat fields (None for unreadable dirs)."""

    path: bytes
    kind: int
    st: Stat | None
    target: bytes = b""  # symlink target


class FoundSink(Protocol):
    """Where a listing puts the records it makes: a list, or a walk's packed records."""

    def append(self, f: Found, /) -> None: ...


class WalkSink(FoundSink, Protocol):
    """Where a whole walk puts its records instead of a list (tree.packed.PackedWalk keeps a
    file's record packed as it is found: no record of every file is held as objects)."""

    def __len__(self) -> int: ...

    def sort(self) -> None:
        """Put the paths in order (the walk's last step)."""

    def paths_from(self, first: int) -> tuple[bytes, ...]:
        """The paths of the records appended since there were ``first`` of them."""


class KeptPaths:
    """The path keeping every :class:`WalkSink` shares: the paths appended, in order once
    :meth:`sort` ran (a sink's ``append`` adds to :attr:`paths`)."""

    __slots__ = ("paths",)

    def __init__(self) -> None:
        self.paths: list[bytes] = []

    def __len__(self) -> int:
        return len(self.paths)

    def sort(self) -> None:
        self.paths.sort()

    def paths_from(self, first: int) -> tuple[bytes, ...]:
        return tuple(self.paths[first:])


class ScanReport:
    """What a walk skipped, and why (shown to the user as warnings and counts)."""

    # (A plain class, not a dataclass: importing dataclasses costs every CLI process ~15 ms.)
    __slots__ = ("special", "vanished", "unreadable", "mode_bits_dropped", "warnings", "links")

    def __init__(self) -> None:
        self.special = 0  # FIFOs, sockets, devices
        self.vanished = 0
        self.unreadable = 0
        #: Files and directories whose setuid, setgid or sticky bit was dropped (never recorded).
        self.mode_bits_dropped = 0
        self.warnings: list[str] = []
        #: Files recorded with more than one hard link: a write through another link names
        #: only that link (or nothing, outside the tree), so a watching Store re-stats these
        #: at every snapshot (ops.snapshot.incremental).
        self.links: list[bytes] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)


def is_store(names: set[bytes] | frozenset[bytes]) -> bool:
    """Does a directory with these entry names look like a snapstore store?"""
    return STORE_LOCK in names and not STORE_DATA.isdisjoint(names)


#: At most this many directory fds are held for subdirectories still to visit (at most the
#: depth of the walk).  Below that, subdirectories are opened from the root with
#: paths.open_beneath instead (slower, only in trees hundreds of levels deep), so the walk never
#: runs into the process's open-file limit.
MAX_HELD_FDS = 256


class _Dir:
    """An open directory fd, closed once every subdirectory below it has been opened."""

    __slots__ = ("fd", "pending", "held")

    def __init__(self, fd: int, pending: int, held: list[int]) -> None:
        self.fd = fd
        self.pending = pending
        self.held = held  # shared one-element counter of the fds open now
        held[0] += 1

    def release(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            os.close(self.fd)
            self.held[0] -= 1


#: :attr:`Listing.kind`: a directory listed; another project's store (nothing below it is
#: recorded); a directory that could not be opened or listed (recorded as UNREADABLE).
LISTED, STORE, UNLISTABLE = 0, 1, 2


class Listing(NamedTuple):
    """One directory as a walk listed it (kept by a watching Store to patch its tree state).

    Every path a walk finds belongs to exactly one listing: a file, symlink or unreadable entry
    to its directory's ``names``; an empty directory's DIR (or an unlistable one's UNREADABLE)
    entry to that directory's own listing.
    """

    rules: ignore.Rules  # the ignore rules in force inside the directory
    names: tuple[bytes, ...]  # the paths recorded directly in it (not its subdirectories)
    subdirs: tuple[bytes, ...]  # its subdirectories that were walked, in listing order
    kind: int = LISTED
    #: What listing it reported: warnings in order (its ignore files' first, ``rule_notes`` of
    #: them), special files and unreadable entries counted; so a snapshot patched from the
    #: listings reports what a walk would.  None when something vanished meanwhile.
    notes: tuple[str, ...] | None = ()
    rule_notes: int = 0
    special: int = 0
    unreadable: int = 0


Listings = dict[bytes, Listing]


class Scanned(NamedTuple):
    """What :func:`scan_dir` found in one directory besides the entries it recorded."""

    rules: ignore.Rules
    subdirs: list[tuple[bytes, Stat]]  # subdirectories to walk, with their lstat fields
    #: Something was recorded, ignored or left out directly in it (then it is not empty).
    recorded: bool
    rule_notes: int  # warnings its ignore files gave (the first ones)


Mark = tuple[int, int, int, int]


def mark(report: ScanReport) -> Mark:
    """Where ``report`` stands, for :func:`notes_since`."""
    return len(report.warnings), report.special, report.unreadable, report.vanished


def notes_since(report: ScanReport, since: Mark) -> tuple[tuple[str, ...] | None, int, int]:
    """The warnings and counts ``report`` gained since ``since`` (see :attr:`Listing.notes`)."""
    w, special, unreadable, vanished = since
    notes = tuple(report.warnings[w:]) if report.vanished == vanished else None
    return notes, report.special - special, report.unreadable - unreadable


def walk(
    root: bytes,
    excluded: frozenset[bytes],
    report: ScanReport,
    listings: Listings | None = None,
    into: WalkSink | None = None,
) -> list[Found]:
    """Return everything below ``root`` to snapshot, sorted by path.

    ``excluded`` holds root-relative paths never to enter (the store when it lives in the tree).
    A directory appears (as DIR) only when nothing below it is recorded and nothing in it was
    left out (ignored, excluded, special), so restore can recreate empty directories.  With
    ``listings``, each directory's :class:`Listing` is added to it.  With ``into``, the records
    go there instead, sorted the same (the list returned is empty).
    """
    found: list[Found] = []
    try:
        root_fd = _open_dir(root)
    except OSError as exc:
        raise TreeIOError(f"cannot open the tree {display(root)}: {exc.strerror}") from exc
    _run(root, root_fd, excluded, report, (b"", ignore.NO_RULES), listings, found if into is None else into)
    return found


def walk_below(
    root: bytes,
    rel: bytes,
    rules: ignore.Rules,
    excluded: frozenset[bytes],
    report: ScanReport,
    listings: Listings | None = None,
) -> list[Found]:
    """What :func:`walk` would find in the subtree ``rel`` (itself included), given the rules
    in force in its parent: the same per-directory logic, started one directory down.

    ``rel`` itself is recorded as an empty DIR, as UNREADABLE, or not at all, as a whole walk
    would record it; it is opened from the root (never following a symlink in its last
    component).  Sorted by path.
    """
    found: list[Found] = []
    _run(root, None, excluded, report, (rel, rules), listings, found)
    return found


def _run(
    root: bytes,
    root_fd: int | None,
    excluded: frozenset[bytes],
    report: ScanReport,
    start: tuple[bytes, ignore.Rules],
    listings: Listings | None,
    found: list[Found] | WalkSink,
) -> None:
    stack: list[tuple[bytes, ignore.Rules, _Dir | None]] = [(start[0], start[1], None)]
    opened: list[_Dir] = []  # every fd we own, so an exception closes them all
    try:
        _walk(root, root_fd, excluded, report, stack, opened, listings, found)
    finally:
        for d in opened:
            if d.pending > 0:
                os.close(d.fd)


def _walk(
    root: bytes,
    root_fd: int | None,
    excluded: frozenset[bytes],
    report: ScanReport,
    stack: list[tuple[bytes, ignore.Rules, _Dir | None]],
    opened: list[_Dir],
    listings: Listings | None,
    found: list[Found] | WalkSink,
) -> None:
    # rel dir -> 0 while nothing below it is recorded (then it is recorded as an empty DIR)
    dir_index: dict[bytes, int] = {}
    order: list[tuple[bytes, Stat]] = []
    held = [0]
    root_dir = None
    if root_fd is not None:
        root_dir = _Dir(root_fd, 1, held)
        opened.append(root_dir)
    top = stack[0][0]  # the walk's first directory: the root, or a subtree's top (walk_below)
    while stack:  # iterative, so deep trees cannot exhaust the Python stack
        rel_dir, parent_rules, parent = stack.pop()
        if not rel_dir and root_dir is not None:
            here = root_dir
        else:
            try:
                if parent is not None:
                    fd = _open_dir(rel_dir[rel_dir.rfind(b"/") + 1 :], parent.fd)
                else:  # a subtree's top, or too deep to hold every ancestor's fd: from the root
                    fd = open_beneath(root, rel_dir, DIR_FLAGS)
            except OSError as exc:
                _unlistable(rel_dir, parent_rules, exc, found, dir_index, report, listings)
                continue
            finally:
                if parent is not None:
                    parent.release()
            here = _Dir(fd, 1, held)  # 1 = the listing below; released when it is done
            opened.append(here)
            if rel_dir == top:  # (its parent was not listed: its stat comes from its fd)
                dir_index.setdefault(rel_dir, 0)
                order.append((rel_dir, compact(os.fstat(fd))))
        first, since = len(found), mark(report)
        try:
            scanned = scan_dir(here.fd, rel_dir, parent_rules, excluded, report, found)
        except OSError as exc:
            here.release()
            if not rel_dir:  # an unlistable root is not an empty tree
                raise TreeIOError(f"cannot list the tree {display(root)}: {exc.strerror}") from exc
            _unlistable(rel_dir, parent_rules, exc, found, dir_index, report, listings)
            continue
        if scanned is None:  # another project's store: not ours to copy or to restore
            here.release()
            _skip_store(rel_dir, parent_rules, dir_index, listings)
            continue
        rules, subdirs, recorded, _ = scanned
        holder = here if held[0] < MAX_HELD_FDS else None
        if holder is not None:
            here.pending += len(subdirs)
        for rel, st in subdirs:
            dir_index.setdefault(rel, 0)
            order.append((rel, st))
            stack.append((rel, rules, holder))
        here.release()  # the listing is done; the fd stays open while subdirs wait for it
        if listings is not None:
            listings[rel_dir] = _listed(report, since, _paths_from(found, first), scanned)
        if recorded and rel_dir:
            _mark_parents(dir_index, rel_dir + b"/")  # marks rel_dir and every directory above it
    _add_empty_dirs(order, dir_index, found)
    found.sort()  # paths are unique, so tuples order by path alone


def _skip_store(rel_dir: bytes, rules: ignore.Rules, dir_index: dict[bytes, int], listings: Listings | None) -> None:
    dir_index[rel_dir] = -1
    _mark_parents(dir_index, rel_dir)
    if listings is not None:
        listings[rel_dir] = Listing(rules, (), (), STORE)


def _paths_from(found: list[Found] | WalkSink, first: int) -> tuple[bytes, ...]:
    if type(found) is list:
        return tuple([f[0] for f in found[first:]])
    return found.paths_from(first)  # type: ignore[union-attr]


def _listed(report: ScanReport, since: Mark, names: tuple[bytes, ...], scanned: Scanned) -> Listing:
    """A listed directory's :class:`Listing` (for a watching Store's patches)."""
    rules, subdirs, _, rule_notes = scanned
    notes, special, unreadable = notes_since(report, since)
    return Listing(rules, names, tuple([d[0] for d in subdirs]), LISTED, notes, rule_notes, special, unreadable)


def _add_empty_dirs(order: list[tuple[bytes, Stat]], dir_index: dict[bytes, int], found: FoundSink) -> None:
    # Deepest first (a directory is always listed after its parent): an empty directory makes
    # its parents non-empty, so only the leaves of a chain of empty directories are recorded.
    for rel, dst in reversed(order):
        if dir_index.get(rel, 0) == 0:
            found.append(Found(rel, DIR, dst))
            _mark_parents(dir_index, rel)


def scan_dir(
    fd: int,
    rel_dir: bytes,
    parent_rules: ignore.Rules,
    excluded: frozenset[bytes],
    report: ScanReport,
    found: FoundSink,
    rules: ignore.Rules | None = None,
    known: Mapping[bytes, Found] | None = None,
    named: set[bytes] | frozenset[bytes] = frozenset(),
) -> Scanned | None:
    """List the directory ``fd`` (root-relative ``rel_dir``) once: append what it records
    directly to ``found`` and return its rules and the subdirectories to walk.

    The one implementation of a directory's rules, shared by whole walks and by a watching
    Store's re-listing of single directories (:mod:`snapstore.tree.rescan`): ignore files (of
    this directory, on top of ``parent_rules``; ``rules`` when already known), ``.git``, the
    store and ``excluded`` paths, symlinks, special files, set-id bits.  None when the
    directory is another project's store (nothing in it is recorded).  Raises OSError when it
    cannot be listed.

    ``known`` (a watching Store's records of this directory, listed again): a file found there
    before, with the same inode now and not among the paths the events ``named``, is recorded
    as it was found, without a ``stat``.  An event names every write, chmod, link and rename in
    a watched directory; what none names (a write through another link or a shared mapping)
    the caller re-stats anyway (ops.snapshot.incremental).
    """
    listed = _listing(fd, rel_dir, parent_rules, report, rules)
    if listed is None:
        return None
    dirents, rules, rule_notes = listed
    prefix = rel_dir + b"/" if rel_dir else b""
    recorded = False  # something recorded, ignored or excluded directly in this directory
    subdirs: list[tuple[bytes, Stat]] = []
    for name, d in dirents:
        rel = prefix + name
        if name in ALWAYS_EXCLUDED or (excluded and rel in excluded):
            recorded = True  # content we leave out: the directory is not empty
            continue
        if known is not None and rel not in named and _kept(known.get(rel), d, report, found):
            recorded = True
            continue
        try:
            st = d.stat(follow_symlinks=False)
        except OSError as exc:
            if _skipped(report, rel, exc, "stat"):
                found.append(Found(rel, UNREADABLE, None))
                recorded = True
            continue
        mode = st.st_mode
        if mode & 0o7000:  # setuid/setgid/sticky: not recorded (manifest.MODE_KEEP)
            report.mode_bits_dropped += 1
        if mode & 0o170000 == 0o100000:  # S_ISREG without a call: the common case first
            recorded = True
            if rules and ignore.is_ignored(rules, rel, False):
                continue
            if st.st_nlink > 1:
                report.links.append(rel)
            stat = _new(Stat, (mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
            found.append(_new(Found, (rel, EXEC if mode & 0o100 else FILE, stat, b"")))
            continue
        if mode & 0o170000 == 0o040000:  # S_ISDIR
            if rules and ignore.is_ignored(rules, rel, True):
                recorded = True
                continue
            subdirs.append((rel, compact(st)))
            continue
        if rules and ignore.is_ignored(rules, rel, False):
            recorded = True
            continue
        recorded = _other(fd, name, rel, st, found, report) or recorded
    return Scanned(rules, subdirs, recorded, rule_notes)


def _kept(before: Found | None, d: os.DirEntry[str], report: ScanReport, found: FoundSink) -> bool:
    """Whether a file a watching Store found before, listed again with the same inode and named
    by no event, is recorded as it was found (no ``stat``): see :func:`scan_dir`."""
    if (
        before is None or before.kind > EXEC or before.st is None
        or before.st.st_ino != d.inode() or not d.is_file(follow_symlinks=False)
    ):  # fmt: skip
        return False
    if before.st.st_mode & 0o7000:
        report.mode_bits_dropped += 1
    found.append(before)
    return True


def _listing(
    fd: int, rel_dir: bytes, parent_rules: ignore.Rules, report: ScanReport, rules: ignore.Rules | None
) -> tuple[list[tuple[bytes, os.DirEntry[str]]], ignore.Rules, int] | None:
    """The directory's entries and rules (and how many warnings the rules added); None for
    another project's store."""
    dirents = _list(fd)
    names = {d[0] for d in dirents}
    if is_store(names):
        if rel_dir:
            return None
        # the tree root itself is a store: leave its files out, walk the rest
        dirents = [d for d in dirents if d[0] not in STORE_MARKERS]
    rule_notes = 0
    if rules is None:
        rule_notes = len(report.warnings)
        rules = ignore.rules_for_dir(parent_rules, fd, rel_dir, names, report.warn)
        rule_notes = len(report.warnings) - rule_notes
    return dirents, rules, rule_notes


def _other(fd: int, name: bytes, rel: bytes, st: os.stat_result, found: FoundSink, report: ScanReport) -> bool:
    """A symlink (recorded: True) or a special file (skipped, said so: False)."""
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(name, dir_fd=fd)
        except OSError as exc:
            _skipped(report, rel, exc, "read link")
            return False
        found.append(Found(rel, SYMLINK, compact(st), target))
        return True
    # (a directory holding only these is recorded as empty, as before)
    report.special += 1
    report.warn(f"skipped special file (FIFO, socket or device): {display(rel)}")
    return False


def _list(fd: int) -> list[tuple[bytes, os.DirEntry[str]]]:
    """``(name as bytes, entry)`` for each entry of the directory ``fd``.

    scandir(fd) gives str names (decoded with surrogateescape); encoding them back is exact, so
    names that are not UTF-8 survive.
    """
    with _scandir(fd) as it:
        return [(d.name.encode(_FS_ENCODING, "surrogateescape"), d) for d in it]


def _skipped(report: ScanReport, rel: bytes, exc: OSError, what: str) -> bool:
    """Count and warn about an entry that vanished or could not be examined (``what``: the
    failed step); True when it is still there (unreadable), False when it vanished."""
    if isinstance(exc, FileNotFoundError):
        report.vanished += 1
        report.warn(f"vanished during the scan: {display(rel)}")
        return False
    report.unreadable += 1
    report.warn(f"cannot {what} {display(rel)}: {exc.strerror}")
    return True


def _unlistable(
    rel_dir: bytes,
    rules: ignore.Rules,
    exc: OSError,
    found: FoundSink,
    dir_index: dict[bytes, int],
    report: ScanReport,
    listings: Listings | None,
) -> None:
    """Record why a directory could not be opened or listed (it is not an empty directory)."""
    dir_index[rel_dir] = -1
    if isinstance(exc, FileNotFoundError):
        report.vanished += 1
        report.warn(f"directory vanished during the scan: {display(rel_dir)}")
    elif isinstance(exc, NotADirectoryError) or exc.errno == errno.ELOOP:
        report.vanished += 1
        report.warn(f"directory replaced during the scan: {display(rel_dir)}")
    else:
        report.unreadable += 1
        report.warn(f"cannot list {display(rel_dir)}: {exc.strerror}")
        found.append(Found(rel_dir, UNREADABLE, None))
        _mark_parents(dir_index, rel_dir)
        if listings is not None:
            listings[rel_dir] = Listing(rules, (), (), UNLISTABLE, (report.warnings[-1],), 0, 0, 1)


def _mark_parents(dir_index: dict[bytes, int], rel: bytes) -> None:
    # Walk up until a directory already marked non-empty: each directory is marked once.
    for parent in iter_parents(rel):
        if dir_index.get(parent):
            return
        dir_index[parent] = 1
