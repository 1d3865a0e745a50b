"""Sizes for people (``14.2 KiB``): the one formatter, below every layer.

It lives here, not in ``render`` (ops may not import render) nor in ``ops.textdiff`` (whose
imports, difflib among them, a plain CLI snapshot should not pay for).
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
