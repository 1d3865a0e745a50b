"""Timing and peak-RSS measurement of child processes, and small statistics helpers."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field


class CommandFailed(RuntimeError):
    """A measured command exited with an unexpected status."""


@dataclass
class Proc:
    """One finished process: wall seconds, peak RSS in KiB, exit code, stderr text."""

    seconds: float
    rss_kib: int
    code: int
    stderr: str = ""


def run(
    argv: list[str],
    *,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    ok: tuple[int, ...] = (0,),
    stdout=subprocess.DEVNULL,
) -> Proc:
    """Run ``argv`` to completion; wall time around the whole process, peak RSS from wait4."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=stdout, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)
        seconds = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode("utf-8", "replace")
    proc = Proc(seconds, usage.ru_maxrss, p.returncode, text)
    if ok and proc.code not in ok:
        raise CommandFailed(f"{' '.join(argv)} exited {proc.code}: {text.strip()[:500]}")
    return proc


def output(argv: list[str], *, cwd: str | None = None, env: dict[str, str] | None = None) -> str:
    """The stdout of an unmeasured helper command (raises on failure)."""
    res = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise CommandFailed(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.strip()[:500]}")
    return res.stdout


@dataclass
class Series:
    """The runs of one figure: seconds, peak RSS (KiB) and optional bytes per run."""

    seconds: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)
    note: str = ""
    na: str = ""  # set when the operation does not exist (yet)

    def add(self, seconds: float, rss_kib: int, nbytes: int | None = None) -> None:
        self.seconds.append(seconds)
        self.rss_kib.append(rss_kib)
        if nbytes is not None:
            self.bytes.append(nbytes)

    @property
    def ok(self) -> bool:
        return not self.na and bool(self.seconds)

    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    def to_json(self) -> dict:
        doc: dict = {"na": self.na} if self.na else {}
        if self.seconds:
            doc.update(
                median_s=self.median(),
                min_s=min(self.seconds),
                max_s=max(self.seconds),
                runs_s=self.seconds,
                peak_rss_kib=max(self.rss_kib) if self.rss_kib else None,
            )
        if self.bytes:
            doc.update(median_bytes=int(statistics.median(self.bytes)), runs_bytes=self.bytes)
        if self.note:
            doc["note"] = self.note
        return doc


def disk_bytes(path: str) -> int:
    """Allocated bytes below ``path`` (like ``du -s``: st_blocks, so sparse files count as used)."""
    total = 0
    if os.path.isfile(path):
        return os.lstat(path).st_blocks * 512
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1:
        return f"{s * 1000:.0f} ms" if s >= 0.01 else f"{s * 1000:.1f} ms"
    return f"{s:.2f} s"


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
