"""Selective revert: take back what some checkpoints changed, keep what happened since.

A *step* is one change to take back: the entries of the paths it changed before it (``a``) and
after it (``b``).  Steps are applied newest first onto the tree as it is now (``ours``), path by
path, so reverting several non-adjacent changes (every tool call of the agent in a session) is a
composition of single reverts.  For each path:

==========================================  ==============================================
the tree now ...                            result
==========================================  ==============================================
equals ``b`` (untouched since)              goes back to ``a`` (a file added is removed,
                                            a file removed comes back)
equals ``a`` (already back)                 left alone ("untouched")
differs, all three are text files           three-way merge (ours over base b with theirs
                                            a): merged, or a conflict
differs otherwise (binary, a kind change,   a conflict
removed and re-created differently, ...)
==========================================  ==============================================

Permission bits follow the same rule on their own: changed back when the tree's mode is the
step's ``b`` mode.  A path the step renamed (same content id, removed at X and added at Y) is
followed: the content found at Y goes back to X.  Nothing here touches the tree or the store:
the plan is a list of :class:`PathOutcome`, which the Store turns into a restore (journaled,
atomic per file, safety checkpoint first, undoable).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from snapstore.ops.merge import Conflict, Prefer, is_binary, merge
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, Entry
from snapstore.storage.objects import chunk_id
from snapstore.tree.paths import display, parents

Status = Literal["reverted", "merged", "conflict", "untouched"]
#: How one path's conflicts are settled: keep the tree's lines, take the old ones, or markers.
Choice = Literal["ours", "theirs", "markers"]
CHOICES: tuple[Choice, ...] = ("ours", "theirs", "markers")
PERM = 0o777
#: The conflict of a path that cannot be merged line by line (binary, a type change, ...);
#: line 0 never occurs in a merge's conflicts (1-based).
WHOLE_FILE = Conflict(0, 0)
#: Larger files are not merged line by line (memory: three versions and their lines).
MAX_MERGE_BYTES = 16 << 20


@dataclass(frozen=True)
class RevertStep:
    """One change to take back: the changed paths' entries before (``a``) and after (``b``)."""

    label: str
    a: dict[bytes, Entry]
    b: dict[bytes, Entry]


@dataclass
class State:
    """What a path holds while steps are applied: an entry and, for a new content, its bytes."""

    entry: Entry | None
    data: bytes | None = None


@dataclass
class PathOutcome:
    """What the revert does to one path."""

    path: bytes
    status: Status
    #: The path's final entry (None: removed) and, for merged or re-created content, the bytes.
    final: State
    conflicts: list[Conflict] = field(default_factory=list)
    note: str = ""


def _perm(e: Entry) -> int:
    return e.mode & PERM


def same(x: Entry | None, y: Entry | None) -> bool:
    """Equal for a revert: kind, content and permission bits (times do not matter)."""
    if x is None or y is None:
        return x is y
    if x.kind != y.kind or x.ref != y.ref:
        return False
    return x.kind == SYMLINK or _perm(x) == _perm(y) or not (x.mode and y.mode)


def _with_content(e: Entry, data: bytes, mode: int) -> Entry:
    kind = EXEC if mode & 0o100 else FILE
    # Keep the file type bits when the tree's entry has them: without them the mode is an
    # old-style "informational" one (manifest.exact_mode) and restore would apply only the
    # exec bit, losing e.g. a 0o600 the user set.
    full = (e.mode & ~PERM) | mode if e.mode & 0o170000 else mode
    return Entry(e.path, kind, full, len(data), e.mtime_ns, chunk_id(data))


class Planner:
    """Applies steps newest first to the current tree's entries and records each path's fate."""

    def __init__(
        self,
        current: dict[bytes, Entry],
        read: Callable[[Entry], bytes],
        *,
        prefer: Prefer = None,
        markers: bool = False,
        choices: dict[bytes, Choice] | None = None,
        unknown: frozenset[bytes] = frozenset(),
    ):
        self._read = read
        self._default_prefer = prefer
        self._default_markers = markers
        #: A way to settle each path's conflicts chosen on its own (the UI's per-file choice).
        self._choices = choices or {}
        #: Paths that changes of unknown origin, left alone, changed too: with no side chosen,
        #: their conflicts keep the tree's side (taking it back would take the unknown change too).
        self._unknown = unknown
        self._path = b""
        self.state: dict[bytes, State] = {}
        self._current = current
        self.outcomes: dict[bytes, PathOutcome] = {}

    @property
    def _prefer(self) -> Prefer:
        """The side that settles conflicts in the path being planned (its choice, else the default)."""
        chosen = self._choices.get(self._path)
        if chosen is None:
            return "ours" if self._left_to_unknown else self._default_prefer
        return None if chosen == "markers" else chosen

    @property
    def _markers(self) -> bool:
        chosen = self._choices.get(self._path)
        if chosen is None:
            return self._default_markers and not self._left_to_unknown
        return chosen == "markers"

    @property
    def _left_to_unknown(self) -> bool:
        """The path being planned keeps the tree's side for an unknown change (no side chosen)."""
        return self._path in self._unknown and self._default_prefer is None and self._path not in self._choices

    @property
    def _kept(self) -> str:
        """Why a conflicting side was kept, for the outcome's note."""
        return "kept: a change of unknown origin, left alone, changed it too" if self._left_to_unknown else "--ours: kept"

    def _ours(self, path: bytes) -> State:
        if path not in self.state:
            self.state[path] = State(self._current.get(path))
        return self.state[path]

    def _bytes(self, s: State) -> bytes:
        assert s.entry is not None
        return s.data if s.data is not None else self._read(s.entry)

    def apply(self, step: RevertStep) -> None:
        """Take back ``step`` on top of what earlier (newer) steps left."""
        renames = _renames(step)
        for path in sorted(set(step.a) | set(step.b)):
            if path in renames.values():
                continue  # handled with its source below
            a, b = step.a.get(path), step.b.get(path)
            moved_to = renames.get(path)
            if moved_to is not None:
                self._revert_rename(path, moved_to, step)
                continue
            self._revert_path(path, a, b, self._ours(path))

    def _record(self, path: bytes, status: Status, final: State, conflicts: list[Conflict] | None = None, note: str = "") -> None:
        self.state[path] = final
        previous = self.outcomes.get(path)
        if previous is not None and previous.status == "conflict" and status != "conflict":
            status, conflicts = "conflict", previous.conflicts + (conflicts or [])
        self.outcomes[path] = PathOutcome(path, status, final, conflicts or [], note)

    def _revert_path(self, path: bytes, a: Entry | None, b: Entry | None, ours: State) -> None:
        self._path = path
        o = ours.entry
        if same(o, b):
            self._record(path, "reverted", State(a))
            return
        if same(o, a):
            self._record(path, "untouched", ours, note="already as before the change")
            return
        if o is not None and a is not None and b is not None and o.is_file and a.is_file and b.is_file:
            self._merge(path, a, b, ours)
            return
        why = _conflict_reason(o, a, b)
        if self._prefer == "theirs":
            self._record(path, "reverted", State(a), note=why + "; --theirs: taken back anyway")
        elif self._prefer == "ours":
            self._record(path, "untouched", ours, note=f"{why}; {self._kept}")
        else:
            self._record(path, "conflict", ours, [WHOLE_FILE], note=why)

    def _merge(self, path: bytes, a: Entry, b: Entry, ours: State) -> None:
        assert ours.entry is not None
        o = ours.entry
        mode = _perm(a) if _perm(o) == _perm(b) else _perm(o)
        if max(a.size, b.size, o.size) > MAX_MERGE_BYTES:
            # Three versions and their line lists of a huge file would take gigabytes: such a
            # file is settled as a whole, like a binary one.
            self._whole_file(path, a, ours, f"larger than {MAX_MERGE_BYTES >> 20} MiB: not merged line by line")
            return
        base, mine, theirs = self._read(b), self._bytes(ours), self._read(a)
        if is_binary(base) or is_binary(mine) or is_binary(theirs):
            if self._prefer == "theirs":
                self._record(path, "reverted", State(a), note="binary; --theirs: taken back")
            elif self._prefer == "ours":
                self._record(path, "untouched", ours, note=f"binary; {self._kept}")
            else:
                self._record(path, "conflict", ours, [WHOLE_FILE], note="binary file changed since")
            return
        result = merge(base, mine, theirs, prefer=self._prefer)
        if result.conflicts and result.markers and not self._markers:
            self._record(path, "conflict", ours, result.conflicts, note="both changed the same lines")
            return
        if result.data == mine and mode == _perm(o):
            # Nothing to take back in this file (the change is already undone, or --ours kept
            # every conflicting line): say so rather than "merged".
            kept = self._kept if self._left_to_unknown else "kept as it is"
            self._record(path, "untouched", ours, result.conflicts, kept if result.conflicts else "nothing left to take back")
            return
        final = State(_with_content(o, result.data, mode), result.data)
        status: Status = "conflict" if result.markers else "merged"
        note = "conflict markers written" if result.markers else ""
        self._record(path, status, final, result.conflicts, note)

    def _whole_file(self, path: bytes, a: Entry, ours: State, why: str) -> None:
        if self._prefer == "theirs":
            self._record(path, "reverted", State(a), note=why + "; --theirs: taken back")
        elif self._prefer == "ours":
            self._record(path, "untouched", ours, note=f"{why}; {self._kept}")
        else:
            self._record(path, "conflict", ours, [WHOLE_FILE], note=why + " and changed since")

    def _revert_rename(self, src: bytes, dst: bytes, step: RevertStep) -> None:
        # The step moved src to dst (same content id). Take back whatever dst holds now.
        a, b = step.a[src], step.b[dst]
        ours_dst = self._ours(dst)
        if self._ours(src).entry is not None:
            # src was re-created since: treat both paths on their own.
            self._revert_path(src, a, None, self._ours(src))
            self._revert_path(dst, None, b, ours_dst)
            return
        if ours_dst.entry is None:
            self._record(src, "untouched", State(None), note=f"renamed to {dst!r} and removed since")
            return
        moved = Entry(src, *ours_dst.entry[1:])
        self._revert_path(src, a, Entry(src, *b[1:]), State(moved, ours_dst.data))
        if self.outcomes[src].status != "conflict":
            self._record(dst, "reverted", State(None), note="rename taken back")

    def result(self) -> list[PathOutcome]:
        return [self.outcomes[p] for p in sorted(self.outcomes)]


def _renames(step: RevertStep) -> dict[bytes, bytes]:
    """src -> dst for paths the step removed at src and added at dst with the same content."""
    removed = {e.ref: p for p, e in step.a.items() if p not in step.b and e.is_file}
    out = {}
    for p, e in step.b.items():
        if p in step.a or not e.is_file:
            continue
        src = removed.pop(e.ref, None)
        if src is not None:
            out[src] = p
    return out


def _conflict_reason(o: Entry | None, a: Entry | None, b: Entry | None) -> str:
    if o is None:
        return "removed since the change"
    if b is None:
        return "added by the change and edited since"
    if a is None:
        return "changed since the change added it"
    if o.kind != b.kind:
        return "its type changed since"
    return "changed since"


def step_between(label: str, old: dict[bytes, Entry], new: dict[bytes, Entry], selected: Callable[[bytes], bool]) -> RevertStep:
    """The step that took ``old`` to ``new`` (entries of two manifests, possibly just the parts
    that differ), restricted to the selected paths that really changed (times do not count)."""
    a: dict[bytes, Entry] = {}
    b: dict[bytes, Entry] = {}
    for path in old.keys() | new.keys():
        x, y = old.get(path), new.get(path)
        if not selected(path) or same(x, y):
            continue
        if x is not None:
            a[path] = x
        if y is not None:
            b[path] = y
    return RevertStep(label, a, b)


def plan(
    steps: list[RevertStep],
    current: dict[bytes, Entry],
    read: Callable[[Entry], bytes],
    *,
    prefer: Prefer = None,
    markers: bool = False,
    choices: dict[bytes, Choice] | None = None,
    unknown: frozenset[bytes] = frozenset(),
) -> list[PathOutcome]:
    """Each touched path's outcome after taking back ``steps`` (oldest first) from ``current``;
    ``choices`` settles some paths' conflicts their own way (else ``prefer``/``markers``); with
    neither side preferred, a conflict in a path of ``unknown`` (changed by a change of unknown
    origin that is left alone) keeps the tree's side."""
    planner = Planner(current, read, prefer=prefer, markers=markers, choices=choices, unknown=unknown)
    for step in reversed(steps):
        planner.apply(step)
    return settle_clashes(planner.result(), current)


def settle_clashes(outcomes: list[PathOutcome], current: dict[bytes, Entry]) -> list[PathOutcome]:
    """Make conflicts of outcomes that would put a path below a file or symlink (a file taken
    back where the tree now has a directory of files, or the reverse).

    Each path is decided on its own, so taking a file back can collide with files created below
    that name since; no side (not even --theirs) may settle that by deleting the other's files.
    The tree as it is never clashes, so keeping the colliding paths as they are always ends.
    """
    by_path = {o.path: o for o in outcomes}
    while True:
        final = dict(current)
        for o in outcomes:
            if o.final.entry is None:
                final.pop(o.path, None)
            else:
                final[o.path] = o.final.entry
        clashes = _clashes(final, [o.path for o in outcomes if not same(o.final.entry, current.get(o.path))])
        if not clashes:
            return outcomes
        for path, other in clashes:
            for p in (path, other):
                was = by_path.get(p)
                if was is not None and not same(was.final.entry, current.get(p)):
                    by_path[p] = PathOutcome(
                        p, "conflict", State(current.get(p)), [WHOLE_FILE],
                        _clash_note(p, path, other),
                    )
        outcomes = [by_path[o.path] for o in outcomes]


def _clash_note(p: bytes, below: bytes, above: bytes) -> str:
    if p == below:
        return f"the tree has {display(above)} as a file or symlink now: this path cannot come back below it"
    return f"the tree has {display(below)} below this path now: it cannot become a file or symlink"


def _clashes(final: dict[bytes, Entry], changed: list[bytes]) -> list[tuple[bytes, bytes]]:
    """(path, ancestor) pairs of ``final`` where the ancestor is not a directory, among those
    involving a ``changed`` path (the rest of the tree is consistent)."""
    out: list[tuple[bytes, bytes]] = []
    keys: list[bytes] | None = None
    for p in changed:
        for d in parents(p):
            e = final.get(d)
            if e is not None and e.kind != DIR:
                out.append((p, d))
        e = final.get(p)
        if e is not None and e.kind != DIR:
            if keys is None:
                keys = sorted(final)
            prefix = p + b"/"
            i = bisect_left(keys, prefix)
            if i < len(keys) and keys[i].startswith(prefix):
                out.append((keys[i], p))
    return out
