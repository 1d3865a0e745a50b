"""Diffs and files as HTML: unified or side by side, highlighted, line-numbered, escaped.

The line matching is difflib's (as in :mod:`snapstore.ops.textdiff`), with the common head and
tail stripped first so an agent's local edit in a long file stays cheap.  Every row carries its
``+``/``-`` marker as text, so the diff reads without colour.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from snapstore.ops.diff import Change
from snapstore.ops.textdiff import common_ends, is_binary
from snapstore.records.manifest import KIND_NAMES, SYMLINK, Entry
from snapstore.tree.paths import display
from snapstore.ui.highlight import highlight, split_lines
from snapstore.ui.html import Html, fmt, join, size_el

#: A side larger than this is not diffed in the page (the file view still shows it).
MAX_DIFF_BYTES = 2 * 1024 * 1024
CONTEXT = 3

STATUS_WORDS = {"A": "added", "M": "modified", "D": "deleted", "T": "type changed", "X": "mode changed"}

Opcode = tuple[str, int, int, int, int]


def opcodes(a: list[str], b: list[str]) -> list[Opcode]:
    """difflib's opcodes for ``a`` -> ``b``, computed on the part between the common head and tail."""
    head, tail = common_ends(a, b)
    out: list[Opcode] = []
    if head:
        out.append(("equal", 0, head, 0, head))
    mid_a, mid_b = a[head : len(a) - tail], b[head : len(b) - tail]
    if mid_a or mid_b:
        matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            out.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        out.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return out


def grouped(codes: list[Opcode], n: int = CONTEXT) -> Iterator[list[Opcode]]:
    """Hunks with ``n`` lines of context (difflib's get_grouped_opcodes, on given opcodes)."""
    codes = list(codes)
    if not codes or all(c[0] == "equal" for c in codes):
        return
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _hunk_header(group: list[Opcode]) -> str:
    i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
    # as in `diff -u`: an empty side is numbered by the line before it
    return f"@@ -{i1 + 1 if i2 > i1 else i1},{i2 - i1} +{j1 + 1 if j2 > j1 else j1},{j2 - j1} @@"


def _row(cls: str, marker: str, old_no: int | None, new_no: int | None, code: Html) -> Html:
    return fmt(
        '<tr class="{}"><td class="ln">{}</td><td class="ln">{}</td><td class="mk">{}</td><td class="code">{}</td></tr>',
        cls, "" if old_no is None else old_no, "" if new_no is None else new_no, marker, code,
    )


def unified_table(old: list[Html], new: list[Html], codes: list[Opcode]) -> Html:
    """A unified diff: one column of code, removed lines then added lines per change."""
    rows: list[Html] = []
    for group in grouped(codes):
        rows.append(fmt('<tr class="hunk"><td colspan="4">{}</td></tr>', _hunk_header(group)))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [_row("ctx", " ", i + 1, j1 + k + 1, old[i]) for k, i in enumerate(range(i1, i2))]
                continue
            rows += [_row("del", "-", i + 1, None, old[i]) for i in range(i1, i2)]
            rows += [_row("add", "+", None, j + 1, new[j]) for j in range(j1, j2)]
    return fmt(
        '<table class="diff unified hl"><colgroup><col class="ln"><col class="ln"><col class="mk"><col class="code">'
        "</colgroup>{}</table>",
        join(rows),
    )


def _half(cls: str, marker: str, no: int | None, code: Html | None) -> Html:
    if no is None or code is None:
        return Html('<td class="ln"></td><td class="mk"></td><td class="code empty"></td>')
    return fmt('<td class="ln">{}</td><td class="mk {}">{}</td><td class="code {}">{}</td>', no, cls, marker, cls, code)


def split_table(old: list[Html], new: list[Html], codes: list[Opcode]) -> Html:
    """A side-by-side diff: the old file on the left, the new on the right, changes paired."""
    rows: list[Html] = []
    for group in grouped(codes):
        rows.append(fmt('<tr class="hunk"><td colspan="6">{}</td></tr>', _hunk_header(group)))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for k in range(i2 - i1):
                    left = _half("ctx", " ", i1 + k + 1, old[i1 + k])
                    right = _half("ctx", " ", j1 + k + 1, new[j1 + k])
                    rows.append(fmt("<tr>{}{}</tr>", left, right))
                continue
            for k in range(max(i2 - i1, j2 - j1)):
                i, j = i1 + k, j1 + k
                left = _half("del", "-", i + 1, old[i]) if i < i2 else _half("", "", None, None)
                right = _half("add", "+", j + 1, new[j]) if j < j2 else _half("", "", None, None)
                rows.append(fmt("<tr>{}{}</tr>", left, right))
    return fmt(
        '<table class="diff split hl"><colgroup><col class="ln"><col class="mk"><col class="code">'
        '<col class="ln"><col class="mk"><col class="code"></colgroup>{}</table>',
        join(rows),
    )


def _describe(e: Entry | None) -> str:
    if e is None:
        return "nothing"
    if e.kind == SYMLINK:
        return f"a symlink to {display(e.ref)}"
    return f"a {KIND_NAMES.get(e.kind, '?')} (mode {e.mode & 0o7777:o})"


def change_body(change: Change, view: str) -> Html:
    """The diff of one change (``view`` is ``"split"`` or ``"unified"``), or why none is shown."""
    old_e, new_e = change.old, change.new
    files = [e for e in (old_e, new_e) if e is not None and e.is_file]
    if change.status in ("T", "X") or not files:
        return fmt('<p class="note">Was {}; now {}.</p>', _describe(old_e), _describe(new_e))
    if any(e.size > MAX_DIFF_BYTES for e in files):
        sizes = join((size_el(e.size) for e in files), " → ")
        return fmt('<p class="note">Too large to show here ({}): open the file instead.</p>', sizes)
    old_b = change.old_bytes() if old_e is not None and old_e.is_file else b""
    new_b = change.new_bytes() if new_e is not None and new_e.is_file else b""
    old_b, new_b = old_b or b"", new_b or b""
    if is_binary(old_b) or is_binary(new_b):
        sizes = join((size_el(len(b)) for b in (old_b, new_b)), " → ")
        return fmt('<p class="note">Binary file ({}).</p>', sizes)
    a, a_nl = split_lines(old_b)
    b, b_nl = split_lines(new_b)
    codes = opcodes(a, b)
    if not any(c[0] != "equal" for c in codes):
        return Html('<p class="note">Only the line endings at the end of the file differ.</p>')
    groups = list(grouped(codes))
    old_h = highlight(change.path, a, [(g[0][1], g[-1][2]) for g in groups])
    new_h = highlight(change.path, b, [(g[0][3], g[-1][4]) for g in groups])
    table = split_table(old_h, new_h, codes) if view == "split" else unified_table(old_h, new_h, codes)
    notes = []
    if old_e is not None and not a_nl:
        notes.append("the old version has no newline at its end")
    if new_e is not None and not b_nl:
        notes.append("the new version has no newline at its end")
    tail = fmt('<p class="note">{}.</p>', "; ".join(notes).capitalize()) if notes else Html("")
    return fmt('<div class="scroll">{}</div>{}', table, tail)


def file_table(path: bytes, data: bytes) -> Html:
    """A whole file, line-numbered and highlighted (binary files are described, not shown)."""
    if is_binary(data):
        return fmt('<p class="note">A binary file of {}.</p>', size_el(len(data)))
    lines, nl = split_lines(data)
    rows = join(
        fmt('<tr id="L{}"><td class="ln">{}</td><td class="code">{}</td></tr>', i, i, code)
        for i, code in enumerate(highlight(path, lines), 1)
    )
    tail = Html("") if nl else Html('<p class="note">No newline at the end of the file.</p>')
    return fmt(
        '<div class="scroll"><table class="file hl"><colgroup><col class="ln"><col class="code"></colgroup>{}</table></div>{}',
        rows, tail,
    )


__all__ = ["STATUS_WORDS", "change_body", "file_table", "grouped", "opcodes"]
