"""Syntax highlighting with Pygments, line by line, every character escaped, cached by content.

A file is lexed from its first line (so a docstring or comment opened above a diff's hunk is
coloured as what it is, never as code) and only as far as the last line a view needs; the
tokens are cut back into lines, each an :class:`Html` of ``<span class="...">`` around escaped
text.  The lines are kept in a small cache keyed by the content's hash and the lexer: the
store is content-addressed, so the next checkpoint's "before" side, a second reader and a
lazily loaded fragment of the same file cost a dictionary look-up.  The cache holds at most
:data:`CACHE_BYTES` of markup (least recently used first out).  Lexing is counted in bytes by
the caller's budget (:mod:`snapstore.ui.budget`), never in seconds.  The classes are Pygments'
short names; :func:`stylesheet` gives their CSS under ``.hl``.  Colour is only a help: the text
is the same without it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from snapstore.ui.html import Html, esc

if TYPE_CHECKING:
    from pygments.lexer import Lexer

#: Files larger than this are shown without highlighting (lexing is slow on huge inputs).
MAX_HIGHLIGHT = 512 * 1024
#: Markup kept by the cache, in characters, across every page of the server.
CACHE_BYTES = 48 << 20


@functools.lru_cache(maxsize=512)
def _lexer_class(name: str) -> type[Lexer] | None:
    from pygments.lexers import get_lexer_for_filename
    from pygments.util import ClassNotFound

    try:
        return type(get_lexer_for_filename(name))
    except ClassNotFound:
        return None


def _lexer(path: bytes) -> Lexer | None:
    cls = _lexer_class(os.path.basename(path.decode("utf-8", "replace")))
    return None if cls is None else cls(stripnl=False, stripall=False, ensurenl=False)


@functools.lru_cache(maxsize=4096)
def _css_class(ttype: object) -> str:
    from pygments.token import STANDARD_TYPES

    t = ttype
    while t is not None:
        cls: str | None = STANDARD_TYPES.get(t)
        if cls is not None:
            return cls
        t = getattr(t, "parent", None)
    return ""


class _Cache:
    """Highlighted prefixes of files: ``key -> (lines, complete)``, bounded by their size."""

    def __init__(self, limit: int):
        self.limit = limit
        self.size = 0
        self.hits = 0
        self.entries: OrderedDict[tuple[bytes, str], tuple[list[Html], bool, int]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[bytes, str], upto: int) -> list[Html] | None:
        """The first ``upto`` lines, when a lexed prefix that long (or the whole file) is kept."""
        with self.lock:
            found = self.entries.get(key)
            if found is None or (len(found[0]) < upto and not found[1]):
                return None
            self.entries.move_to_end(key)
            self.hits += 1
            return found[0]

    def put(self, key: tuple[bytes, str], lines: list[Html], complete: bool) -> None:
        size = sum(len(line) for line in lines) + 64 * len(lines)
        if size > self.limit // 4:
            return  # one file must not push out everything else
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.size -= old[2]
            self.entries[key] = (lines, complete, size)
            self.size += size
            while self.size > self.limit and self.entries:
                _, (_, _, dropped) = self.entries.popitem(last=False)
                self.size -= dropped

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.size = self.hits = 0


CACHE = _Cache(CACHE_BYTES)


def highlighted(path: bytes, data: bytes, lines: list[bytes], upto: int, lexed: list[int] | None = None) -> list[Html] | None:
    """The first ``upto`` of ``lines`` (``data`` cut at its newlines) highlighted, lexed from the
    file's start; None when no lexer fits the name or the file is not highlighted (over
    :data:`MAX_HIGHLIGHT`, or holding ``\\r``).  ``lexed[0]`` grows by the bytes lexed (a cache
    hit lexes nothing)."""
    cls = _lexer_class(os.path.basename(path.decode("utf-8", "replace")))
    if cls is None or len(data) > MAX_HIGHLIGHT or b"\r" in data:
        return None  # (Pygments turns \r into line breaks: the lines would no longer match)
    upto = min(upto, len(lines))
    key = (hashlib.blake2b(data, digest_size=16).digest(), cls.__name__)
    found = CACHE.get(key, upto)
    if found is not None:
        return found
    lexer = cls(stripnl=False, stripall=False, ensurenl=False)
    text = [line.decode("utf-8", "replace") for line in lines]
    done = _lex(lexer, text, upto)
    if done is None:
        return None
    if lexed is not None:
        lexed[0] += sum(len(line) + 1 for line in lines[: len(done)])
    CACHE.put(key, done, len(done) >= len(lines))
    return done


def highlight(path: bytes, lines: list[str]) -> list[Html]:
    """``lines`` (consecutive lines of the file ``path``, from its first) as HTML, highlighted
    when a lexer fits the file name and they are at most :data:`MAX_HIGHLIGHT` bytes."""
    out = [esc(line) for line in lines]
    lexer = _lexer(path)
    if lexer is None or any("\r" in line for line in lines):
        return out
    if sum(len(line) + 1 for line in lines) > MAX_HIGHLIGHT:
        return out
    done = _lex(lexer, lines, len(lines))
    return out if done is None or len(done) != len(lines) else done


def _lex(lexer: Lexer, lines: list[str], upto: int) -> list[Html] | None:
    """The first ``upto`` lines (at least) of ``lines`` lexed from the first: tokens are read
    only until that many lines are complete."""
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
        if len(out) > upto:
            return [Html("".join(parts)) for parts in out[:upto]]  # the lines up to ``upto`` are complete
    if len(out) != len(lines):
        return None  # the lexer's lines do not match the file's
    return [Html("".join(parts)) for parts in out]


def stylesheet() -> str:
    """The CSS for the token classes, scoped to ``.hl``: readable on every diff background, in
    the light and the dark scheme (:mod:`snapstore.ui.palette`)."""
    from snapstore.ui.palette import token_css

    return token_css(".hl")


def lex_cost(path: bytes, sizes: list[int]) -> int:
    """The most bytes highlighting sides of these ``sizes`` of the file ``path`` can lex
    (0 when no lexer fits the name; sides over :data:`MAX_HIGHLIGHT` are not lexed)."""
    if _lexer_class(os.path.basename(path.decode("utf-8", "replace"))) is None:
        return 0
    return sum(n for n in sizes if n <= MAX_HIGHLIGHT)
