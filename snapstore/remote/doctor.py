"""Probing a remote engine: does it honour the conditional writes the protocol stands on?

Bundles and packs rely on ``If-None-Match: *`` (create-only), shared refs on ``If-Match``
(compare-and-swap).  An engine that ignores them (``rclone serve s3`` does, measured) would let
a second writer silently overwrite a ref.  The probe writes under ``doctor/<random>``, checks
each rule, lists, and removes what it wrote.  A store remembers the answer: pushes to a remote
whose probe failed publish bundles (unique keys, so still safe) but refuse to move shared refs.
"""

from __future__ import annotations

import os
from typing import Any

from snapstore.errors import RemoteError
from snapstore.remote import layout
from snapstore.remote.transport import Transport


class DoctorReport:
    """The probe's findings; ``ok`` when shared refs are safe on this engine."""

    def __init__(self) -> None:
        self.checks: dict[str, bool] = {}  # what shared refs need
        self.listing_current: bool | None = None  # a listing showed a key just written
        self.notes: list[str] = []

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(self.checks.values())

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": self.checks, "listing_current": self.listing_current, "notes": self.notes}


def probe(transport: Transport) -> DoctorReport:
    """Run every check (RemoteError when the engine cannot be reached or written at all)."""
    report = DoctorReport()
    key = f"doctor/{os.urandom(8).hex()}"
    first = transport.put_create(key, b"1")
    if first is None:
        raise RemoteError(f"the probe key {key} already existed: run doctor again")
    try:
        report.checks["create-only refuses an existing key (If-None-Match: *)"] = transport.put_create(key, b"2") is None
        report.checks["a stale compare-and-swap is refused (If-Match)"] = (
            transport.put_update(key, b"3", '"snapstore-stale-etag"') is None
        )
        swapped = transport.put_update(key, b"4", first) if first else None
        report.checks["a current compare-and-swap succeeds"] = swapped is not None
        got = transport.get(key)
        report.checks["a read returns the last successful write"] = got is not None and got.body == b"4"
        _check_ranges(transport, key, report)
        # Not a condition for refs (nothing in the protocol trusts a listing to be complete):
        # a lag only delays what `fetch` without ref names and `remote gc` see.
        report.listing_current = any(e.key == key for e in transport.list("doctor/"))
        if not report.listing_current:
            report.notes.append("listings lag behind writes: a fetch of every ref may miss the newest "
                                "ones until the next fetch; gc's grace period covers it")
        if not first:
            report.notes.append("the engine returned no ETag: compare-and-swap is impossible")
    finally:
        try:
            transport.delete(key)
        except RemoteError as exc:
            report.notes.append(f"could not remove the probe key {key}: {exc}")
    return report


def _check_ranges(transport: Transport, key: str, report: DoctorReport) -> None:
    """A note when the engine ignores ranged reads (browsing then reads whole objects: it
    works, at a cost, and the note is what makes that fallback visible here)."""
    from snapstore.remote import ranges

    before = ranges.fallbacks()
    part = transport.get_range(key, 0, 1)
    if ranges.fallbacks() > before or part != b"4":
        report.notes.append("the engine ignores ranged reads (Range): browsing with --remote reads whole "
                            "objects instead of footers and frames")


def ensure_config(transport: Transport, now_ns: int, *, create: bool) -> bytes:
    """The remote's id from its ``config``; with ``create``, written create-only when the remote
    is new (else RefError: nothing was ever pushed there)."""
    got = transport.get(layout.CONFIG_KEY, layout.MAX_CONFIG)
    if got is None and not create:
        from snapstore.errors import RefError

        raise RefError("nothing has been pushed to this remote yet (it has no config object)")
    if got is None:
        rid = os.urandom(16)
        if transport.put_create(layout.CONFIG_KEY, layout.encode_config(rid, now_ns)) is not None:
            return rid
        got = transport.get(layout.CONFIG_KEY, layout.MAX_CONFIG)  # another client made it first
        if got is None:
            raise RemoteError("the remote's config vanished while it was being written")
    return layout.parse_config(got.body)
