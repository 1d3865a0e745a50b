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


def highlight(path: bytes, lines: list[str]) -> list[Html]:
    """``lines`` (consecutive lines of the file ``path``) as HTML, highlighted when a lexer fits
    the file name and they are at most :data:`MAX_HIGHLIGHT` bytes (lexing is slow on huge
    inputs).  A multi-line string opened above the first line may be coloured wrongly; the
    text never is."""
    out = [esc(line) for line in lines]
    lexer = _lexer(path)
    if lexer is None or any("\r" in line for line in lines):
        return out  # (Pygments turns \r into line breaks: the lines would no longer match)
    if sum(len(line) + 1 for line in lines) > MAX_HIGHLIGHT:
        return out
    done = _lex(lexer, lines)
    return out if done is None else done


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
    """The CSS for the token classes, scoped to ``.hl``: readable on every diff background, in
    the light and the dark scheme (:mod:`snapstore.ui.palette`)."""
    from snapstore.ui.palette import token_css

    return token_css(".hl")
