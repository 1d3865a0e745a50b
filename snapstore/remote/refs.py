"""Moving a shared ref: compare-and-swap only, no lock.

A ref is the one mutable object on a remote.  It is moved with ``If-Match: <etag>`` (or created
with ``If-None-Match: *``); when the engine answers 412 another writer won, so the loser reads
the ref again and decides again: a fast-forward (the ref's checkpoint is an ancestor of the new
one) or ``force`` tries again, anything else is left as it is (*diverged*: the bundle is already
published, so nothing is lost, and the ref keeps the winner's checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from snapstore.errors import CorruptError, RemoteError
from snapstore.remote import layout
from snapstore.remote.state import SeenRef
from snapstore.remote.transport import Transport

#: Rounds of read-and-swap before giving up (each lost round means another writer moved it).
MAX_ROUNDS = 64


class RefMove(NamedTuple):
    """What happened to a ref: ``moved`` (to ours), ``current`` (already ours), ``diverged``."""

    outcome: str
    ref: layout.Ref | None  # the ref as it is now, as far as we know
    etag: str
    rounds: int  # compare-and-swap attempts (1 when nobody raced us)


def read(transport: Transport, name: str) -> tuple[layout.Ref | None, str]:
    key = layout.ref_key(name)
    got = transport.get(key, layout.MAX_REF)
    if got is None:
        return None, ""
    return layout.parse_ref(key, got.body), got.etag


def advance(
    transport: Transport,
    name: str,
    new: layout.Ref,
    *,
    descends_from: Callable[[bytes], bool],
    force: bool = False,
    seen: SeenRef | None = None,
    remote: str = "",
) -> RefMove:
    """Point ref ``name`` at ``new`` by compare-and-swap, re-reading after each lost race.

    ``seen`` is the ref as this store last saw or set it: when still current, the swap needs no
    read first (an incremental push then costs one request for its ref).  The body written is
    always later than the one it replaces and than ``seen`` (:func:`later`); a ref read older
    than ``seen`` is an old version put back, refused (:func:`check_not_older`).
    """
    key = layout.ref_key(name)
    floor = seen.time_ns if seen is not None else 0
    cur: layout.Ref | None
    if seen is not None and seen.checkpoint != new.checkpoint:
        cur, etag = layout.Ref(seen.checkpoint, seen.bundle, seen.time_ns, ""), seen.etag
    else:  # (a ref seen at our checkpoint already is read: "current" must be true now)
        cur, etag = read(transport, name)
        check_not_older(cur, seen, name, remote)
    for rounds in range(1, MAX_ROUNDS + 1):
        if cur is None:
            mine = later(new, floor)
            got = transport.put_create(key, layout.encode_ref(mine))
        else:
            if cur.checkpoint == new.checkpoint:
                return RefMove("current", cur, etag, rounds - 1)
            if not force and not descends_from(cur.checkpoint):
                return RefMove("diverged", cur, etag, rounds - 1)
            mine = later(new, max(floor, cur.time_ns))
            got = transport.put_update(key, layout.encode_ref(mine), etag)
        if got is not None:
            return RefMove("moved", mine, got, rounds)
        cur, etag = read(transport, name)  # lost the race (or our cache was stale)
        check_not_older(cur, seen, name, remote)
    raise RemoteError(f"the ref {name} kept changing: gave up after {MAX_ROUNDS} attempts")


def later(new: layout.Ref, than_ns: int) -> layout.Ref:
    """``new`` timed after ``than_ns`` (the version it replaces, or the one this store saw).

    Each version of a ref is later than the one before whatever the writers' clocks say, so a
    reader that saw one version can tell an older one put back (the time is inside the ref's body,
    which an encrypted remote seals: a writer of the bucket cannot make a later one)."""
    return new if new.time_ns > than_ns else new._replace(time_ns=than_ns + 1)


def check_not_older(ref: layout.Ref | None, seen: SeenRef | None, name: str, remote: str) -> None:
    """CorruptError when ``ref`` is older than the version of it this store saw (or as old, with
    another checkpoint): someone who can write the bucket put an old version back."""
    if ref is None or seen is None or not seen.time_ns:
        return
    if ref.time_ns > seen.time_ns or (ref.time_ns == seen.time_ns and ref.checkpoint == seen.checkpoint):
        return
    raise CorruptError(
        f"the remote {remote}'s ref {name} went back: its version of {_when(ref.time_ns)} is older than "
        f"the one this store saw ({_when(seen.time_ns)}): an old version put back by a writer of the "
        "bucket; nothing was taken (if the ref was deleted and pushed again since, "
        f"'snapstore remote remove {remote}' then 'remote add' forgets what this store saw)"
    )


def _when(time_ns: int) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(max(0, time_ns) / 1e9))


def first_problem(problems: list[str]) -> CorruptError:
    """The error to raise for the damaged refs ``problems`` lists (the first, and a count)."""
    more = f" (and {len(problems) - 1} more damaged refs)" if len(problems) > 1 else ""
    return CorruptError(problems[0] + more)


def names(transport: Transport) -> list[str]:
    """The names of the remote's refs (one LIST page per 1,000); keys no writer of ours could
    have made are skipped (remote verify reports damage, a listing is no place for it)."""
    out = []
    for entry in transport.list("refs/"):
        try:
            out.append(layout.ref_name(entry.key))
        except ValueError:
            continue
    return out


def listing(t: Transport, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every ref: name, checkpoint, bundle, time, writer (one LIST, one GET each).  A damaged
    ref is left out: a line of ``problems`` when given, else the first is raised (CorruptError)
    once every ref is read."""
    out = []
    bad: list[str] = [] if problems is None else problems
    for name in names(t):
        try:
            ref, _ = read(t, name)
        except CorruptError as exc:
            bad.append(exc.message)
            continue
        if ref is not None:
            out.append({"ref": name, "checkpoint": ref.checkpoint.hex(), "bundle": ref.bundle,
                        "time_ns": ref.time_ns, "writer": ref.writer})
    if bad and problems is None:
        raise first_problem(bad)
    return out
