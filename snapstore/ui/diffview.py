"""Diffs and files as HTML: unified or side by side, highlighted, line-numbered, escaped, bounded.

Lines are matched by the library's own diff (:func:`snapstore.ops.textdiff.opcodes`: patience,
difflib only inside the regions patience leaves unmatched), on the part between the common head
and tail, so a scattered edit of an 80,000-line file costs a fraction of a second, not the
minutes difflib's quadratic matcher took.  What is *rendered* is capped by the view's
:class:`~snapstore.ui.budget.Budget`: rows past the cap are counted, not built, and only the
rows shown are decoded and highlighted.  Every row carries its ``+``/``-`` marker as text, so
the diff reads without colour.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from snapstore.ops import textdiff
from snapstore.ops.diff import Change
from snapstore.ops.renames import Renamed
from snapstore.ops.textdiff import common_ends, is_binary
from snapstore.records.manifest import KIND_NAMES, SYMLINK, Entry
from snapstore.tree.paths import display
from snapstore.ui import words
from snapstore.ui.budget import Budget
from snapstore.ui.highlight import highlighted
from snapstore.ui.html import Html, esc, fmt, join, size_el

CONTEXT = 3

STATUS_WORDS = {"A": "added", "M": "modified", "D": "deleted", "T": "type changed", "X": "mode changed"}

Opcode = tuple[str, int, int, int, int]
Lines = Mapping[int, Html]


def split_lines(data: bytes) -> tuple[list[bytes], bool]:
    """``(lines, ends_with_newline)``: ``data`` cut at each ``\\n`` (a ``\\r`` stays in its line)."""
    lines = data.split(b"\n")
    newline_at_end = lines[-1] == b""
    if newline_at_end:
        lines.pop()
    return lines, newline_at_end or not data


def opcodes(a: list[bytes], b: list[bytes]) -> list[Opcode]:
    """The library's opcodes for ``a`` -> ``b``, computed on the part between the common ends."""
    head, tail = common_ends(a, b)
    out: list[Opcode] = []
    if head:
        out.append(("equal", 0, head, 0, head))
    i2, j2 = len(a) - tail, len(b) - tail
    if head < i2 and head < j2:
        for tag, x1, x2, y1, y2 in textdiff.opcodes(a[head:i2], b[head:j2]):
            out.append((tag, x1 + head, x2 + head, y1 + head, y2 + head))
    elif head < i2:
        out.append(("delete", head, i2, head, head))
    elif head < j2:
        out.append(("insert", head, head, head, j2))
    if tail:
        out.append(("equal", i2, len(a), j2, len(b)))
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


def _rows(op: Opcode, split: bool) -> int:
    """How many table rows one opcode takes."""
    tag, i1, i2, j1, j2 = op
    if tag == "equal":
        return i2 - i1
    return max(i2 - i1, j2 - j1) if split else (i2 - i1) + (j2 - j1)


def _clip(op: Opcode, rows: int, split: bool) -> Opcode:
    """``op`` cut to its first ``rows`` rows (as the table lays them out)."""
    tag, i1, i2, j1, j2 = op
    if tag == "equal" or split:
        return tag, i1, min(i2, i1 + rows), j1, min(j2, j1 + rows)
    if rows <= i2 - i1:
        return tag, i1, i1 + rows, j1, j1
    return tag, i1, i2, j1, j1 + rows - (i2 - i1)


def clipped(groups: list[list[Opcode]], limit: int, split: bool) -> tuple[list[list[Opcode]], int, int]:
    """``(shown, rows_shown, rows_total)``: the hunks cut to ``limit`` rows in all (a hunk
    may be cut in the middle; the rows past the limit are counted, never built)."""
    shown: list[list[Opcode]] = []
    used = total = 0
    for group in groups:
        total += sum(_rows(op, split) for op in group)
        if used >= limit:
            continue
        kept: list[Opcode] = []
        for op in group:
            room = limit - used
            if room <= 0:
                break
            n = _rows(op, split)
            kept.append(op if n <= room else _clip(op, room, split))
            used += min(n, room)
        shown.append(kept)
    return shown, used, total


#: A line that starts a definition (any indentation): what a hunk header names, as `git diff` does.
_DEFINITION = re.compile(
    rb"^[ \t]*(?:export[ \t]+)?(?:pub(?:\([^)]*\))?[ \t]+)?(?:async[ \t]+)?"
    rb"(?:def|class|function|fn|func|fun|struct|impl|trait|interface|enum|module|sub|proc)[ \t]"
)
#: Otherwise git's default: a line that starts with a letter, ``_`` or ``$``.
_TOP_LEVEL = re.compile(rb"^[A-Za-z_$]")
#: Lines looked at above a hunk for its definition (a bound on the work).
FUNCNAME_SCAN = 2_000


def function_name(lines: list[bytes], before: int) -> str:
    """The nearest definition line above line ``before`` (0-based), cut to 80 characters, for a
    hunk header (``@@ -10,7 +10,8 @@ def load(path):``); empty when none is found."""
    fallback = ""
    for i in range(before - 1, max(-1, before - 1 - FUNCNAME_SCAN), -1):
        line = lines[i]
        if _DEFINITION.match(line):
            return line.strip().decode("utf-8", "replace")[:80]
        if not fallback and _TOP_LEVEL.match(line):
            fallback = line.rstrip().decode("utf-8", "replace")[:80]
    return fallback


def _hunk_header(group: list[Opcode], a: list[bytes] | None = None) -> str:
    i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
    # as in `diff -u`: an empty side is numbered by the line before it
    head = f"@@ -{i1 + 1 if i2 > i1 else i1},{i2 - i1} +{j1 + 1 if j2 > j1 else j1},{j2 - j1} @@"
    name = function_name(a, i1) if a else ""
    return f"{head} {name}" if name else head


def _row(cls: str, marker: str, old_no: int | None, new_no: int | None, code: Html) -> Html:
    return fmt(
        '<tr class="{}"><td class="ln">{}</td><td class="ln">{}</td><td class="mk">{}</td><td class="code">{}</td></tr>',
        cls, "" if old_no is None else old_no, "" if new_no is None else new_no, marker, code,
    )


def unified_table(old: Lines, new: Lines, hunks: list[tuple[str, list[Opcode]]]) -> Html:
    """A unified diff: one column of code, removed lines then added lines per change.
    ``hunks`` pairs each hunk's header with the opcodes to render (maybe clipped)."""
    rows: list[Html] = []
    for header, group in hunks:
        rows.append(fmt('<tr class="hunk"><td colspan="4">{}</td></tr>', header))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [_row("ctx", " ", i + 1, j1 + k + 1, old[i]) for k, i in enumerate(range(i1, i2))]
                continue
            rows += [_row("del", "-", i + 1, None, old[i]) for i in range(i1, i2)]
            rows += [_row("add", "+", None, j + 1, new[j]) for j in range(j1, j2)]
    return _tables(rows, '<table class="diff unified hl"><colgroup><col class="ln"><col class="ln"><col class="mk"><col class="code"></colgroup>')


#: Rows per table: a long diff is a column of tables, each laid out by the browser only when it
#: nears the screen (``content-visibility: auto`` in ui.css), so "Show anyway" keeps the tab responsive.
CHUNK_ROWS = 400


def _tables(rows: list[Html], head: str) -> Html:
    """``rows`` as tables of :data:`CHUNK_ROWS` rows (the same columns), the later ones in
    ``div.chunk`` boxes that the browser renders when scrolled near."""
    if len(rows) <= CHUNK_ROWS:
        return Html(f"{head}{join(rows)}</table>")
    parts = [Html(f"{head}{join(rows[:CHUNK_ROWS])}</table>")]
    for k in range(CHUNK_ROWS, len(rows), CHUNK_ROWS):
        piece = rows[k : k + CHUNK_ROWS]
        parts.append(Html(f'<div class="chunk">{head}{join(piece)}</table></div>'))
    return join(parts)


def _half(cls: str, marker: str, no: int | None, code: Html | None) -> Html:
    if no is None or code is None:
        return Html('<td class="ln"></td><td class="mk"></td><td class="code empty"></td>')
    return fmt('<td class="ln">{}</td><td class="mk {}">{}</td><td class="code {}">{}</td>', no, cls, marker, cls, code)


def split_table(old: Lines, new: Lines, hunks: list[tuple[str, list[Opcode]]]) -> Html:
    """A side-by-side diff: the old file on the left, the new on the right, changes paired."""
    rows: list[Html] = []
    for header, group in hunks:
        rows.append(fmt('<tr class="hunk"><td colspan="6">{}</td></tr>', header))
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
    return _tables(
        rows, '<table class="diff split hl"><colgroup><col class="ln"><col class="mk"><col class="code">'
        '<col class="ln"><col class="mk"><col class="code"></colgroup>',
    )


def rendered_lines(path: bytes, data: bytes, lines: list[bytes], windows: list[tuple[int, int]], lexed: list[int] | None = None) -> dict[int, Html]:
    """The lines in ``windows`` (``[start, end)`` ranges) decoded, escaped and highlighted.
    The file is lexed from its first line to the last line shown (or taken from the cache), so
    a string or comment opened anywhere above is coloured right; without a lexer, lines
    outside the windows are never decoded.  ``lexed[0]`` counts the bytes lexed."""
    need = max((b for a, b in windows if b > a), default=0)
    colours = highlighted(path, data, lines, need, lexed) if need else None
    out: dict[int, Html] = {}
    for a, b in windows:
        for i in range(a, b):
            out[i] = colours[i] if colours is not None and i < len(colours) else esc(lines[i].decode("utf-8", "replace"))
    return out


def _mark_words(groups: list[list[Opcode]], a: list[bytes], b: list[bytes], old: dict[int, Html], new: dict[int, Html]) -> None:
    """Mark the changed words of each replaced pair of lines shown (in place)."""
    for group in groups:
        for tag, i1, i2, j1, j2 in group:
            if tag != "replace":
                continue
            for i, j in zip(range(i1, i2), range(j1, j2)):
                found = words.changed(a[i].decode("utf-8", "replace"), b[j].decode("utf-8", "replace"))
                if found and i in old and j in new:
                    old[i] = words.mark(old[i], found[0], "del")
                    new[j] = words.mark(new[j], found[1], "ins")


#: How a note names each kind of entry ("Was a file (mode 644); now an executable (mode 755).").
_ARTICLED = {"file": "a file", "exec": "an executable", "dir": "a directory", "unreadable": "an unreadable file"}


def _describe(e: Entry | None) -> str:
    if e is None:
        return "nothing"
    if e.kind == SYMLINK:
        return f"a symlink to {display(e.ref)}"
    return f"{_ARTICLED.get(KIND_NAMES.get(e.kind, ''), 'an unknown kind of entry')} (mode {e.mode & 0o7777:o})"


def change_body(
    change: Change, view: str, budget: Budget, more: Html | None = None, *,
    images: tuple[str | None, str | None] = (None, None), context: int = CONTEXT, expand: str | None = None,
) -> Html:
    """The diff of one change (``view`` is ``"split"`` or ``"unified"``), or why none is shown.

    It renders at most what ``budget`` has left for one file; ``more`` (links: "show anyway",
    downloads) follows the note of a diff that is cut or not shown for its size.  ``images``:
    the addresses of the old and new side as images (shown when the file is one); ``context``:
    lines around each hunk; ``expand``: the address of this diff with more context.
    """
    more = more or Html("")
    old_e, new_e = change.old, change.new
    files = [e for e in (old_e, new_e) if e is not None and e.is_file]
    if change.status in ("T", "X") or not files:
        return fmt('<p class="note">Was {}; now {}.</p>', _describe(old_e), _describe(new_e))
    if isinstance(change, Renamed) and old_e is not None and new_e is not None and old_e.ref == new_e.ref:
        return fmt('<p class="note">Renamed from <code>{}</code>; the content is unchanged (100% similar).</p>', display(change.old_path))
    if any(e.size > budget.limits.file_bytes for e in files):
        sizes = join((size_el(e.size) for e in files), " → ")
        return fmt('<p class="note toolarge">Too large to show here ({}). {}</p>', sizes, more)
    old_b = (change.old_bytes() if old_e is not None and old_e.is_file else b"") or b""
    new_b = (change.new_bytes() if new_e is not None and new_e.is_file else b"") or b""
    if is_binary(old_b) or is_binary(new_b):
        return images_body(old_b, new_b, images)
    if old_b == new_b:
        return Html('<p class="note">The content is unchanged.</p>')
    a, a_nl = split_lines(old_b)
    b, b_nl = split_lines(new_b)
    codes = opcodes(a, b)
    if not any(c[0] != "equal" for c in codes):
        return Html('<p class="note">Only the line endings at the end of the file differ.</p>')
    split = view == "split"
    groups = list(grouped(codes, context))
    shown, used, total = clipped(groups, budget.file_lines(), split)
    budget.spend(used)
    old_h = rendered_lines(change.path, old_b, a, [(g[0][1], g[-1][2]) for g in shown], budget.lexed)
    new_h = rendered_lines(change.path, new_b, b, [(g[0][3], g[-1][4]) for g in shown], budget.lexed)
    _mark_words(shown, a, b, old_h, new_h)
    hunks = [(_hunk_header(full, a), part) for full, part in zip(groups, shown)]
    table = split_table(old_h, new_h, hunks) if split else unified_table(old_h, new_h, hunks)
    notes = []
    if old_e is not None and not a_nl:
        notes.append("the old version has no newline at its end")
    if new_e is not None and not b_nl:
        notes.append("the new version has no newline at its end")
    tail = fmt('<p class="note">{}.</p>', "; ".join(notes).capitalize()) if notes else Html("")
    if used < total:
        tail = fmt(
            '{}<p class="note toolarge">Showing {} of {} lines of this diff. {}</p>', tail, f"{used:,}", f"{total:,}", more
        )
    elif expand and (groups[0][0][1] > 0 or groups[-1][-1][2] < len(a)):
        tail = fmt('{}<p class="note expand"><a href="{}" class="expand">Show more context around each change</a></p>', tail, expand)
    label = "Side-by-side diff" if split else "Diff"
    return fmt('<div class="scroll" tabindex="0" role="region" aria-label="{} of {}">{}</div>{}', label, display(change.path), table, tail)


def images_body(old_b: bytes, new_b: bytes, images: tuple[str | None, str | None]) -> Html:
    """A binary change: its two sides as images when they are ones (PNG, JPEG, GIF, WebP) and
    can be served, else its sizes."""
    from snapstore.ui.images import image_type

    sizes = join((size_el(len(b)) for b in (old_b, new_b)), " → ")
    figures = []
    for label, data, src in (("before", old_b, images[0]), ("after", new_b, images[1])):
        if data and src and image_type(data):
            figures.append(fmt('<figure><img src="{}" alt="{} ({})" loading="lazy"><figcaption>{} · {}</figcaption></figure>', src, label, image_type(data), label, size_el(len(data))))
    if not figures:
        return fmt('<p class="note">Binary file ({}).</p>', sizes)
    return fmt('<p class="note">Binary file ({}).</p><div class="images">{}</div>', sizes, join(figures))


def read_head(pieces: Iterator[bytes], limit: int) -> tuple[bytes, bool]:
    """``(head, cut)``: the first ``limit`` bytes of a stream (then cut back to a line's
    end, when there is one) and whether there was more.  Nothing past the limit is read."""
    buf = bytearray()
    cut = False
    try:
        for piece in pieces:
            buf += piece[: limit - len(buf)]
            if len(buf) >= limit:
                cut = len(piece) > 0
                break
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()  # ends the stream's read transaction now, in this thread
    if cut:
        end = buf.rfind(b"\n")
        if end >= 0:
            del buf[end + 1 :]
    return bytes(buf), cut


def _file_lines(path: bytes, data: bytes, lines: list[bytes], n: int, budget: Budget) -> list[Html]:
    colours = highlighted(path, data, lines, n, budget.lexed)
    if colours is not None and len(colours) >= n:
        return colours[:n]
    return [esc(line.decode("utf-8", "replace")) for line in lines[:n]]


def file_table(path: bytes, data: bytes, size: int, budget: Budget, more: Html | None = None) -> Html:
    """A file, line-numbered and highlighted, from its first bytes ``data`` (``size`` in all):
    at most what ``budget`` allows for one file; binary files are described, not shown."""
    more = more or Html("")
    if is_binary(data):
        return fmt('<p class="note">A binary file of {}.</p>', size_el(size))
    lines, nl = split_lines(data)
    shown = lines[: budget.file_lines()]
    budget.spend(len(shown))
    rows = join(
        fmt('<tr id="L{}"><td class="ln">{}</td><td class="code">{}</td></tr>', i, i, code)
        for i, code in enumerate(_file_lines(path, data, lines, len(shown), budget), 1)
    )
    if len(shown) < len(lines) or len(data) < size:
        tail = fmt(
            '<p class="note toolarge">Showing the first {} lines ({} of {}). {}</p>',
            f"{len(shown):,}", size_el(sum(len(line) + 1 for line in shown)), size_el(size), more,
        )
    else:
        tail = Html("") if nl else Html('<p class="note">No newline at the end of the file.</p>')
    return fmt(
        '<div class="scroll" tabindex="0" role="region" aria-label="Contents"><table class="file hl"><colgroup><col class="ln"><col class="code"></colgroup>{}</table></div>{}',
        rows, tail,
    )


__all__ = ["STATUS_WORDS", "change_body", "clipped", "file_table", "grouped", "opcodes", "read_head", "rendered_lines"]
