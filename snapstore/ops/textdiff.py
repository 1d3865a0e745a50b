"""Line-level views of a change: ``--stat`` counts and ``-p`` unified diffs, binary-aware."""

from __future__ import annotations

import difflib

from snapstore.ops.diff import Change

BINARY_SNIFF = 8000


def is_binary(data: bytes | None) -> bool:
    """Git's rule: a NUL byte in the first 8000 bytes makes a file binary."""
    return bool(data) and b"\x00" in data[:BINARY_SNIFF]


def _lines(data: bytes | None) -> list[bytes]:
    return data.splitlines(keepends=True) if data else []


def line_counts(change: Change) -> tuple[int, int, bool]:
    """``(added, removed, binary)`` lines for one change (0, 0 for non-files)."""
    old, new = change.old_bytes(), change.new_bytes()
    if is_binary(old) or is_binary(new):
        return 0, 0, True
    a, b = _lines(old), _lines(new)
    # Agents' edits are local: strip the common head and tail first (cheap), so the quadratic
    # matcher only sees the region that changed.
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    a, b = a[head : len(a) - tail], b[head : len(b) - tail]
    if not a or not b:
        return len(b), len(a), False
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed, False


def unified(change: Change, context: int = 3) -> bytes:
    """A unified diff of one change, ``a/``/``b/`` prefixed like git's; binary files say so."""
    path = change.path
    old, new = change.old_bytes(), change.new_bytes()
    a_name = b"a/" + path if change.old is not None else b"/dev/null"
    b_name = b"b/" + path if change.new is not None else b"/dev/null"
    header = b"diff --snapstore a/" + path + b" b/" + path + b"\n"
    if is_binary(old) or is_binary(new):
        return header + b"Binary files " + a_name + b" and " + b_name + b" differ\n"
    if old is None and new is None:
        return header  # a symlink or directory change: the status line says it
    lines = difflib.diff_bytes(
        difflib.unified_diff, _lines(old), _lines(new), a_name, b_name, n=context
    )
    out = [header]
    for line in lines:
        out.append(line if line.endswith(b"\n") else line + b"\n\\ No newline at end of file\n")
    return b"".join(out)
