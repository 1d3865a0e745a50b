"""The safe edit engine: find text in a file (exactly, then loosely), plan the edit, write it.

:func:`run` is the whole edit (checkpoint first, then the atomic write); ``Store.edit`` calls
it under the writer lock, and the CLI's ``edit`` command and the MCP tool ``edit_file`` call that.  The engine works on the file's bytes decoded as
UTF-8 with ``surrogateescape``, so every byte outside an edited span is written back unchanged
(also bytes that are not UTF-8); a file whose lines end in CRLF gets CRLF in the new text too.

Matching, per edit, in this order (the first level that finds something wins):

1. ``exact``: the old text occurs verbatim;
2. ``whitespace``: the same lines once runs of blanks are collapsed and each line is stripped
   (indentation, trailing spaces, tabs against spaces);
3. ``similar``: a window of as many lines as the old text whose similarity (rapidfuzz's
   normalised Indel ratio on the whitespace-normalised lines) is at least
   :data:`SIMILARITY_THRESHOLD`.

At the loose levels the whole matched lines are replaced and the new text is re-indented by the
difference between the file's indentation and the old text's.  Two or more matches are an
error listing them (unless ``replace_all``); no match is an error naming the closest candidate
and its similarity.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import blake3

from snapstore.errors import ConflictError, UsageError

if TYPE_CHECKING:
    from snapstore.records.checkpoint import Checkpoint

EXACT, WHITESPACE, SIMILAR = "exact", "whitespace", "similar"
#: The least similarity (0..1) of a ``similar`` match.  0.9 accepts a typo or two in a line of
#: forty characters, or one wrong line in a block of ten, and refuses a different statement
#: (benchmarks/edit_match.py shows the scores of realistic near-misses).
SIMILARITY_THRESHOLD = 0.9


@dataclass(frozen=True)
class Edit:
    """One replacement: ``old_text`` (non-empty) becomes ``new_text``."""

    old_text: str
    new_text: str


@dataclass(frozen=True)
class Match:
    """Where one edit matched: its level, 1-based inclusive lines, and similarity (1.0 unless
    the level is ``similar``).  Lines count in the file as it was when that edit was applied."""

    edit: int
    level: str
    start_line: int
    end_line: int
    similarity: float

    def to_json(self) -> dict[str, Any]:
        return {
            "edit": self.edit,
            "level": self.level,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "similarity": round(self.similarity, 4),
        }


@dataclass
class EditReport:
    """What :meth:`snapstore.Store.edit` did (or, with ``dry_run``, would do)."""

    path: str
    matches: list[Match]
    diff: str
    old_hash: str
    new_hash: str
    dry_run: bool
    written: bool = False
    checkpoint: str | None = None
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "matches": [m.to_json() for m in self.matches],
            "diff": self.diff,
            "old_hash": self.old_hash,
            "new_hash": self.new_hash,
            "dry_run": self.dry_run,
            "written": self.written,
            "checkpoint": self.checkpoint,
        }


def run(
    root: str,
    store_dir: str | None,
    path: str,
    edits: Any,
    *,
    hold: Callable[[], AbstractContextManager[Any]],
    checkpoint: Callable[[str, dict[str, Any]], Checkpoint],
    expected: str | None = None,
    dry_run: bool = False,
    replace_all: bool = False,
    metadata: dict[str, Any] | None = None,
    announce: Callable[[str, str, str], None] | None = None,
) -> EditReport:
    """Apply ``edits`` to the tree's file ``path``.

    The file is read and the edit planned without the writer lock (a slow fuzzy search never
    holds up checkpoints); then, unless ``dry_run``, under ``hold()`` (the writer lock),
    ``checkpoint(message, metadata)`` records the tree (skipping an unchanged one) and the file
    is replaced atomically, only if it still holds the bytes the edit was planned on (see
    :mod:`snapstore.ops.edit_target`).  ``announce(path, old hash, new hash)`` is called
    just before the write (the service records it, so a client that loses the answer can tell
    from the file whether the edit was written).
    """
    from snapstore.ops.edit_target import Target

    target = Target(root, path, store_dir)
    parsed = parse_edits(edits)
    data = target.read()
    check_expected(data, expected, target.shown)
    new, matches, diff = plan(data, parsed, replace_all=replace_all, path=target.shown)
    report = EditReport(target.shown, matches, diff, content_hash(data), content_hash(new), dry_run)
    if dry_run:
        return report
    rel = target.shown
    with hold():
        # The checkpoint records what changed before this edit: not the editor's work.
        cp = checkpoint(
            # (The CLI's edit runs for a person: what changed before it is the user's; a caller
            # that cannot know says so in metadata, e.g. the MCP tool's "unknown".)
            f"before edit: {rel}", {"tool_name": "snapstore edit", "path": rel, "actor": "user", **(metadata or {})}
        )
        report.checkpoint = cp.id
        report.warnings.extend(cp.warnings)
        if announce is not None:
            announce(rel, report.old_hash, report.new_hash)
        # Only while the file still holds what was planned on (and the checkpoint saw).
        target.replace(new, data)
    report.written = True
    return report


def content_hash(data: bytes) -> str:
    """The version of a file's content that ``expected`` is compared with (BLAKE3, hex)."""
    return blake3.blake3(data).hexdigest()


def parse_edits(doc: Any) -> list[Edit]:
    """Edits from a JSON list of ``{"old_text": ..., "new_text": ...}`` (or Edit objects)."""
    if isinstance(doc, Edit):
        doc = [doc]
    if not isinstance(doc, list | tuple) or not doc:
        raise UsageError("edits must be a non-empty list of {old_text, new_text} objects")
    out = []
    for i, item in enumerate(doc, 1):
        if isinstance(item, Edit):
            out.append(item)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("old_text"), str) or not isinstance(item.get("new_text"), str):
            raise UsageError(f"edit {i} must be an object with string fields old_text and new_text")
        out.append(Edit(item["old_text"], item["new_text"]))
    for i, e in enumerate(out, 1):
        if not e.old_text:
            raise UsageError(f"edit {i}: old_text is empty")
        if e.old_text == e.new_text:
            raise UsageError(f"edit {i}: old_text and new_text are the same")
    return out


def check_expected(data: bytes, expected: str | None, path: str) -> None:
    """ConflictError when the file is not the version the caller read (``expected``)."""
    if expected is not None and content_hash(data) != expected.strip().lower():
        raise ConflictError(
            f"{path} changed since it was read (expected version {expected[:12]}, found "
            f"{content_hash(data)[:12]}): nothing written; read it again"
        )


# -- matching ----------------------------------------------------------------------------------


def plan(data: bytes, edits: list[Edit], *, replace_all: bool = False, path: str = "file") -> tuple[bytes, list[Match], str]:
    """``(new bytes, matches, unified diff)`` of applying ``edits`` one after another."""
    if b"\0" in data[:8192]:
        raise UsageError(f"{path} looks binary: not edited")
    text = data.decode("utf-8", "surrogateescape")
    crlf = _uses_crlf(text)
    matches: list[Match] = []
    for number, edit in enumerate(edits, 1):
        old, new = _endings(edit.old_text, crlf), _endings(edit.new_text, crlf)
        text, found = _apply(text, old, new, number, replace_all, path)
        matches.extend(found)
    new_data = text.encode("utf-8", "surrogateescape")
    return new_data, matches, unified_diff(data, new_data, path)


def unified_diff(old: bytes, new: bytes, path: str) -> str:
    """The unified diff of two versions of a text file (line endings shown as LF)."""
    a = old.decode("utf-8", "replace").replace("\r\n", "\n").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").replace("\r\n", "\n").splitlines(keepends=True)
    lines = difflib.unified_diff(a, b, f"a/{path}", f"b/{path}")
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _uses_crlf(text: str) -> bool:
    crlf = text.count("\r\n")
    return crlf > 0 and crlf >= text.count("\n") - crlf


def _endings(s: str, crlf: bool) -> str:
    s = s.replace("\r\n", "\n")
    return s.replace("\n", "\r\n") if crlf else s


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _norm(line: str) -> str:
    return " ".join(line.split())


def _apply(text: str, old: str, new: str, number: int, replace_all: bool, path: str) -> tuple[str, list[Match]]:
    spans = _exact(text, old)
    level = EXACT
    if spans:
        found = [(s, e, 1.0, new) for s, e in spans]
    else:
        found, level = _loose(text, old, new, number, path)
    if len(found) > 1 and not replace_all:
        where = ", ".join(_where(text, s, e, score, level) for s, e, score, _ in found[:10])
        raise UsageError(
            f"edit {number} matches {len(found)} places in {path} ({level}): {where}; give more "
            "context in old_text, or replace_all"
        )
    out, pos, matches = [], 0, []
    shift = 0  # lines added by earlier replacements of this edit, for the reported numbers
    for s, e, score, replacement in sorted(found):
        out.append(text[pos:s])
        out.append(replacement)
        pos = e
        first = _line_of(text, s) + shift
        last = first + text.count("\n", s, e)
        matches.append(Match(number, level, first, last, score))
        shift += replacement.count("\n") - text.count("\n", s, e)
    out.append(text[pos:])
    return "".join(out), matches


def _where(text: str, s: int, e: int, score: float, level: str) -> str:
    first, last = _line_of(text, s), _line_of(text, s) + text.count("\n", s, e)
    where = f"line {first}" if first == last else f"lines {first}-{last}"
    return where if level == EXACT else f"{where} ({score:.2f})"


def _exact(text: str, old: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        at = text.find(old, start)
        if at < 0:
            return spans
        spans.append((at, at + len(old)))
        start = at + len(old)


def _lines_with_offsets(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each line's content, its line ending excluded."""
    out, pos = [], 0
    for line in text.splitlines(keepends=True):
        content = line.rstrip("\r\n")
        out.append((pos, pos + len(content)))
        pos += len(line)
    return out


#: The most work a ``similar`` search may do, in character-pair steps of the bit-parallel
#: comparison (windows x len(old_text)^2 / 64), about a second.  Past it, only windows in which a
#: line of old_text stands (whitespace aside) at its place are compared, most such lines first.
SEARCH_BUDGET = 400_000_000


def _loose(text: str, old: str, new: str, number: int, path: str) -> tuple[list[tuple[int, int, float, str]], str]:
    old_lines = old.replace("\r\n", "\n").strip("\n").split("\n")
    target = [_norm(x) for x in old_lines]
    lines = _lines_with_offsets(text)
    n = len(old_lines)
    count = len(lines) - n + 1
    if count <= 0:
        raise UsageError(f"edit {number}: old_text not found in {path} (it has fewer lines than old_text)")
    norm = [_norm(text[s:e]) for s, e in lines]
    same = [i for i in range(count) if norm[i] == target[0] and norm[i : i + n] == target]
    if same:
        return [_replacement(text, lines, i, n, old_lines, new, 1.0) for i in same], WHITESPACE
    from rapidfuzz.fuzz import ratio

    wanted = "\n".join(target)
    candidates, anchored = _candidates(norm, target, count, len(wanted))
    cutoff = SIMILARITY_THRESHOLD * 100
    scored = []
    for i in candidates:
        score = ratio("\n".join(norm[i : i + n]), wanted, score_cutoff=cutoff)
        if score:
            scored.append((score / 100.0, i))
    scored.sort(key=lambda x: (-x[0], x[1]))
    chosen: list[tuple[float, int]] = []
    for score, i in scored:
        if all(abs(i - j) >= n for _, j in chosen):  # windows that overlap are one place
            chosen.append((score, i))
    if chosen:
        return [_replacement(text, lines, i, n, old_lines, new, score) for score, i in chosen], SIMILAR
    raise UsageError(f"edit {number}: old_text not found in {path}{_closest(text, lines, norm, n, wanted, candidates, anchored)}")


def _candidates(norm: list[str], target: list[str], count: int, width: int) -> tuple[list[int], bool]:
    """The windows worth comparing, and whether they were limited to anchored ones.

    A window whose length alone rules the threshold out is skipped (Indel similarity is at most
    2 * min / (sum of the lengths)).  When the rest would cost more than SEARCH_BUDGET, only
    windows holding some line of old_text at its place are kept, those holding most first.
    """
    n = len(target)
    ends = [0]
    for x in norm:
        ends.append(ends[-1] + len(x) + 1)
    fits = [
        i for i in range(count)
        if 2 * min(ends[i + n] - ends[i] - 1, width) >= SIMILARITY_THRESHOLD * (ends[i + n] - ends[i] - 1 + width)
    ]  # fmt: skip
    cost = max(1, width * width // 64)
    if len(fits) * cost <= SEARCH_BUDGET:
        return fits, False
    at: dict[str, list[int]] = {}
    for k, t in enumerate(target):
        if len(t) >= 4:  # a blank line or a lone brace anchors nothing
            at.setdefault(t, []).append(k)
    hits: dict[int, int] = {}
    for j, x in enumerate(norm):
        for k in at.get(x, ()):
            if 0 <= j - k < count:
                hits[j - k] = hits.get(j - k, 0) + 1
    fit = set(fits)
    ranked = sorted((i for i in hits if i in fit), key=lambda i: (-hits[i], i))
    return ranked[: max(1, SEARCH_BUDGET // cost)], True


def _closest(
    text: str, lines: list[tuple[int, int]], norm: list[str], n: int, wanted: str, candidates: list[int], anchored: bool
) -> str:
    """The error's hint: the most similar window among those compared (a bounded second pass)."""
    from rapidfuzz.fuzz import ratio

    # Every window when that is cheap (the hint may be far below the threshold), else the
    # windows the search compared.
    room = max(1, SEARCH_BUDGET // max(1, len(wanted) ** 2 // 64))
    every = len(lines) - n + 1
    pool = list(range(every)) if every <= room else candidates[:room]
    if not pool:
        return "; no line of it is in the file (whitespace aside)" if anchored else ""
    score, i = max((ratio("\n".join(norm[i : i + n]), wanted) / 100.0, -i) for i in pool)
    i = -i
    s, e = lines[i][0], lines[i + n - 1][1]
    excerpt = text[s:e].strip().splitlines()[0][:80] if text[s:e].strip() else ""
    return (
        f"; the closest is {_where(text, s, e, score, EXACT)} "
        f"(similarity {score:.2f} < {SIMILARITY_THRESHOLD}): {excerpt!r}"
    )


def _replacement(
    text: str, lines: list[tuple[int, int]], i: int, n: int, old_lines: list[str], new: str, score: float
) -> tuple[int, int, float, str]:
    s, e = lines[i][0], lines[i + n - 1][1]
    nl = "\r\n" if "\r\n" in new or _uses_crlf(text) else "\n"
    new_lines = new.replace("\r\n", "\n").strip("\n").split("\n") if new.strip("\n") else []
    # The caller's indentation may be off: each indentation the old text used is mapped to the
    # file's on the same line, and new lines that use it get the file's instead.
    indents: dict[str, str] = {}
    for k, old_line in enumerate(old_lines):
        if old_line.strip():
            have = text[lines[i + k][0] : lines[i + k][1]]
            indents.setdefault(_indent(old_line), _indent(have))
    new_lines = [indents.get(_indent(x), _indent(x)) + x.lstrip() if x.strip() else x for x in new_lines]
    return s, e, score, nl.join(new_lines)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]
