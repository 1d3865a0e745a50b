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
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import blake3

from snapstore.errors import ConflictError, TreeIOError, UnsafePathError, UsageError
from snapstore.tree.atomic import write_file_atomic

if TYPE_CHECKING:
    from snapstore.records.checkpoint import Checkpoint

EXACT, WHITESPACE, SIMILAR = "exact", "whitespace", "similar"
#: The least similarity (0..1) of a ``similar`` match.  0.9 accepts a typo or two in a line of
#: forty characters, or one wrong line in a block of ten, and refuses a different statement
#: (benchmarks/edit_match.py shows the scores of realistic near-misses).
SIMILARITY_THRESHOLD = 0.9
#: Files larger than this are not edited (the whole file is held in memory, twice).
MAX_EDIT_BYTES = 64 << 20


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
    checkpoint: Callable[[str, dict[str, Any]], Checkpoint],
    expected: str | None = None,
    dry_run: bool = False,
    replace_all: bool = False,
    metadata: dict[str, Any] | None = None,
) -> EditReport:
    """Apply ``edits`` to the tree's file ``path``; the caller holds the writer lock.

    Unless ``dry_run``, ``checkpoint(message, metadata)`` records the tree first (skipping an
    unchanged one), then the file is replaced atomically, and only if it is still the version
    that was read.
    """
    real, rel = resolve_target(root, path, store_dir)
    parsed = parse_edits(edits)
    data = read_file(real)
    check_expected(data, expected, rel)
    new, matches, diff = plan(data, parsed, replace_all=replace_all, path=rel)
    report = EditReport(rel, matches, diff, content_hash(data), content_hash(new), dry_run)
    if dry_run:
        return report
    # The checkpoint records what changed before this edit: not the editor's work.
    cp = checkpoint(
        f"before edit: {rel}", {"tool_name": "snapstore edit", "path": rel, **(metadata or {}), "actor": "user"}
    )
    report.checkpoint = cp.id
    report.warnings.extend(cp.warnings)
    # The file may have changed while the checkpoint was taken: never write over that.
    check_expected(read_file(real), report.old_hash, rel)
    write_keeping_mode(real, new)
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


# -- the target --------------------------------------------------------------------------------


def resolve_target(root: str, path: str, store_dir: str | None) -> tuple[str, str]:
    """``(real path to write, root-relative display path)`` of ``path`` (absolute, or relative
    to ``root``), refusing anything outside the tree, in ``.git`` or the store, or a symlink
    leading out of the tree (UnsafePathError), and what is not a regular file (TreeIOError)."""
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(root, path))
    top = os.path.realpath(root)
    for candidate in (os.path.relpath(full, os.path.normpath(root)), os.path.relpath(os.path.realpath(full), top)):
        if candidate == os.curdir or candidate.startswith(os.pardir + os.sep) or candidate == os.pardir:
            what = "outside the tree" if candidate != os.curdir else "the tree itself"
            raise UnsafePathError(f"{path} is {what} ({root}): refused (a symlink may lead out)")
        if ".git" in candidate.split(os.sep):
            raise UnsafePathError(f"{path} is inside .git: refused")
    real = os.path.realpath(full)
    if store_dir is not None:
        store_real = os.path.realpath(store_dir)
        if real == store_real or real.startswith(store_real.rstrip(os.sep) + os.sep):
            raise UnsafePathError(f"{path} is inside the store {store_dir}: refused")
    try:
        st = os.stat(real)
    except OSError as exc:
        raise TreeIOError(f"cannot edit {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise TreeIOError(f"cannot edit {path}: not a regular file")
    return real, os.path.relpath(full, os.path.normpath(root)).replace(os.sep, "/")


def read_file(real: str) -> bytes:
    """The bytes of the file to edit (TreeIOError when unreadable or too large)."""
    try:
        with open(real, "rb") as f:
            data = f.read(MAX_EDIT_BYTES + 1)
    except OSError as exc:
        raise TreeIOError(f"cannot read {real}: {exc.strerror}") from exc
    if len(data) > MAX_EDIT_BYTES:
        raise UsageError(f"{real} is larger than {MAX_EDIT_BYTES >> 20} MiB: not edited")
    return data


def check_expected(data: bytes, expected: str | None, path: str) -> None:
    """ConflictError when the file is not the version the caller read (``expected``)."""
    if expected is not None and content_hash(data) != expected.strip().lower():
        raise ConflictError(
            f"{path} changed since it was read (expected version {expected[:12]}, found "
            f"{content_hash(data)[:12]}): nothing written; read it again"
        )


def write_keeping_mode(real: str, data: bytes) -> None:
    """Replace the file atomically (temp in its directory, fsync, rename) with its mode kept."""
    mode = stat.S_IMODE(os.stat(real).st_mode)
    write_file_atomic(real, data, mode)
    try:
        if stat.S_IMODE(os.stat(real).st_mode) != mode:  # the umask took bits away: put them back
            os.chmod(real, mode)
    except OSError as exc:
        raise TreeIOError(f"cannot keep the mode of {real}: {exc.strerror}") from exc


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


def _loose(text: str, old: str, new: str, number: int, path: str) -> tuple[list[tuple[int, int, float, str]], str]:
    old_lines = old.replace("\r\n", "\n").strip("\n").split("\n")
    target = [_norm(x) for x in old_lines]
    lines = _lines_with_offsets(text)
    n = len(old_lines)
    windows = [(i, [_norm(text[s:e]) for s, e in lines[i : i + n]]) for i in range(len(lines) - n + 1)]
    same = [i for i, w in windows if w == target]
    if same:
        return [_replacement(text, lines, i, n, old_lines, new, 1.0) for i in same], WHITESPACE
    from rapidfuzz.fuzz import ratio

    wanted = "\n".join(target)
    scored = sorted(((ratio("\n".join(w), wanted) / 100.0, i) for i, w in windows), key=lambda x: (-x[0], x[1]))
    chosen: list[tuple[float, int]] = []
    for score, i in scored:
        if score < SIMILARITY_THRESHOLD:
            break
        if all(abs(i - j) >= n for _, j in chosen):  # windows that overlap are one place
            chosen.append((score, i))
    if chosen:
        return [_replacement(text, lines, i, n, old_lines, new, score) for score, i in chosen], SIMILAR
    if not scored:
        raise UsageError(f"edit {number}: old_text not found in {path} (it has fewer lines than old_text)")
    score, i = scored[0]
    s, e = lines[i][0], lines[i + n - 1][1]
    excerpt = text[s:e].strip().splitlines()[0][:80] if text[s:e].strip() else ""
    raise UsageError(
        f"edit {number}: old_text not found in {path}; the closest is {_where(text, s, e, score, EXACT)} "
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
