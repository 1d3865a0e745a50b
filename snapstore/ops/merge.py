"""Three-way merges of file contents, line by line (diff3 semantics, via ``merge3``).

Used by the selective revert: to take back what a range of checkpoints changed in a file while
keeping what the user changed since, merge ``ours`` (the tree now) with ``theirs`` (the content
before the range) over ``base`` (the content after the range).  Hunks that do not overlap (and are
not adjacent: like git, a change right next to another is a conflict) merge cleanly; any other is a
:class:`Conflict`, never resolved silently.

``merge3`` (PyPI, the Breezy project's diff3 implementation) is used rather than hand-written
code: it is small, well tested and works on byte lines, so encodings and CRLF are untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: How many leading bytes decide "binary" (as git does: a NUL byte in the first 8 KiB).
BINARY_PROBE = 8192

Prefer = Literal["ours", "theirs"] | None


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_PROBE]


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their endings kept (``\\n``, ``\\r\\n`` or a lone ``\\r``), so joining them
    gives the input back byte for byte, a missing final newline included."""
    return data.splitlines(keepends=True)


@dataclass(frozen=True)
class Conflict:
    """One region where both sides changed the same lines (1-based, inclusive, in ``ours``)."""

    first_line: int
    last_line: int

    def describe(self) -> str:
        if self.first_line == 0:
            return "whole file"
        if self.last_line < self.first_line:  # the tree has no lines there (it removed them)
            return f"at line {self.first_line}"
        if self.first_line == self.last_line:
            return f"line {self.first_line}"
        return f"lines {self.first_line}-{self.last_line}"


@dataclass
class MergeResult:
    """The merged bytes, and the conflicts (left as markers, or decided by ``prefer``)."""

    data: bytes
    conflicts: list[Conflict] = field(default_factory=list)
    markers: bool = False


def merge(
    base: bytes,
    ours: bytes,
    theirs: bytes,
    *,
    prefer: Prefer = None,
    labels: tuple[str, str, str] = ("current tree", "before the reverted change", "after it"),
) -> MergeResult:
    """Merge ``theirs``'s difference from ``base`` into ``ours``.

    Conflicting regions are returned as :class:`Conflict` records; the data then holds diff3
    markers (``<<<<<<<`` ours ``|||||||`` base ``=======`` theirs ``>>>>>>>``), unless ``prefer``
    picks a side for every conflict.
    """
    import merge3

    base_l, ours_l, theirs_l = split_lines(base), split_lines(ours), split_lines(theirs)
    m = merge3.Merge3(base_l, ours_l, theirs_l)
    out: list[bytes] = []
    conflicts: list[Conflict] = []
    line = 1  # the line of `ours` the next region starts at
    newline = b"\r\n" if b"\r\n" in ours[:BINARY_PROBE] else b"\n"
    for group in m.merge_groups():
        kind = group[0]
        if kind == "conflict":
            conflict: tuple[str, list[bytes], list[bytes], list[bytes]] = group  # type: ignore[assignment]  # merge3's tuple type does not distinguish the 4-tuple
            base_lines, our_lines, their_lines = list(conflict[1]), list(conflict[2]), list(conflict[3])
            conflicts.append(Conflict(line, line + len(our_lines) - 1))
            line += len(our_lines)
            if prefer == "ours":
                out.extend(our_lines)
            elif prefer == "theirs":
                out.extend(their_lines)
            else:
                out.append(b"<<<<<<< " + labels[0].encode() + newline)
                out.extend(_terminated(our_lines, newline))
                out.append(b"||||||| " + labels[2].encode() + newline)
                out.extend(_terminated(base_lines, newline))
                out.append(b"=======" + newline)
                out.extend(_terminated(their_lines, newline))
                out.append(b">>>>>>> " + labels[1].encode() + newline)
            continue
        lines = list(group[1])
        if kind in ("unchanged", "a", "same"):
            line += len(lines)
        out.extend(lines)
    return MergeResult(b"".join(out), conflicts, markers=bool(conflicts) and prefer is None)


def _terminated(lines: list[bytes], newline: bytes) -> list[bytes]:
    # A side whose last line has no newline still needs one before the next marker.
    if lines and not lines[-1].endswith((b"\n", b"\r")):
        return [*lines[:-1], lines[-1] + newline]
    return lines
