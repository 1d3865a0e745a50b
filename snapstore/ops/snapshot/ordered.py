"""The snapshot's entries in path order, and the files and bytes they hold, kept across a
watching Store's snapshots: O(changed) instead of a sort and a sum over every file.

After a snapshot, the context keeps the ordered list it built (with its paths and totals)
beside the manifest memo's entries dict.  The next snapshot whose inputs were patched from that
very dict (``Inputs.base is memo.entries``) and say which paths may differ (``touched``) edits a
copy of the list in those places only (a bisect each, a C-level insert or delete); any other
snapshot sorts afresh.  tests/test_snapshot_ordered.py checks both against each other.
"""

from __future__ import annotations

from bisect import bisect_left

from snapstore.records.manifest import EXEC, Entry


class Ordered:
    """Entries in path order, their paths, and the count and total size of the files."""

    __slots__ = ("entries", "paths", "files", "size", "same", "span")

    def __init__(
        self,
        entries: list[Entry],
        paths: list[bytes],
        files: int,
        size: int,
        same: bool | None = None,
        span: tuple[list[Entry], list[tuple[int, int, int, int]]] | None = None,
    ) -> None:
        self.entries, self.paths, self.files, self.size = entries, paths, files, size
        #: Whether the entries are those of the kept order's dict (known only when patched:
        #: then nobody need compare the two dicts); None when not known.
        self.same = same
        #: When patched: ``(the kept entries list, runs)``, each run ``(old_lo, old_hi,
        #: new_lo, new_hi)`` a range of that list replaced by one of this list, in order, and
        #: every entry outside them the same object in both (the manifest codec then compares
        #: nothing and re-cuts each run on its own).
        self.span = span


def order(
    kept: Ordered | None,
    kept_of: dict[bytes, Entry] | None,
    entries: dict[bytes, Entry],
    touched: set[bytes] | None,
    base: dict[bytes, Entry] | None,
) -> Ordered:
    """``entries`` in path order: ``kept`` (the order of the dict ``kept_of``) edited at
    ``touched`` when ``entries`` were patched from that very dict (``base``), else sorted."""
    if kept is not None and touched is not None and base is not None and base is kept_of:
        if not touched:  # (the usual checkpoint: nothing to edit, nothing to copy)
            return Ordered(kept.entries, kept.paths, kept.files, kept.size, True, (kept.entries, []))
        return _patched(kept, entries, touched)
    return full(entries)


def full(entries: dict[bytes, Entry]) -> Ordered:
    paths = sorted(entries)
    ordered = [entries[p] for p in paths]
    sizes = [e[3] for e in ordered if e[1] <= EXEC]  # files (FILE, EXEC): one pass, no property calls
    return Ordered(ordered, paths, len(sizes), sum(sizes))


def _patched(kept: Ordered, entries: dict[bytes, Entry], touched: set[bytes]) -> Ordered:
    ordered, paths = list(kept.entries), list(kept.paths)  # (the kept lists stay as they were)
    files, size = kept.files, kept.size
    same = True
    runs: list[tuple[int, int, int, int]] = []
    delta = 0  # (entries inserted minus deleted so far: i - delta is the kept list's index)
    for path in sorted(touched):
        i = bisect_left(paths, path)
        old = ordered[i] if i < len(paths) and paths[i] == path else None
        new = entries.get(path)
        if old is not None and old[1] <= EXEC:
            files, size = files - 1, size - old[3]
        if new is not None and new[1] <= EXEC:
            files, size = files + 1, size + new[3]
        if old != new:
            same = False
            olo, ohi, nhi = i - delta, i - delta + (old is not None), i + (new is not None)
            if runs and runs[-1][1] == olo:  # (adjacent to the last run: one run)
                runs[-1] = (runs[-1][0], ohi, runs[-1][2], nhi)
            else:
                runs.append((olo, ohi, i, nhi))
            delta += (new is not None) - (old is not None)
        if old is not None and new is not None:
            ordered[i] = new
        elif old is not None:
            del ordered[i], paths[i]
        elif new is not None:
            ordered.insert(i, new)
            paths.insert(i, path)
    return Ordered(ordered, paths, files, size, same, (kept.entries, runs))
