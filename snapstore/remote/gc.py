"""``remote gc``: remove the packs and bundles nothing live names, in two phases, lock-free.

What can be garbage: a pack whose push was killed before its bundle, a bundle a forget record
took out of its history (``remote forget``, ``remote ref delete``; remote/history.py) and the
packs only such bundles name, and probe keys ``remote doctor`` could not remove.  The live
bundles are those no forget record names; live objects are those bundles and all they need
(a forgotten bundle a live one needs for its inline data stays, hidden).  Nothing younger than
``grace`` (by the engine's clock, never a client's) is ever a candidate.

1. **Condemn**: list the bundles and read each (the objects live ones need are live; a bundle
   a ref names is live whatever a forget record says), list the packs; every candidate older than the grace period is written into ``gc/plan`` (moved by
   compare-and-swap: two gc runs never both act on one plan), timed by the engine's clock read
   just before that write.
2. **Delete**, at a later run at least ``window`` after an object was condemned: the bundles are
   read again (those published since included) and a condemned object is deleted only when it
   is still unreferenced.  One that a live bundle names by then is rescued (dropped from the plan).

Why a concurrent push is safe: pack names carry a nonce, so a push only ever names packs it
uploaded itself (or an unfinished push of its store did, within :data:`push.PUSH_WINDOW`) and
objects a published bundle named.  Its own packs: a push refuses to publish more than
PUSH_WINDOW after its plan, and the grace period is longer, so a pack in flight is never a
candidate.  Objects it reuses: a push reads this plan at most :data:`push.CONFIRM_AGE` before
its own plan and never names what the plan condemns; what is condemned after that read is
deleted only :data:`WINDOW` later, longer than CONFIRM_AGE + PUSH_WINDOW plus an hour for
listings that lag, by which time that push's bundle is published and listed: it rescues them.
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
#: Default time between condemning an object and deleting it (bundles published meanwhile rescue
#: it): longer than a push's plan-read age plus its window (push.CONFIRM_AGE + push.PUSH_WINDOW),
#: plus an hour for listings that lag.
WINDOW = 8 * 3600


class RemoteGcReport:
    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        self.bundles = 0
        self.forgotten = 0  # bundles forget records took out of their histories
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
                if not layout.is_data_key(key) and not _is_probe_key(key):
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


def condemned(transport: Transport) -> set[str]:
    """The objects gc's plan condemns (one GET; empty when there is no plan)."""
    plan, _ = _load_plan(transport)
    return set(plan)


def live_objects(transport: Transport, report: RemoteGcReport) -> tuple[set[str], dict[str, int]]:
    """Every live bundle and every object one names (read from each bundle: a damaged one stops
    gc), and the forgotten bundles with their sizes and modification times."""
    from snapstore.remote import history

    live: set[str] = set()
    listed = list(transport.list("log/"))
    forgotten: set[str] = set()
    for f in history.read_forgets(transport, [e.key for e in listed if history.is_forget_key(e.key)]):
        forgotten.update(f.bundles)
    named = _ref_bundles(transport)  # a ref's bundle is live whatever a forget record says
    dead: dict[str, int] = {}
    for entry in listed:
        if history.is_forget_key(entry.key):
            continue
        report.bundles += 1
        if entry.key in forgotten and entry.key not in named:
            report.forgotten += 1
            dead[entry.key] = entry.mtime_ns
            continue
        got = transport.get(entry.key)
        if got is None:
            raise RemoteError(f"bundle {entry.key} was listed but cannot be read: gc stopped")
        bundle = layout.parse_bundle(entry.key, got.body)  # CorruptError: what it needs is unknown
        live.add(entry.key)
        live.update(bundle.needs)
    return live, dead


def _ref_bundles(transport: Transport) -> set[str]:
    """The bundles the refs name (a damaged ref stops gc: what it names is unknown)."""
    out = set()
    for entry in transport.list("refs/"):
        got = transport.get(entry.key, layout.MAX_REF)
        if got is not None:
            out.add(layout.parse_ref(entry.key, got.body).bundle)
    return out


def run(transport: Transport, *, grace_s: float = GRACE, window_s: float = WINDOW, dry_run: bool = False) -> RemoteGcReport:
    report = RemoteGcReport(dry_run)
    plan, etag = _load_plan(transport)
    now = server_now_ns(transport)  # (before the listings: a deletion needs them WINDOW after condemning)
    live, dead = live_objects(transport, report)
    sizes: dict[str, int] = {}
    candidates: set[str] = set()
    old = [(e.key, e.size, e.mtime_ns) for e in [*transport.list("packs/"), *transport.list("doctor/")]]
    for key, size_, mtime in old + [(k, 0, t) for k, t in dead.items()]:
        report.packs += key.startswith("packs/")
        if key in live:
            report.live_packs += key.startswith("packs/")
            continue
        sizes[key] = size_
        if now - mtime >= grace_s * 1e9:
            candidates.add(key)
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
    fresh = sorted(candidates - set(plan))
    report.condemned.extend(fresh)
    if dry_run:
        return report
    if fresh:  # condemned as of now: the engine's clock just before the plan is written
        stamp = server_now_ns(transport)
        new_plan.update((key, stamp) for key in fresh)
    # The nonce gives every plan its own ETag (S3's is the content's MD5: an identical rewrite
    # would let a stale compare-and-swap through).
    body = msgpack.packb({"condemned": new_plan, "time_ns": now, "nonce": os.urandom(8)}, use_bin_type=True)
    moved = transport.put_update(PLAN_KEY, body, etag) if etag is not None else transport.put_create(PLAN_KEY, body)
    if moved is None:
        raise RemoteError("another remote gc changed the plan meanwhile: run gc again later")
    return report
