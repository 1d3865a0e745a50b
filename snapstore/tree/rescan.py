"""Patching what a walk found with what a watcher says changed, instead of walking again.

A watching Store keeps, from its last walk, every path found (``found``) and every directory's
:class:`~snapstore.tree.scan.Listing`.  Given the watcher's :class:`~snapstore.tree.watcher.Changes`,
:func:`apply` brings both up to date by doing only what those changes call for, with the walk's
own per-directory logic (:func:`snapstore.tree.scan.scan_dir`), so the result is what a whole
walk would find now:

* a directory whose listing changed has the entries the events name in it lstat-ed and judged
  by its kept rules, without listing it (what a checkout or an editor's save does: files
  created, replaced, deleted); when that cannot say what a walk would (a subdirectory came or
  went, the directory became or ceased to be empty, a warning a walk would give) it is listed
  again (non-recursively): entries that are gone are removed (a subdirectory with everything
  below it), new ones recorded, and a new subdirectory walked completely
  (:func:`snapstore.tree.scan.walk_below`);
* a directory the watcher saw appear (a subtree) is forgotten and walked completely;
* a file whose content or metadata changed is lstat-ed again; any other changed path (a
  symlink, an empty directory, something that changed type) has its directory listed again;
* a blind directory (no watch on it or below it: ``ChangeHints.blind``) is walked completely, as
  a new subtree is, at every snapshot until the watcher can watch it.

Files found with more than one hard link are reported (``Patch.links``): the caller re-stats
them at every snapshot, since a write through another link names only that link.

The rules in force in each directory are kept in its listing.  When an ignore file is among
the changed paths those rules may be stale, so :func:`apply` gives up (None) and the caller
walks the whole tree; so it does on anything doubtful (a path gone whose directory is not
listed again, something vanishing while it is listed).  Emptiness is a directory's own
property (a walked directory is recorded as DIR iff it records nothing itself and has no walked
subdirectory), which is what makes a directory's re-listing local.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, MutableMapping
from typing import NamedTuple, Protocol

from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK
from snapstore.tree import ignore, scan
from snapstore.tree.paths import DIR_FLAGS, iter_parents, open_beneath


class ChangeHints(Protocol):
    """What :func:`apply` reads of the watcher's changes (tree.watcher.Changes)."""

    dirs: set[bytes]
    subtrees: set[bytes]
    paths: set[bytes]
    blind: set[bytes]


class Patch(NamedTuple):
    """What :func:`apply` changed: paths no longer found (some may be found again, as another
    kind) and what was found anew or again (its entry must be derived again)."""

    removed: list[bytes]
    updated: list[scan.Found]
    #: Directories listed again and subtrees walked (for the report and the tests).
    listed: int
    #: The files examined (listed again, walked or lstat-ed) that have more than one link.
    links: set[bytes]


def parent_of(rel: bytes) -> bytes:
    """The root-relative directory holding ``rel`` (b"" at the top)."""
    cut = rel.rfind(b"/")
    return rel[:cut] if cut > 0 else b""


def touches_rules(paths: Iterable[bytes], subtrees: set[bytes]) -> bool:
    """Is an ignore file among ``paths`` (then the rules kept in the listings may be stale)?

    Not one inside a new subtree: those are walked anew, their ignore files read again.
    """
    for p in paths:
        if p.rpartition(b"/")[2] in ignore.IGNORE_FILES:
            if not subtrees or not any(a in subtrees for a in iter_parents(p)):
                return True
    return False


def apply(
    root: bytes,
    excluded: frozenset[bytes],
    found: MutableMapping[bytes, scan.Found],
    listings: scan.Listings,
    changes: ChangeHints,
    report: scan.ScanReport,
    watch: Callable[[bytes], None] | None = None,
) -> Patch | None:
    """Patch ``found`` and ``listings`` (in place) with ``changes``; None when only a whole walk
    can say (then both are half patched: the caller replaces them with the walk's).

    ``watch(rel)`` is called before a subtree the watcher did not announce is walked (a
    directory that became listable), so it is watched from then on.
    """
    if touches_rules(changes.paths, changes.subtrees):
        return None
    vanished, links_from = report.vanished, len(report.links)
    # A blind directory is walked as a subtree the watcher announced: it has just retried the
    # watch (Watcher.take), so the walk must not add it again.
    announced = changes.subtrees | changes.blind if changes.blind else changes.subtrees
    p = _Patcher(root, excluded, found, listings, report, watch, announced, changes.paths)
    links: set[bytes] = set()
    relist = set(changes.dirs)
    files: list[bytes] = []
    for path in changes.paths:
        listing = listings.get(path)
        if listing is not None:  # a directory that was walked
            if listing.kind != scan.LISTED:
                p.fresh.add(path)  # unlistable or a store: it may be neither now
            elif path in found:  # an empty directory: its recorded mode and mtime
                relist.add(path)
            continue
        known = found.get(path)
        if known is None:
            continue  # ignored or left out (a new entry would have changed its directory)
        if known.kind in (FILE, EXEC):
            files.append(path)
        else:  # a symlink or unreadable entry: its directory says what it is now
            relist.add(parent_of(path))
    named_in = _children(changes.paths, relist)
    for target in sorted(relist | p.fresh):  # a directory before anything below it
        if p.covered(target):
            continue
        listing = listings.get(target)
        if listing is None:
            continue  # not walked: ignored, left out, another store's, or gone with its parent
        if target in p.fresh or listing.kind != scan.LISTED:
            p.rewalk(target, _parent_rules(listings, target))
        elif not p.by_names(target, listing, named_in.get(target, [])) and not p.relist(target, listing):
            return None
    for path in files:
        parent = parent_of(path)
        if parent in relist or p.covered(path) or found.get(path) is None:
            continue  # listed again (or removed) above
        try:
            st = os.lstat(root + b"/" + path)
        except OSError:
            return None  # gone without its directory's event (still queued?): walk
        if st.st_mode & 0o170000 != 0o100000:
            return None
        f = scan.Found(path, EXEC if st.st_mode & 0o100 else FILE, scan.compact(st), b"")
        found[path] = f
        p.updated.append(f)
        if st.st_nlink > 1:
            links.add(path)
    if report.vanished != vanished:
        return None  # something moved while it was listed: the whole walk decides
    links.update(report.links[links_from:])
    return Patch(p.removed, p.updated, p.listed, links)


def _children(paths: Iterable[bytes], dirs: set[bytes]) -> dict[bytes, list[bytes]]:
    """The paths of ``paths`` directly in one of ``dirs``, by directory."""
    out: dict[bytes, list[bytes]] = {}
    for path in paths:
        parent = parent_of(path)
        if parent in dirs:
            out.setdefault(parent, []).append(path)
    return out


def _parent_rules(listings: scan.Listings, rel: bytes) -> ignore.Rules:
    parent = listings.get(parent_of(rel))
    return parent.rules if parent is not None else ignore.NO_RULES


class _Patcher:
    """The state of one :func:`apply`: what it removed and found, which subtrees it walked."""

    def __init__(
        self,
        root: bytes,
        excluded: frozenset[bytes],
        found: MutableMapping[bytes, scan.Found],
        listings: scan.Listings,
        report: scan.ScanReport,
        watch: Callable[[bytes], None] | None,
        announced: set[bytes],
        named: set[bytes],
    ):
        self.root, self.excluded, self.found, self.listings = root, excluded, found, listings
        self.report, self.watch, self.announced = report, watch, announced
        self.named = named  # the paths the events name
        self.fresh = set(announced)  # subtrees to walk anew
        self.walked: set[bytes] = set()  # subtrees walked anew by this patch
        self.removed: list[bytes] = []
        self.updated: list[scan.Found] = []
        self.listed = 0

    def covered(self, rel: bytes) -> bool:
        """Was ``rel`` walked anew (itself or a directory above it)?"""
        if not self.walked:
            return False
        if b"" in self.walked:  # the root walked anew (a blind root)
            return True
        return rel in self.walked or any(a in self.walked for a in iter_parents(rel))

    def drop(self, top: bytes) -> None:
        """Forget ``top`` and everything below it."""
        found, removed = self.found, self.removed
        stack = [top]
        while stack:
            rel = stack.pop()
            if found.pop(rel, None) is not None:  # its DIR or UNREADABLE entry
                removed.append(rel)
            listing = self.listings.pop(rel, None)
            if listing is None:
                continue
            for name in listing.names:
                if found.pop(name, None) is not None:
                    removed.append(name)
            stack.extend(listing.subdirs)

    def rewalk(self, top: bytes, rules: ignore.Rules) -> None:
        """Forget ``top`` and walk it again, as a whole walk would find it."""
        self.drop(top)
        if self.watch is not None and top not in self.announced:
            self.watch(top)  # watch first, then list: nothing created in between is missed
        self.listed += 1
        if top:
            got = scan.walk_below(self.root, top, rules, self.excluded, self.report, self.listings)
        else:
            got = scan.walk(self.root, self.excluded, self.report, self.listings)
        for f in got:
            self.found[f.path] = f
        self.updated.extend(got)
        self.walked.add(top)

    def by_names(self, rel: bytes, old: scan.Listing, named: list[bytes]) -> bool:
        """Patch the listing of ``rel`` from the entries the events name in it, without listing
        it again; False (nothing changed) when only a listing can say what a walk would report.

        Every name that came or went in a watched directory is named by an event, so the
        entries no event names are as they were.  This handles what a checkout or an editor's
        save does (files written, replaced, created, deleted): the named entries are lstat-ed
        and judged by the walk's rules.  Anything that would change more than the listing's
        file names (a subdirectory gained or lost, the directory becoming or ceasing to be
        empty, a warning a walk would give: special, unreadable or set-id entries, an entry
        that vanishes meanwhile) or that a listing decides (store markers) is left to
        :meth:`relist`, as is a directory whose listing gave warnings besides its rules'."""
        if (
            rel in self.found or old.notes is None or len(old.notes) != old.rule_notes
            or old.special or old.unreadable or not (old.names or old.subdirs)
        ):  # fmt: skip
            return False
        looked = _look(self.root, rel, old, named, self.excluded)
        if looked is None:
            return False
        now, links = looked
        names = [n for n in old.names if n not in now]
        names.extend([n for n, f in now.items() if f is not None])
        if not names and not old.subdirs:
            return False  # empty now, or holding only what it ignores: a listing says which
        found = self.found
        for path, f in now.items():
            if f is not None:
                found[path] = f
                self.updated.append(f)
            elif found.pop(path, None) is not None:
                self.removed.append(path)
        self.report.links.extend(links)
        self.listings[rel] = old._replace(names=tuple(names))
        return True

    def relist(self, rel: bytes, old: scan.Listing) -> bool:
        """List the walked directory ``rel`` again; False when only a whole walk can say."""
        found = self.found
        self.listed += 1
        entries: list[scan.Found] = []
        since = scan.mark(self.report)
        try:
            fd = scan._open_dir(self.root) if not rel else open_beneath(self.root, rel, DIR_FLAGS)
        except OSError:
            return False  # gone, or replaced, without its parent being listed again
        try:
            dir_st = scan.compact(os.fstat(fd))
            scanned = scan.scan_dir(
                fd, rel, ignore.NO_RULES, self.excluded, self.report, entries, old.rules, found, self.named
            )  # fmt: skip
        except OSError:
            return False
        finally:
            os.close(fd)
        if scanned is None:  # it became another project's store
            self.rewalk(rel, _parent_rules(self.listings, rel))
            return True
        notes, special, unreadable = scan.notes_since(self.report, since)  # (its own, not its subtrees')
        if notes is not None and old.notes is not None:  # (its ignore files were not read again)
            notes = old.notes[: old.rule_notes] + notes
        else:
            notes = None
        order = tuple([d for d, _ in scanned.subdirs])  # (a walk's order, for its warnings')
        now = {d for d, _ in scanned.subdirs}
        for sub in old.subdirs:
            if sub not in now:
                self.drop(sub)
        names = {f.path for f in entries}
        for name in old.names:
            if name not in names and found.pop(name, None) is not None:
                self.removed.append(name)
        named = self.named
        for f in entries:
            # An entry is derived from what was found (and the stat cache): one found as before
            # keeps its entry, unless an event names it (a rewrite the stat cannot show).
            if found.get(f.path) != f or f.path in named:
                found[f.path] = f
                self.updated.append(f)
        before = set(old.subdirs)
        for sub, _ in scanned.subdirs:
            if sub not in before or sub in self.fresh:
                self.rewalk(sub, scanned.rules)
        self.listings[rel] = scan.Listing(
            scanned.rules, tuple(names), order, scan.LISTED, notes, old.rule_notes, special, unreadable
        )
        if rel and not scanned.recorded and not now:  # empty: recorded as DIR (a walk's rule)
            f = scan.Found(rel, DIR, dir_st)
            if found.get(rel) != f:
                found[rel] = f
                self.updated.append(f)
        elif found.pop(rel, None) is not None:
            self.removed.append(rel)
        return True


def _look(
    root: bytes, rel: bytes, old: scan.Listing, named: list[bytes], excluded: frozenset[bytes]
) -> tuple[dict[bytes, scan.Found | None], list[bytes]] | None:
    """What a walk would record now of each of ``named`` (entries of the directory ``rel``;
    None: nothing), and which of them have more than one link; None when a listing must say
    (see :meth:`_Patcher.by_names`)."""
    now: dict[bytes, scan.Found | None] = {}
    links: list[bytes] = []
    subdirs = set(old.subdirs)
    for path in named:
        name = path.rpartition(b"/")[2]
        if not name or name in scan.STORE_MARKERS:
            return None  # (whether the directory is a store: its whole listing says)
        if name in scan.ALWAYS_EXCLUDED or path in excluded:
            continue
        try:
            st = os.lstat(root + b"/" + path)
        except FileNotFoundError:
            if path in subdirs:
                return None
            now[path] = None
            continue
        except OSError:
            return None
        mode = st.st_mode
        kind = mode & 0o170000
        if kind == 0o040000:  # a directory: only one walked before and still there is as it was
            if path in subdirs:
                continue
            if not (old.rules and ignore.is_ignored(old.rules, path, True)):
                return None  # a new subdirectory (a walk's order of them: a listing says)
            now[path] = None
            continue
        if path in subdirs or mode & 0o7000 or kind not in (0o100000, 0o120000):
            return None
        if old.rules and ignore.is_ignored(old.rules, path, False):
            now[path] = None
            continue
        if kind == 0o120000:
            try:
                target = os.readlink(root + b"/" + path)
            except OSError:
                return None
            now[path] = scan.Found(path, SYMLINK, scan.compact(st), target)
            continue
        if st.st_nlink > 1:
            links.append(path)
        now[path] = scan.Found(path, EXEC if mode & 0o100 else FILE, scan.compact(st), b"")
    return now, links
