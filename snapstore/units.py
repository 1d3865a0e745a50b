"""Text for people, below every layer: sizes (``14.2 KiB``) and text made safe for a terminal.

It lives here, not in ``render`` (ops may not import render) nor in ``ops.textdiff`` (whose
imports, difflib among them, a plain CLI snapshot should not pay for); ``render`` offers both.
"""

from __future__ import annotations


def human_size(n: int | float) -> str:
    """``768.0 MiB``-style sizes: bytes as an integer, larger units with one decimal."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


#: Translation tables of :func:`printable`, per set of kept characters (built on first use).
_TABLES: dict[str, dict[int, str]] = {}


def printable(text: str, keep: str = "\n\t") -> str:
    """``text`` with every C0 and C1 control character and DEL (but those in ``keep``) shown as
    ``\\xNN``: text that came from outside (a checkpoint message, a file name, a conversation, a
    tool name, a remote's answer) cannot drive the terminal it is printed on (OSC 52 writes the
    clipboard, CSI 2J clears the screen, BEL rings)."""
    if text.isprintable():  # (the common case, at C speed: no control character at all)
        return text
    table = _TABLES.get(keep)
    if table is None:
        codes = [*range(0x20), *range(0x7F, 0xA0)]
        table = _TABLES[keep] = {c: f"\\x{c:02x}" for c in codes if chr(c) not in keep}
    return text.translate(table)


def printable_bytes(data: bytes) -> bytes:
    """:func:`printable` for bytes meant for a terminal (a patch): control bytes, and C1 control
    characters encoded as UTF-8, shown as ``\\xNN``; newlines and tabs kept."""
    import re

    def shown(m: re.Match[bytes]) -> bytes:
        return b"\\x%02x" % m.group()[-1]  # (a C1 character: its second byte is its code)

    return re.sub(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", shown, data)
