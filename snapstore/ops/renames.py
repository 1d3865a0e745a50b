"""Rename detection (``diff -M``, ``show -M``): pairs of a deleted and an added file that are the
same file moved.

Two passes, like git's: first the pairs whose content id is the same (exact renames, found
from the manifests alone), then the pairs whose contents are similar enough (at least
:data:`THRESHOLD` percent of the larger one shared, counted by lines, git's rule in spirit).
The second pass is bounded: it looks only at added/deleted regular files of at most
:data:`MAX_BYTES` whose sizes are within a factor of each other, and gives up (leaving the
changes as they are) when more than :data:`MAX_CANDIDATES` pairs would have to be compared or
their files hold more than :data:`MAX_TOTAL_BYTES` together, as git does past
``diff.renameLimit``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from snapstore.ops.diff import ADDED, DELETED, Change, Loader
from snapstore.records.manifest import Entry
from snapstore.tree.paths import display, to_json

RENAMED = "R"

#: The least similarity (percent of the larger file's bytes found in the other) of a rename.
THRESHOLD = 50

#: Files larger than this are paired only when their content ids are equal.
MAX_BYTES = 4 << 20

#: The most (deleted, added) pairs whose contents are compared.
MAX_CANDIDATES = 10_000

#: The most bytes read (all candidate files together) by the similarity pass.
MAX_TOTAL_BYTES = 64 << 20


class Renamed(Change):
    """A file moved from ``old_path`` to ``path`` (``similarity`` percent of it unchanged)."""

    __slots__ = ("old_path", "similarity")

    def __init__(
        self,
        status: str,
        path: bytes,
        old: Entry | None,
        new: Entry | None,
        _old_loader: Loader | None = None,
        _new_loader: Loader | None = None,
        *,
        old_path: bytes = b"",
        similarity: int = 100,
    ) -> None:
        super().__init__(status, path, old, new, _old_loader, _new_loader)
        self.old_path = old_path
        self.similarity = similarity

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Renamed)
            and self._key() == other._key()
            and (self.old_path, self.similarity) == (other.old_path, other.similarity)
        )

    def __hash__(self) -> int:
        return hash((self._key(), self.old_path, self.similarity))

    def __repr__(self) -> str:
        return f"Renamed({super().__repr__()}, old_path={self.old_path!r}, similarity={self.similarity})"

    @property
    def display_path(self) -> str:
        return f"{display(self.old_path)} => {display(self.path)}"

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        doc["old_path"] = to_json(self.old_path)
        doc["similarity"] = self.similarity
        return doc


def detect(
    changes: list[Change],
    *,
    threshold: int = THRESHOLD,
    max_candidates: int = MAX_CANDIDATES,
) -> list[Change]:
    """``changes`` with each detected (deleted, added) pair replaced by one Renamed change.

    The result stays sorted by (new) path.  Contents are read through the changes' loaders,
    only for the similarity pass.
    """
    deleted = [c for c in changes if c.status == DELETED and c.old is not None and c.old.is_file]
    added = [c for c in changes if c.status == ADDED and c.new is not None and c.new.is_file]
    if not deleted or not added:
        return changes
    pairs: dict[bytes, tuple[Change, Change, int]] = {}  # added path -> (deleted, added, %)
    used: set[bytes] = set()
    # Exact: the same content id.  Among several candidates prefer the same file name.
    by_ref: dict[bytes, list[Change]] = {}
    for d in deleted:
        assert d.old is not None
        by_ref.setdefault(d.old.ref, []).append(d)
    for a in added:
        assert a.new is not None
        sources = [d for d in by_ref.get(a.new.ref, ()) if d.path not in used]
        if sources:
            best = min(sources, key=lambda d: (_basename(d.path) != _basename(a.path), d.path))
            used.add(best.path)
            pairs[a.path] = (best, a, 100)
    _similar(
        [d for d in deleted if d.path not in used],
        [a for a in added if a.path not in pairs],
        pairs,
        threshold,
        max_candidates,
    )
    if not pairs:
        return changes
    gone = {d.path for d, _, _ in pairs.values()}
    out: list[Change] = []
    for c in changes:
        if c.status == DELETED and c.path in gone:
            continue
        if c.status == ADDED and c.path in pairs:
            d, a, score = pairs[c.path]
            out.append(
                Renamed(
                    RENAMED,
                    a.path,
                    d.old,
                    a.new,
                    d._old_loader,  # the old side's bytes come from where the deleted file's did
                    a._new_loader,
                    old_path=d.path,
                    similarity=score,
                )
            )
        else:
            out.append(c)
    return out


def _similar(
    deleted: list[Change],
    added: list[Change],
    pairs: dict[bytes, tuple[Change, Change, int]],
    threshold: int,
    max_candidates: int,
) -> None:
    """The similarity pass: best-scoring pairs first, each file in at most one pair."""
    candidates: list[tuple[Change, Change]] = []
    for d in deleted:
        assert d.old is not None
        if d.old.size > MAX_BYTES:
            continue
        for a in added:
            assert a.new is not None
            if a.new.size <= MAX_BYTES and _sizes_close(d.old, a.new, threshold):
                candidates.append((d, a))
    if not candidates or len(candidates) > max_candidates:
        return
    files = {(d.path, "old"): d.old.size for d, _ in candidates if d.old is not None}
    files.update({(a.path, "new"): a.new.size for _, a in candidates if a.new is not None})
    if sum(files.values()) > MAX_TOTAL_BYTES:
        return  # bounded memory: every profile is kept until the pairs are chosen
    profiles: dict[tuple[bytes, str], tuple[Counter[bytes], int]] = {}

    def profile(c: Change, side: str) -> tuple[Counter[bytes], int]:
        key = (c.path, side)
        if key not in profiles:
            data = (c.old_bytes() if side == "old" else c.new_bytes()) or b""
            profiles[key] = (Counter(data.splitlines(keepends=True)), len(data))
        return profiles[key]

    scored = []
    for d, a in candidates:
        score = similarity(profile(d, "old"), profile(a, "new"))
        if score >= threshold:
            scored.append((-score, d.path, a.path, d, a))
    scored.sort(key=lambda t: t[:3])
    taken: set[bytes] = set()
    for neg, _, _, d, a in scored:
        if d.path in taken or a.path in pairs:
            continue
        taken.add(d.path)
        pairs[a.path] = (d, a, -neg)


def similarity(a: tuple[Counter[bytes], int], b: tuple[Counter[bytes], int]) -> int:
    """Percent of the larger content found in the other, counted in bytes of whole lines."""
    (lines_a, size_a), (lines_b, size_b) = a, b
    largest = max(size_a, size_b)
    if largest == 0:
        return 100
    small, large = (lines_a, lines_b) if len(lines_a) <= len(lines_b) else (lines_b, lines_a)
    shared = sum(min(n, large[line]) * len(line) for line, n in small.items() if line in large)
    return shared * 100 // largest


def _sizes_close(old: Entry, new: Entry, threshold: int) -> bool:
    """Sizes so different that the score cannot reach ``threshold`` are never compared."""
    small, large = sorted((old.size, new.size))
    return large == 0 or small * 100 >= large * threshold


def _basename(path: bytes) -> bytes:
    return path.rpartition(b"/")[2]
