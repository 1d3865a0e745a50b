"""Line-level views of a change: ``--stat`` counts and ``-p`` unified diffs, binary-aware.

Lines are matched with the patience algorithm (the ``patiencediff`` package), falling back to
difflib's matcher inside each region patience leaves unmatched, as git's ``--patience`` falls
back to Myers: on 690 real file pairs (the Python standard library, 3.10 -> 3.11 -> 3.12 ->
3.13) the counts equal ``git diff --numstat --patience`` for 662 (96%) and git's default
(Myers) for 635 (92%); difflib alone agreed with git's default for 571 (83%).  The remaining
differences are equally long alternative alignments (git's heuristics pick another).  Without
``patiencediff`` installed, difflib alone is used.

Files larger than :data:`MAX_COUNT_BYTES` on either side are not read at all: their lines are
not counted (the result says so) and a patch names them only.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from typing import Any, Literal, NamedTuple, TypeVar

from snapstore.ops.diff import Change
from snapstore.ops.renames import Renamed
from snapstore.units import human_size

T = TypeVar("T")

BINARY_SNIFF = 8000

#: Larger contents (either side) are not loaded for line counts or patches.
MAX_COUNT_BYTES = 16 << 20

Opcode = tuple[Literal["replace", "delete", "insert", "equal"], int, int, int, int]


class LineCounts(NamedTuple):
    """Lines added and removed by one change; ``not_counted`` is the size (bytes, the larger
    side) of a change too large to count, 0 when counted."""

    added: int
    removed: int
    binary: bool
    not_counted: int = 0

    @property
    def note(self) -> str:
        """What ``--stat`` shows instead of counts: ``Bin``, ``(not counted: 768.0 MiB)``."""
        if self.not_counted:
            return f"(not counted: {human_size(self.not_counted)})"
        return "Bin" if self.binary else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "removed": self.removed,
            "binary": self.binary,
            "not_counted": self.not_counted or None,
        }


def common_ends(a: Sequence[T], b: Sequence[T]) -> tuple[int, int]:
    """How many items ``a`` and ``b`` share at the start and (after that) at the end."""
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    return head, tail


#: Bytes compared per step when looking for the common ends of two files.
_BLOCK = 1 << 14


def _common_prefix(a: bytes, b: memoryview, n: int) -> int:
    """How many leading bytes ``a`` and ``b`` share, looking at most ``n`` (``startswith`` of a
    view: memcmp, no copy)."""
    head = 0
    while head < n and a.startswith(b[head : min(head + _BLOCK, n)], head):
        head = min(head + _BLOCK, n)
    lo, hi = head, min(n, head + _BLOCK)  # the first differing block: bisect it
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a.startswith(b[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: bytes, b: memoryview, n: int) -> int:
    """How many trailing bytes ``a`` and ``b`` share, looking at most ``n``."""
    la, lb = len(a), len(b)
    tail = 0
    while tail < n and a.endswith(b[lb - min(tail + _BLOCK, n) : lb - tail], 0, la - tail):
        tail = min(tail + _BLOCK, n)
    lo, hi = tail, min(n, tail + _BLOCK)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a.endswith(b[lb - mid : lb - lo], 0, la - lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def changed_lines(old: bytes, new: bytes) -> tuple[list[bytes], list[bytes]]:
    """The lines of ``old`` and ``new`` between the whole lines they share at their start and
    at their end (found as bytes, cut at a newline both sides share): what remains to match.
    Stripping more common lines from the result is :func:`common_ends`' job."""
    view = memoryview(new)
    n = min(len(old), len(new))
    head = old.rfind(b"\n", 0, _common_prefix(old, view, n)) + 1  # a line start on both sides
    tail = _common_suffix(old, view, n - head)
    ta, tb = len(old) - tail, len(new) - tail
    at_line = (ta == head or old[ta - 1 : ta] == b"\n") and (tb == head or new[tb - 1 : tb] == b"\n")
    if not at_line:  # the shared tail starts inside a line: keep from the next shared newline
        nl = old.find(b"\n", ta)
        shift = (nl + 1 - ta) if nl != -1 else tail
        ta, tb = ta + shift, tb + shift
    return old[head:ta].splitlines(keepends=True), new[head:tb].splitlines(keepends=True)


def is_binary(data: bytes | None) -> bool:
    """Git's rule: a NUL byte in the first 8000 bytes makes a file binary."""
    return data is not None and b"\x00" in data[:BINARY_SNIFF]


def too_large(change: Change) -> int:
    """The larger side's size when a change is too large to diff by lines, else 0."""
    sizes = [e.size for e in (change.old, change.new) if e is not None and e.is_file]
    largest = max(sizes, default=0)
    return largest if largest > MAX_COUNT_BYTES else 0


def _lines(data: bytes | None) -> list[bytes]:
    return data.splitlines(keepends=True) if data else []


def count(change: Change) -> LineCounts:
    """The line counts of one change (0, 0 for non-files), reading at most MAX_COUNT_BYTES a
    side."""
    big = too_large(change)
    if big:
        return LineCounts(0, 0, False, big)
    old, new = change.old_bytes(), change.new_bytes()
    if is_binary(old) or is_binary(new):
        return LineCounts(0, 0, True)
    # Agents' edits are local: strip the common head and tail first, as bytes (memcmp) and
    # then as lines, so that only the region that changed is split and matched.
    a, b = changed_lines(old or b"", new or b"")
    head, tail = common_ends(a, b)
    a, b = a[head : len(a) - tail], b[head : len(b) - tail]
    if not a or not b:
        return LineCounts(len(b), len(a), False)
    added = removed = 0
    for tag, i1, i2, j1, j2 in opcodes(a, b):
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return LineCounts(added, removed, False)


def line_counts(change: Change) -> tuple[int, int, bool]:
    """``(added, removed, binary)`` lines for one change (0, 0 for non-files or too large
    ones: :func:`count` tells those apart)."""
    c = count(change)
    return c.added, c.removed, c.binary


def opcodes(a: Sequence[bytes], b: Sequence[bytes]) -> list[Opcode]:
    """difflib-style opcodes turning lines ``a`` into ``b`` (patience, then difflib inside
    each unmatched region)."""
    patience = _patience()
    if patience is None:
        return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    out: list[Opcode] = []
    for op in patience(None, a, b).get_opcodes():
        tag, i1, i2, j1, j2 = op
        if tag != "replace" or (i2 - i1 == 1 and j2 - j1 == 1 and a[i1] != b[j1]):
            # (one line for one other line: difflib could only say "replace" too, and a scattered
            # edit of a long file makes tens of thousands of such regions)
            out.append(op)
            continue
        # No line unique to both sides in this region: patience matched nothing here; the
        # classic matcher still finds the common lines (blank lines, braces).
        inner = difflib.SequenceMatcher(None, a[i1:i2], b[j1:j2], autojunk=False)
        for t, x1, x2, y1, y2 in inner.get_opcodes():
            out.append((t, x1 + i1, x2 + i1, y1 + j1, y2 + j1))
    return out


_PATIENCE: list[Any] = []


def _patience() -> Any:
    """patiencediff's matcher class, imported on first use; None when not installed."""
    if not _PATIENCE:
        try:
            import patiencediff

            _PATIENCE.append(patiencediff.PatienceSequenceMatcher)
        except ImportError:
            _PATIENCE.append(None)
    return _PATIENCE[0]


class _Matcher(difflib.SequenceMatcher[str]):
    """difflib's hunk grouping over our opcodes."""

    def __init__(self, ops: list[Opcode]) -> None:
        super().__init__(None, "", "")
        self._ops = ops

    def get_opcodes(self) -> list[Opcode]:
        return self._ops


def _range(start: int, stop: int) -> bytes:
    """A unified-diff range, as difflib and git write it."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return b"%d" % beginning
    if not length:
        beginning -= 1
    return b"%d,%d" % (beginning, length)


def _hunks(a: list[bytes], b: list[bytes], context: int) -> Iterator[bytes]:
    ops = opcodes(a, b)
    if all(op[0] == "equal" for op in ops):
        return
    for group in _Matcher(ops).get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        yield b"@@ -" + _range(first[1], last[2]) + b" +" + _range(first[3], last[4]) + b" @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (b" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from (b"-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from (b"+" + line for line in b[j1:j2])


def unified(change: Change, context: int = 3) -> bytes:
    """A unified diff of one change, ``a/``/``b/`` prefixed like git's; binary and too large
    files say so; a rename says from where."""
    path = change.path
    old_path = change.old_path if isinstance(change, Renamed) else path
    a_name = b"a/" + old_path if change.old is not None else b"/dev/null"
    b_name = b"b/" + path if change.new is not None else b"/dev/null"
    header = b"diff --snapstore a/" + old_path + b" b/" + path + b"\n"
    if isinstance(change, Renamed):
        header += b"similarity index %d%%\nrename from %s\nrename to %s\n" % (
            change.similarity,
            old_path,
            path,
        )
    big = too_large(change)
    if big:
        size = human_size(big).encode()
        return header + b"Files " + a_name + b" and " + b_name + b" differ (not shown: " + size + b")\n"
    old, new = change.old_bytes(), change.new_bytes()
    if is_binary(old) or is_binary(new):
        return header + b"Binary files " + a_name + b" and " + b_name + b" differ\n"
    if old is None and new is None:
        return header  # a symlink or directory change: the status line says it
    lines = list(_hunks(_lines(old), _lines(new), context))
    if not lines:
        return header
    out = [header, b"--- " + a_name + b"\n", b"+++ " + b_name + b"\n"]
    for line in lines:
        out.append(line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n")
    return b"".join(out)
