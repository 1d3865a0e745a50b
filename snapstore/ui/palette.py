"""Colours that stay readable: the Pygments token colours adjusted to WCAG AA contrast.

Pygments' styles are made for a white page; on the diff's green and red rows some tokens fall
under 4.5:1 (axe-core counted 285 such nodes).  :func:`token_css` takes a style's colours and
darkens each (light scheme) or lightens it (dark scheme) just enough to reach :data:`AA` against
every background a token can sit on, the ones :file:`static/ui.css` defines (keep the two in
step).  The dark scheme applies under ``prefers-color-scheme: dark``.
"""

from __future__ import annotations

import re

#: WCAG AA for normal text, with a little room for rounding.
AA = 4.6
#: Backgrounds a code token can sit on (ui.css: --bg, --soft, --add, --del, --add-word, --del-word).
LIGHT_BACKGROUNDS = ("#ffffff", "#f4f6f8", "#e3f6e7", "#fde8e8", "#b8ecc4", "#f9c5c5")
DARK_BACKGROUNDS = ("#0f1419", "#1a2028", "#11301c", "#3a1618", "#1d5a31", "#6a2226")
LIGHT_STYLE = "default"
DARK_STYLE = "github-dark"

_HEX = re.compile(r"#([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b")


def _rgb(colour: str) -> tuple[float, float, float]:
    h = colour.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    return int(h[0:2], 16) / 255, int(h[2:4], 16) / 255, int(h[4:6], 16) / 255


def _luminance(rgb: tuple[float, float, float]) -> float:
    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (lin(c) for c in rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two ``#rrggbb`` colours."""
    la, lb = _luminance(_rgb(a)), _luminance(_rgb(b))
    return (max(la, lb) + 0.05) / (min(la, lb) + 0.05)


def readable(colour: str, backgrounds: tuple[str, ...], dark: bool) -> str:
    """``colour``, mixed towards white (``dark``) or black just until it reaches :data:`AA`
    on every one of ``backgrounds``."""
    rgb = _rgb(colour)
    target = 1.0 if dark else 0.0
    for step in range(21):
        t = step / 20
        mixed = tuple(c + (target - c) * t for c in rgb)
        out = "#" + "".join(f"{round(c * 255):02x}" for c in mixed)
        if all(contrast(out, bg) >= AA for bg in backgrounds):
            return out
    return "#ffffff" if dark else "#000000"


def _adjusted(css: str, backgrounds: tuple[str, ...], dark: bool) -> str:
    """Every ``color:`` of ``css`` made readable (backgrounds and borders left alone)."""

    def fix(m: re.Match[str]) -> str:
        return "color: " + readable(m.group(1), backgrounds, dark)

    return re.sub(r"(?<![-\w])color:\s*(#[0-9a-fA-F]{3,6})\b", fix, css)


def token_css(scope: str = ".hl") -> str:
    """The token classes' CSS under ``scope``: a light scheme, and a dark one for
    ``prefers-color-scheme: dark``; token backgrounds are dropped (the row's colour shows)."""
    from pygments.formatters import HtmlFormatter

    def style(name: str) -> str:
        css: str = HtmlFormatter(style=name).get_style_defs(scope)
        rules = [line for line in css.splitlines() if line.startswith(scope + " .")]
        # a token's own background would hide the row's add/del colour (and defeat the check)
        return "\n".join(re.sub(r"background-color:\s*#[0-9a-fA-F]{3,6};?\s*", "", r) for r in rules)

    light = _adjusted(style(LIGHT_STYLE), LIGHT_BACKGROUNDS, dark=False)
    dark = _adjusted(style(DARK_STYLE), DARK_BACKGROUNDS, dark=True)
    # a token the light style colours and the dark one does not takes the page's text colour
    # (the light colour would be dark on dark)
    selectors = re.compile(r"^(\S+ \.\w+) \{", re.M)
    missing = set(selectors.findall(light)) - set(selectors.findall(dark))
    resets = "\n".join(f"{sel} {{ color: inherit; font-weight: inherit; font-style: inherit }}" for sel in sorted(missing))
    return f"{light}\n@media (prefers-color-scheme: dark) {{\n{resets}\n{dark}\n}}\n"


__all__ = ["contrast", "readable", "token_css"]
