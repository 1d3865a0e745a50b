"""``remote gc``: remove the packs no bundle names, in two phases, lock-free.

What can be garbage: a pack whose push was killed before its bundle (bundles are never removed:
they are the published history), and probe keys ``remote doctor`` could not remove.  Nothing
younger than ``grace`` (by the engine's clock, never a client's) is ever a candidate.

1. **Condemn**: list the bundles and read each (the packs they need are live), list the packs;
   every pack no bundle names and older than the grace period is written into ``gc/plan``
   (moved by compare-and-swap: two gc runs never both act on one plan).
2. **Delete**, at a later run at least ``window`` after a pack was condemned: the bundles are
   read again (those published since included) and a condemned pack is deleted only when it is
   still unreferenced.  One that a bundle names by then is rescued (dropped from the plan).

Why a concurrent push is safe: pack names carry a nonce, so a push only ever names packs it
uploaded itself or packs a published bundle already names (those are live forever).  A push
refuses to publish a bundle more than :data:`push.PUSH_WINDOW` after its first pack upload, and
the grace period is longer than that: a pack in flight is never a candidate.
"""

from __future__ import annotations

import os
from typing import Any

import msgpack

from snapstore.errors import CorruptError, RemoteError
from snapstore.remote import layout, wire
from snapstore.remote.transport import Transport

PLAN_KEY = "gc/plan"
CLOCK_KEY = "gc/clock"
#: Default grace period: covers pushes in flight (at most PUSH_WINDOW), clock skew, LIST lag.
GRACE = 24 * 3600
#: The largest plan read (about 100 bytes per condemned object).
MAX_PLAN = 64 << 20
#: Default time between condemning a pack and deleting it (bundles published meanwhile rescue it).
WINDOW = 3600


class RemoteGcReport:
    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.bundles = 0
        self.packs = 0
        self.live_packs = 0
        self.condemned: list[str] = []  # newly condemned in this run
        self.deleted: list[str] = []
        self.rescued: list[str] = []
        self.waiting = 0  # condemned earlier, not yet past the window
        self.bytes_deleted = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def server_now_ns(transport: Transport) -> int:
    """The engine's clock: the modification time of an object written just now (read back
    by a GET, read-after-write consistent, not by a listing, which may lag)."""
    got = transport.get(CLOCK_KEY, 1024)
    body = os.urandom(8)  # a new ETag each time (see run)
    if got is None:
        transport.put_create(CLOCK_KEY, body)
    else:
        transport.put_update(CLOCK_KEY, body, got.etag)  # (a lost race wrote it just as well)
    got = transport.get(CLOCK_KEY, 1024)
    if got is None or not got.mtime_ns:
        raise RemoteError("the engine gives no modification time for an object just written (gc needs its clock)")
    return got.mtime_ns


def _load_plan(transport: Transport) -> tuple[dict[str, int], str | None]:
    got = transport.get(PLAN_KEY, MAX_PLAN)
    if got is None:
        return {}, None
    try:
        return _read_plan(got.body), got.etag
    except (KeyError, ValueError, TypeError, msgpack.UnpackException) as exc:
        raise CorruptError(f"remote object {PLAN_KEY} is corrupt ({exc}); remove it to start gc afresh") from None


def _read_plan(body: bytes) -> dict[str, int]:
    """The condemned keys of a plan, each checked as it is read (:class:`wire.SchemaReader`)."""
    r = wire.SchemaReader(body)
    condemned: dict[str, int] | None = None
    for _ in range(r.map()):
        field = r.str_(32)
        if field == "condemned" and condemned is None:
            condemned = {}
            for _ in range(r.map()):
                key = r.str_(layout.MAX_KEY)
                if not (layout.is_data_key(key) and key.startswith("packs/")) and not _is_probe_key(key):
                    raise ValueError(f"it condemns {key!r}, which gc never deletes")
                condemned[key] = r.int_()
        elif field == "time_ns":
            r.int_()
        elif field == "nonce":
            r.bytes_(64)
        else:
            raise ValueError(f"unexpected field {field!r}")
    r.done()
    if condemned is None:
        raise KeyError("condemned")
    return condemned


def _is_probe_key(key: str) -> bool:
    parts = key.split("/")
    return len(parts) == 2 and parts[0] == "doctor" and parts[1] not in ("", ".", "..")


def live_packs(transport: Transport, report: RemoteGcReport) -> set[str]:
    """Every object a bundle names (read from each bundle: a damaged one stops gc)."""
    live: set[str] = set()
    for entry in transport.list("log/"):
        got = transport.get(entry.key)
        if got is None:
            raise RemoteError(f"bundle {entry.key} was listed but cannot be read: gc stopped")
        bundle = layout.parse_bundle(entry.key, got.body)  # CorruptError: what it needs is unknown
        live.update(bundle.needs)
        report.bundles += 1
    return live


def run(transport: Transport, *, grace_s: float = GRACE, window_s: float = WINDOW, dry_run: bool = False) -> RemoteGcReport:
    report = RemoteGcReport(dry_run)
    plan, etag = _load_plan(transport)
    now = server_now_ns(transport)
    live = live_packs(transport, report)
    sizes: dict[str, int] = {}
    candidates: set[str] = set()
    for entry in list(transport.list("packs/")) + list(transport.list("doctor/")):
        report.packs += entry.key.startswith("packs/")
        if entry.key in live:
            report.live_packs += 1
            continue
        sizes[entry.key] = entry.size
        if now - entry.mtime_ns >= grace_s * 1e9:
            candidates.add(entry.key)
    new_plan: dict[str, int] = {}
    for key, since in plan.items():
        if key not in candidates:
            if key in live:
                report.rescued.append(key)
            continue  # rescued, or already gone
        if now - since >= window_s * 1e9:
            if not dry_run:
                transport.delete(key)
            report.deleted.append(key)
            report.bytes_deleted += sizes.get(key, 0)
        else:
            new_plan[key] = since
            report.waiting += 1
    for key in sorted(candidates - set(plan)):
        new_plan[key] = now
        report.condemned.append(key)
    if dry_run:
        return report
    # The nonce gives every plan its own ETag (S3's is the content's MD5: an identical rewrite
    # would let a stale compare-and-swap through).
    body = msgpack.packb({"condemned": new_plan, "time_ns": now, "nonce": os.urandom(8)}, use_bin_type=True)
    moved = transport.put_update(PLAN_KEY, body, etag) if etag is not None else transport.put_create(PLAN_KEY, body)
    if moved is None:
        raise RemoteError("another remote gc changed the plan meanwhile: run gc again later")
    return report
