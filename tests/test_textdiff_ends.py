"""Line counts strip the common ends as bytes first (ops.textdiff.changed_lines): always the same
counts as stripping them line by line from the whole files, whatever the line endings (\\n,
\\r\\n, a lone \\r, none at the end), and the lines left to match are exactly the changed region."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from snapstore.ops import textdiff

LINE = st.sampled_from([b"a\n", b"b\n", b"a\r\n", b"c\r", b"\n", b"\r\n", b"x", b"a", b"long line of text\n", b"\r"])
FILE = st.lists(LINE, max_size=40).map(b"".join)


def tally(a: list[bytes], b: list[bytes]) -> tuple[int, int]:
    """(added, removed) once the common whole lines at both ends are stripped."""
    head, tail = textdiff.common_ends(a, b)
    a, b = a[head : len(a) - tail], b[head : len(b) - tail]
    if not a or not b:
        return len(b), len(a)
    added = removed = 0
    for tag, i1, i2, j1, j2 in textdiff.opcodes(a, b):
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def reference(old: bytes, new: bytes) -> tuple[int, int]:
    """The counts as they were computed before: whole files split, common lines stripped."""
    return tally(old.splitlines(keepends=True), new.splitlines(keepends=True))


def counts(old: bytes, new: bytes) -> tuple[int, int]:
    return tally(*textdiff.changed_lines(old, new))


@settings(max_examples=600, deadline=None)
@given(FILE, FILE, FILE)
def test_counts_are_those_of_stripping_whole_lines(prefix: bytes, middle: bytes, suffix: bytes):
    for old, new in ((prefix + middle + suffix, prefix + suffix), (prefix + suffix, prefix + middle + suffix),
                     (prefix + middle, middle + suffix), (middle, prefix)):
        assert counts(old, new) == reference(old, new), (old, new)


def test_large_files_with_one_change_keep_one_line():
    lines = [f"line {i}\n".encode() for i in range(20000)]
    old = b"".join(lines)
    new = b"".join(lines[:12345] + [b"inserted\n"] + lines[12345:])
    assert textdiff.changed_lines(old, new) == ([], [b"inserted\n"])
    changed = b"".join(lines[:100] + [b"line 100 edited\n"] + lines[101:])
    assert textdiff.changed_lines(old, changed) == ([b"line 100\n"], [b"line 100 edited\n"])
