"""Transient failures retried with backoff over a bounded time budget (docs/remote.md, "Outages").

A refused or reset connection, a timeout, a 5xx answer and S3's ``SlowDown`` (503) are
*transient*: the engine may be restarting or shedding load, and restic, for one, rides out a
minute of it.  :class:`RetryingTransport` retries such a request with exponential backoff and
jitter (AWS's "full jitter" on an exponential cap, never under :data:`MIN_BACKOFF_S`) while the
**outage** lasts less than the budget.  The outage clock is shared by every request of a
transport: it starts at the first failure after a success and stops at the next success, so a
command whose engine never comes back waits about one budget in all, not one per request.
Anything else (a refused credential, a missing bucket, a 404) is raised at once.

The budget (seconds): ``--retry-budget`` (:func:`set_budget`), else ``SNAPSTORE_RETRY_BUDGET``,
else the store's ``remote.retry-budget`` setting, else :data:`DEFAULT_BUDGET_S`.  0 disables
retries.  While an outage lasts, one line on a terminal's stderr says so (once per outage), and
one more when the engine answers again; a script's stderr gets only the final error, which says
how long the retries went on.

Retrying a write is safe in this protocol: objects are created only if absent and named by
their content, so a retried create that finds its key written means an earlier attempt landed
(``put_create`` answers None, which push takes as written); a retried compare-and-swap that
lost to its own first attempt reads the ref again and finds it current.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from snapstore.errors import RemoteError, UsageError
from snapstore.remote.interface import MAX_GET, Got, Listed, Transport
from snapstore.remote.s3errors import TransientError

T = TypeVar("T")

DEFAULT_BUDGET_S = 60.0
ENV = "SNAPSTORE_RETRY_BUDGET"
#: The largest budget accepted (obstore signs each request once: a retried request must not
#: outlive its signature, which S3 accepts for 15 minutes).
MAX_BUDGET_S = 600.0
INIT_BACKOFF_S = 0.2
MIN_BACKOFF_S = 0.05
MAX_BACKOFF_S = 5.0

_override: float | None = None


def parse_budget(text: str | float, what: str) -> float:
    """Seconds from ``text`` (0 to :data:`MAX_BUDGET_S`); UsageError naming ``what`` otherwise."""
    try:
        value = float(str(text).strip().lower().removesuffix("s"))
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= MAX_BUDGET_S:  # (NaN fails too)
        raise UsageError(f"{what} must be a number of seconds from 0 to {MAX_BUDGET_S:g}, not {text!r}")
    return value


def set_budget(seconds: str | float | None) -> None:
    """The budget given on the command line (``--retry-budget``): it wins over the rest."""
    global _override
    _override = None if seconds is None else parse_budget(seconds, "--retry-budget")


def budget(configured: str | None = None) -> float:
    """The retry budget in force: ``--retry-budget``, else the environment, else ``configured``
    (the store's ``remote.retry-budget``), else the default."""
    if _override is not None:
        return _override
    env = os.environ.get(ENV)
    if env:
        return parse_budget(env, ENV)
    if configured:
        return parse_budget(configured, "remote.retry-budget")
    return DEFAULT_BUDGET_S


def _say(message: str) -> None:
    """A note on stderr when it is a terminal (a script's stderr holds the one error line only;
    the error then says how long retries went on)."""
    if sys.stderr.isatty():
        sys.stderr.write(f"snapstore: {message}\n")
        sys.stderr.flush()


class RetryingTransport(Transport):
    """``inner`` with its transient failures retried over ``budget_s`` of outage."""

    def __init__(self, inner: Transport, budget_s: float, notify: Callable[[str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.inner = inner
        self.budget_s = budget_s
        self.notify = notify or (lambda message: _say(message))
        self.sleep = sleep
        self.retries = 0  # retried requests of this transport (reports may show it)
        self._lock = threading.Lock()
        self._outage: float | None = None  # monotonic time of the first failure, while it lasts
        self._told = False

    def _failed(self, exc: TransientError, attempt: int) -> float | None:
        """Seconds to wait before trying again, or None when the budget is spent."""
        now = time.monotonic()
        with self._lock:
            if self._outage is None:
                self._outage = now
            left = self._outage + self.budget_s - now
            if left <= 0:
                return None
            if not self._told:
                self._told = True
                self.notify(f"the remote is not answering ({exc.reason}); retrying for up to {self.budget_s:g} s")
            self.retries += 1
        cap = min(MAX_BACKOFF_S, INIT_BACKOFF_S * 2 ** min(attempt, 30))
        return min(left, max(MIN_BACKOFF_S, random.uniform(0, cap)))

    def _succeeded(self) -> None:
        if self._outage is None:
            return
        with self._lock:
            if self._outage is not None and self._told:
                self.notify(f"the remote answers again (after {time.monotonic() - self._outage:.0f} s)")
            self._outage, self._told = None, False

    def _wait_or_raise(self, exc: TransientError, attempt: int) -> None:
        wait = self._failed(exc, attempt)
        if wait is None:
            spent = f"{self.budget_s:g} s of retries" if self.budget_s else "no retries (budget 0)"
            raise RemoteError(f"{exc} (gave up after {spent}; see --retry-budget)") from None
        self.sleep(wait)

    def _call(self, fn: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                result = fn()
            except TransientError as exc:
                self._wait_or_raise(exc, attempt)
                attempt += 1
                continue
            self._succeeded()
            return result

    def get(self, key: str, limit: int = MAX_GET) -> Got | None:
        return self._call(lambda: self.inner.get(key, limit))

    def head(self, key: str) -> Listed | None:
        return self._call(lambda: self.inner.head(key))

    def get_range(self, key: str, start: int, end: int) -> bytes | None:
        return self._call(lambda: self.inner.get_range(key, start, end))

    def get_suffix(self, key: str, n: int) -> tuple[bytes, int] | None:
        return self._call(lambda: self.inner.get_suffix(key, n))

    def put_create(self, key: str, data: bytes) -> str | None:
        return self._call(lambda: self.inner.put_create(key, data))

    def put_update(self, key: str, data: bytes, etag: str) -> str | None:
        return self._call(lambda: self.inner.put_update(key, data, etag))

    def delete(self, key: str) -> None:
        self._call(lambda: self.inner.delete(key))

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[Listed]:
        """A listing whose failed page is asked again from the last key it gave."""
        after, attempt = start_after, 0
        while True:
            try:
                for entry in self.inner.list(prefix, after):
                    after, attempt = entry.key, 0
                    self._succeeded()
                    yield entry
            except TransientError as exc:
                self._wait_or_raise(exc, attempt)
                attempt += 1
                continue
            self._succeeded()
            return
