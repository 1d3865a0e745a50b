"""Word-level highlights: inside a changed pair of lines, which words changed.

A replaced block's lines are paired in order (the first removed with the first added, ...),
each pair is matched word by word (runs of letters and digits, of spaces, single punctuation
marks), and the changed runs are wrapped in ``<del>``/``<ins>`` inside the already highlighted
and escaped line.  Pairs that share little (under :data:`MIN_SIMILAR`) are left alone: marking
every word of two unrelated lines says nothing.  Colour is a help only: the line's own ``-``/``+``
marker still says what happened, and ``<del>``/``<ins>`` carry the meaning for screen readers.
"""

from __future__ import annotations

import difflib
import re

from snapstore.ui.html import Html

#: Lines longer than this are not matched word by word (the matcher is quadratic in words).
MAX_LINE = 1_000
#: The least share of a pair's characters that must be common for its words to be marked.
MIN_SIMILAR = 0.4

_WORD = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)
_TAG = re.compile(r"<[^>]*>|&[#\w]+;|[^<&]")

Ranges = list[tuple[int, int]]


def changed(old: str, new: str) -> tuple[Ranges, Ranges] | None:
    """The character ranges that differ in ``old`` and in ``new``, or None when the two lines
    are too long or too different to mark."""
    if len(old) > MAX_LINE or len(new) > MAX_LINE or old == new:
        return None
    a, b = _WORD.findall(old), _WORD.findall(new)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    same = sum(sum(len(w) for w in a[i : i + n]) for i, _, n in matcher.get_matching_blocks())
    if 2 * same < MIN_SIMILAR * (len(old) + len(new)):
        return None
    pos_a = _offsets(a)
    pos_b = _offsets(b)
    out_a: Ranges = []
    out_b: Ranges = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if i2 > i1:
            out_a.append((pos_a[i1], pos_a[i2]))
        if j2 > j1:
            out_b.append((pos_b[j1], pos_b[j2]))
    return out_a, out_b


def _offsets(words: list[str]) -> list[int]:
    out = [0]
    for w in words:
        out.append(out[-1] + len(w))
    return out


def mark(html: Html, ranges: Ranges, tag: str) -> Html:
    """``html`` (one line: flat ``<span>``s around escaped text) with the text in ``ranges``
    (character offsets of the unescaped line) wrapped in ``<tag>``, closed and reopened around
    the spans it crosses."""
    if not ranges:
        return html
    out: list[str] = []
    pos = 0  # characters of text seen
    k = 0  # the next range
    inside = False
    for piece in _TAG.findall(html):
        if piece.startswith("<"):
            if inside:
                out.append(f"</{tag}>{piece}<{tag}>")
            else:
                out.append(piece)
            continue
        while k < len(ranges) and pos >= ranges[k][1]:
            k += 1
        want = k < len(ranges) and ranges[k][0] <= pos < ranges[k][1]
        if want and not inside:
            out.append(f"<{tag}>")
        elif inside and not want:
            out.append(f"</{tag}>")
        inside = want
        out.append(piece)
        pos += 1
    if inside:
        out.append(f"</{tag}>")
    # empty pairs left by a mark closed and reopened around a tag are dropped
    return Html("".join(out).replace(f"<{tag}></{tag}>", ""))


__all__ = ["changed", "mark"]
