"""Human-readable formatting for the CLI (sizes, times, tables, progress)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def size(n: int | float) -> str:
    """``14.2 KiB``-style sizes."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def local_time(time_ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time_ns / 1e9))


def changes_summary(stats: dict[str, Any]) -> str:
    return f"+{stats.get('added', 0)} ~{stats.get('modified', 0)} -{stats.get('deleted', 0)}"


def table(rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths[:-1])] + [r[-1]]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def one_line(text: str, width: int = 50) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def dump_json(doc: Any) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False)


class Progress:
    """A progress line on stderr, only when stderr is a terminal and output is not quiet."""

    def __init__(self, label: str, enabled: bool = True, unit_bytes: bool = True):
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self.unit_bytes = unit_bytes
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done < total:
            return
        self._last = now
        pct = 100 * done / total if total else 100
        width = 30
        filled = int(width * pct / 100)
        amount = f"{size(done)} / {size(total)}" if self.unit_bytes else f"{done} / {total}"
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {pct:5.1f}% {amount}")
        sys.stderr.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
