"""Remote retention: ``remote forget`` (keep rules) and ``remote ref delete``.

Neither deletes anything.  Each publishes a forget record (remote/history.py) naming the bundles
that leave a ref's history; readers leave them out at once, and ``remote gc`` reclaims, two-phase,
what only they hold.  A push racing a forget is safe: a record names only bundles its writer
read, so a bundle published meanwhile stays in the history, and gc keeps all a live bundle needs.

The unit is the bundle (one push): a bundle is forgotten when none of its checkpoints is kept.
A checkpoint pushed together with a kept one stays (``shared`` in the report).  The ref's
checkpoint is always kept.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

from snapstore.errors import RefError, UsageError
from snapstore.records.checkpoint import parse_record
from snapstore.remote import history, layout, refs, state
from snapstore.remote.transport import Transport

if TYPE_CHECKING:
    from snapstore.remote.state import RemoteConfig
    from snapstore.storage.backend import Backend


class Rules(NamedTuple):
    """What ``remote forget`` keeps of each ref's history: the ``keep_last`` newest
    checkpoints, those less than ``keep_within_ns`` older than the newest, and all but those of
    ``task`` when a task is named."""

    keep_last: int | None = None
    keep_within_ns: int | None = None
    task: str | None = None

    def check(self) -> None:
        if self.keep_last is None and self.keep_within_ns is None:
            raise UsageError("say what to keep: --keep-last N and/or --keep-within DURATION")


class RefForget:
    """What forgetting did (or would do) to one ref's history."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.kept: list[str] = []
        self.forgotten: list[str] = []  # checkpoints whose bundles leave the history
        self.shared: list[str] = []  # not kept by a rule, but in a bundle with a kept one
        self.bundles: list[str] = []  # bundles named by the forget record
        self.record = ""  # the forget record's key ("" when none was written)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Cp(NamedTuple):
    cid: bytes
    time_ns: int
    task: str | None
    bundle: str


def choose(bundles: list[layout.Bundle], head: bytes, rules: Rules, out: RefForget) -> None:
    """Fill ``out`` with what ``rules`` keep of the history ``bundles`` (oldest first)."""
    cps = [
        _Cp(cid, p.time_ns, p.task, b.key)
        for b in bundles for cid, rec in b.checkpoints for p in [parse_record(cid, rec)]
    ]
    newest = max((c.time_ns for c in cps), default=0)
    candidates = sorted((c for c in cps if rules.task is None or c.task == rules.task), key=lambda c: -c.time_ns)
    chosen = {c.cid for c in candidates}
    keep = {c.cid for c in cps if c.cid not in chosen} | {head}
    if rules.keep_last is not None:
        keep.update(c.cid for c in candidates[: rules.keep_last])
    if rules.keep_within_ns is not None:
        keep.update(c.cid for c in candidates if newest - c.time_ns < rules.keep_within_ns)
    live_bundles = {c.bundle for c in cps if c.cid in keep}
    for c in cps:
        if c.cid in keep:
            out.kept.append(c.cid.hex())
        elif c.bundle in live_bundles:
            out.shared.append(c.cid.hex())
        else:
            out.forgotten.append(c.cid.hex())
    out.bundles = sorted({b.key for b in bundles} - live_bundles)


def _bundles(transport: Transport, keys: list[str]) -> list[layout.Bundle]:
    from snapstore.errors import CorruptError
    from snapstore.remote.fetch import parallel_map

    def read(key: str) -> layout.Bundle | None:
        got = transport.get(key)
        return None if got is None else layout.parse_bundle(key, got.body)

    out = [b for b in parallel_map(read, keys) if b is not None]
    for b in out:
        if not b.checkpoints:
            raise CorruptError(f"remote object {b.key} is corrupt (a bundle with no checkpoint)")
    return out


def forget(
    transport: Transport, name: str, rules: Rules, *, backend: Backend, cfg: RemoteConfig, dry_run: bool,
) -> RefForget:
    """Apply ``rules`` to ref ``name``'s history: read every bundle of it, then (unless
    ``dry_run``) publish one forget record naming the bundles nothing kept is in.  A ref older
    than the version this store saw is refused (what is kept counts from the ref's checkpoint)."""
    out = RefForget(name)
    ref, _ = refs.read(transport, name)
    if ref is None:
        raise RefError(f"the remote has no ref {name!r} ('snapstore remote ls' lists them)")
    refs.check_not_older(ref, state.seen_ref(backend, cfg.rid, name), name, cfg.name)
    writer, by = cfg.writer, who(backend)
    hist = history.read(transport, name)
    keys = list(hist.bundles)
    if ref.bundle not in keys and ref.bundle.startswith(layout.log_prefix(name)):
        keys.append(ref.bundle)
    choose(_bundles(transport, keys), ref.checkpoint, rules, out)
    if out.bundles and not dry_run:
        out.record = publish(transport, name, out.bundles, writer=writer, who=by)
    return out


def publish(transport: Transport, ns: str, bundles: list[str], *, writer: str, who: tuple[str, str]) -> str:
    """Write a forget record for ``bundles`` of ``ns`` (create-only); its key."""
    now = time.time_ns()
    body = history.encode_forget(ns, writer, now, bundles, user=who[0], host=who[1])
    key = history.forget_key(ns, now, writer, body)
    transport.put_create(key, body)
    return key


def delete_ref(transport: Transport, name: str, *, writer: str, who: tuple[str, str]) -> RefForget:
    """Remove ref ``name`` and forget its whole history (every bundle listed under it now;
    one a push publishes meanwhile stays, unnamed by any ref)."""
    out = RefForget(name)
    ref, _ = refs.read(transport, name)
    if ref is None:
        raise RefError(f"the remote has no ref {name!r} ('snapstore remote ls' lists them)")
    keys = set(history.read(transport, name).bundles)
    if ref.bundle.startswith(layout.log_prefix(name)):
        keys.add(ref.bundle)
    out.bundles = sorted(keys)
    out.forgotten = [ref.checkpoint.hex()]
    if out.bundles:
        out.record = publish(transport, name, out.bundles, writer=writer, who=who)
    transport.delete(layout.ref_key(name))
    return out


def who(backend: Backend | None = None) -> tuple[str, str]:
    """The user and host a push or forget records: as config ``remote.identity`` of the store
    at ``backend`` says, the system's (empty when it cannot say), none (``anonymous``), or
    ``NAME[@HOST]``."""
    import getpass
    import socket

    from snapstore.ops.retention import read_config

    if backend is None:
        identity = "system"
    else:
        with backend.read() as view:
            identity = read_config(view)["remote.identity"]

    if identity == "anonymous":
        return "", ""
    if identity != "system":
        user, _, host = identity.partition("@")
        return user, host

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, no LOGNAME
        user = ""
    try:
        host = socket.gethostname()
    except OSError:
        host = ""
    return user, host


class ForgetReport:
    """What ``remote forget`` or ``remote ref delete`` did per ref, and its request count."""

    def __init__(self, remote: str, dry_run: bool) -> None:
        self.remote = remote
        self.dry_run = dry_run
        self.refs: list[RefForget] = []
        self.requests = 0

    def to_json(self) -> dict[str, object]:
        return {"remote": self.remote, "dry_run": self.dry_run, "refs": [r.to_json() for r in self.refs],
                "requests": self.requests}
