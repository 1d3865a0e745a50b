"""Syntax highlighting with Pygments, line by line, every character escaped.

A file is lexed whole (so a multi-line string or comment is coloured right) and the tokens are
cut back into lines, each an :class:`Html` of ``<span class="...">`` around escaped text.  The
classes are Pygments' short names; :func:`stylesheet` gives their CSS under ``.hl``.  Colour is
only a help: the text is the same without it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from snapstore.ui.html import Html, esc

if TYPE_CHECKING:
    from pygments.lexer import Lexer

#: Files larger than this are shown without highlighting (lexing is slow on huge inputs).
MAX_HIGHLIGHT = 512 * 1024
#: Lines lexed before a diff window, so a construct opened shortly above is coloured right.
LOOKBEHIND = 60


def split_lines(data: bytes) -> tuple[list[str], bool]:
    """``(lines, ends_with_newline)``: the text of ``data`` (UTF-8, bad bytes replaced) by line."""
    text = data.decode("utf-8", "replace")
    lines = text.split("\n")
    newline_at_end = lines[-1] == ""
    if newline_at_end:
        lines.pop()
    return lines, newline_at_end or not data


def _lexer(path: bytes) -> Lexer | None:
    from pygments.lexers import get_lexer_for_filename
    from pygments.util import ClassNotFound

    name = os.path.basename(path.decode("utf-8", "replace"))
    try:
        return get_lexer_for_filename(name, stripnl=False, stripall=False, ensurenl=False)
    except ClassNotFound:
        return None


def _css_class(ttype: object) -> str:
    from pygments.token import STANDARD_TYPES

    t = ttype
    while t is not None:
        cls: str | None = STANDARD_TYPES.get(t)
        if cls is not None:
            return cls
        t = getattr(t, "parent", None)
    return ""


def highlight(path: bytes, lines: list[str], windows: list[tuple[int, int]] | None = None) -> list[Html]:
    """``lines`` (of the file ``path``) as HTML, highlighted when a lexer fits the file name.

    With ``windows`` (``[start, end)`` line ranges: the lines a diff shows), only those are
    highlighted, each lexed from :data:`LOOKBEHIND` lines earlier: a diff of a long file costs
    what it shows.  A multi-line string opened further up may then be coloured wrongly; the
    text never is.
    """
    out = [esc(line) for line in lines]
    lexer = _lexer(path)
    if lexer is None or any("\r" in line for line in lines):
        return out  # (Pygments turns \r into line breaks: the lines would no longer match)
    spans = [(0, len(lines))] if windows is None else _merge([(max(0, a - LOOKBEHIND), b) for a, b in windows if b > a])
    for start, end in spans:
        if sum(len(line) + 1 for line in lines[start:end]) > MAX_HIGHLIGHT:
            continue
        done = _lex(lexer, lines[start:end])
        if done is not None:
            out[start:end] = done
    return out


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def _lex(lexer: Lexer, lines: list[str]) -> list[Html] | None:
    from html import escape

    out: list[list[str]] = [[]]
    for ttype, value in lexer.get_tokens("\n".join(lines)):
        cls = _css_class(ttype)  # one of Pygments' short class names: letters only
        for i, piece in enumerate(value.split("\n")):
            if i:
                out.append([])
            if piece:
                text = escape(piece, quote=False)
                out[-1].append(f'<span class="{cls}">{text}</span>' if cls else text)
    if len(out) != len(lines):
        return None
    return [Html("".join(parts)) for parts in out]


def stylesheet() -> str:
    """The CSS for the token classes (Pygments' default style), scoped to ``.hl``."""
    from pygments.formatters import HtmlFormatter

    css: str = HtmlFormatter(style="default").get_style_defs(".hl")
    return css
