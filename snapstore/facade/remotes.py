"""Remotes: push, fetch, pull and clone through S3-compatible object storage (docs/remote.md).

Each method opens one transport (obstore, imported here, never at start-up), counts its
requests into the report it returns, and takes the writer lock only around its local writes:
a long transfer never blocks the agent's snapshots.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from snapstore.errors import CorruptError, RefError, SnapstoreError, UsageError
from snapstore.facade.base import StoreBase
from snapstore.facade.remote_history import who
from snapstore.records.checkpoint import Checkpoint

if TYPE_CHECKING:
    from snapstore.ops.restore import RestoreReport
    from snapstore.remote.doctor import DoctorReport
    from snapstore.remote.fetch import FetchedRef
    from snapstore.remote.gc import RemoteGcReport
    from snapstore.remote.push import PushReport
    from snapstore.remote.state import RemoteConfig
    from snapstore.remote.transport import CountingTransport
    from snapstore.remote.verify import RemoteVerifyReport
    from snapstore.storage.backend import Backend

Progress = Callable[[int, int], None]
#: The ref a push without ``--task``/``--to`` moves, and the one clone and pull prefer.
DEFAULT_REF = "default"
#: Parent links followed to decide whether a ref move is a fast-forward.
ANCESTRY_LIMIT = 100_000


class FetchReport:
    """What a fetch (or the fetch of a pull or clone) did, per ref, and its request count."""

    def __init__(self, remote: str) -> None:
        self.remote = remote
        self.refs: list[FetchedRef] = []
        #: One line per ref that could not be fetched (damaged, or naming damaged objects):
        #: the sound refs are fetched all the same.
        self.problems: list[str] = []
        self.requests = 0
        self.restore: RestoreReport | None = None
        self.directory: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "remote": self.remote, "refs": [r.to_json() for r in self.refs], "problems": self.problems,
            "requests": self.requests,
        }
        if self.directory is not None:
            d["directory"] = self.directory
        if self.restore is not None:
            d["restore"] = self.restore.to_json()
        return d


class RemotesMixin(StoreBase):
    """remote add/list/remove/ls/verify/doctor, push, fetch, pull and clone."""

    #: A browsing cache's transport (:meth:`_read_through`): its requests, counted.
    remote_requests: CountingTransport | None = None

    # -- settings ---------------------------------------------------------------------------

    def remote_add(
        self, name: str, url: str, *, endpoint: str | None = None, region: str | None = None,
        profile: str | None = None,
    ) -> RemoteConfig:
        """Record remote ``name`` at ``url`` (``s3://bucket/prefix``).  No request is made and
        no credential is stored: keys come from the AWS environment variables or ``profile``."""
        from snapstore.remote import state

        cfg = state.new_config(name, url, endpoint, region, profile)
        with self._lock.held():
            with self.backend.read() as view:
                if view.get(state.TABLE, b"c:" + name.encode()) is not None:
                    raise UsageError(f"a remote named {name!r} exists already (remove it first)")
            with self.backend.write() as batch:
                state.put_config(batch, cfg)
        return cfg

    def remote_list(self) -> list[RemoteConfig]:
        """Every remote, with what was last seen of its refs."""
        from snapstore.remote import state

        return state.all_configs(self.backend)

    def remote_remove(self, name: str) -> None:
        """Forget remote ``name``, what this store knew about it and its browsing cache (the
        remote is untouched)."""
        from snapstore.remote import state

        cfg = state.get_config(self.backend, name)
        with self._lock.held():
            state.remove(self.backend, cfg)
            if self.store_dir is not None:
                shutil.rmtree(os.path.dirname(cache_dirs(self.store_dir, cfg)[0]), ignore_errors=True)

    def remote_refs_seen(self, name: str) -> dict[str, str]:
        """The remote's refs as this store last saw or set them: name -> checkpoint id."""
        from snapstore.remote import state

        cfg = state.get_config(self.backend, name)
        return {k: v.checkpoint.hex() for k, v in state.seen_refs(self.backend, cfg.rid).items()}

    def _connect(self, name: str, *, writing: bool = False, empty_ok: bool = False) -> tuple[RemoteConfig, CountingTransport]:
        """The remote's settings and a counting transport.  On first contact its config is
        read (a first push writes it), and before the first push the engine's conditional
        writes are probed; both are remembered, so later commands make neither request.
        Reading commands never write (a read-only credential can fetch and clone)."""
        from snapstore.remote import doctor, state, transport

        cfg = state.get_config(self.backend, name)
        t = transport.CountingTransport(
            transport.connect(cfg.parsed, endpoint=cfg.endpoint, region=cfg.region, profile=cfg.profile)
        )
        if cfg.remote_id is None or (writing and cfg.cas is None):
            try:
                remote_id = cfg.remote_id or doctor.ensure_config(t, time.time_ns(), create=writing)
            except RefError:
                if empty_ok:  # nothing pushed there yet: an empty remote to list or verify
                    return cfg, t
                raise
            cas = doctor.probe(t).ok if writing else cfg.cas
            cfg = cfg._replace(remote_id=remote_id, cas=cas)
            with self._lock.held(), self.backend.write() as batch:
                state.put_config(batch, cfg)
        return cfg, t

    # -- push -------------------------------------------------------------------------------

    def push(
        self,
        refs: Sequence[str] = (),
        *,
        remote: str = "origin",
        task: str | None = None,
        to: str | None = None,
        force: bool = False,
        progress: Progress | None = None,
    ) -> PushReport:
        """Publish checkpoints on ``remote``: ``refs`` (default: the latest checkpoint, or with
        ``task`` every checkpoint of that task), wholly or not at all, then move the remote ref
        ``to`` (default: the task, else ``default``) by compare-and-swap when that is a
        fast-forward (or ``force``).  Only the chunks those checkpoints reach are uploaded."""
        from snapstore.remote import push

        cps = self._to_push(refs, task)
        ns = to or task or cps[-1].task or DEFAULT_REF
        cfg, t = self._connect(remote, writing=True)
        with self.backend.read() as view:
            records = [(bytes.fromhex(c.id), view.get("checkpoints", bytes.fromhex(c.id)) or b"") for c in cps]
        report = push.run(
            self.backend, t, cfg, records, ns, level=self.compression_level, lock=self._lock.held,
            descends_from=lambda old: self._descends(bytes.fromhex(cps[-1].id), old),
            force=force, move_ref=cfg.cas is not False, progress=progress, who=who(),
        )
        if cfg.cas is False:
            report.ref_outcome = "refused"  # the engine ignores conditional writes (remote doctor)
        report.requests = t.requests
        return report

    def _to_push(self, refs: Sequence[str], task: str | None) -> list[Checkpoint]:
        if refs:
            cps = {c.id: c for c in (self.resolve(r, task=task) for r in refs)}
            chosen = list(cps.values())
        elif task is not None:
            chosen = self.checkpoints(task=task)
            if not chosen:
                raise RefError(f"no checkpoint of task {task!r}")
        else:
            chosen = [self.resolve("latest")]
        return sorted(chosen, key=lambda c: (c.time_ns, c.id))

    def _descends(self, head: bytes, old: bytes) -> bool:
        """Whether ``old`` is ``head`` or one of its ancestors in this store."""
        from snapstore.records.checkpoint import parse_record

        cur: bytes | None = head
        with self.backend.read() as view:
            for _ in range(ANCESTRY_LIMIT):
                if cur is None:
                    return False
                if cur == old:
                    return True
                packed = view.get("checkpoints", cur)
                if packed is None:
                    return False
                try:
                    parent = parse_record(cur, packed).parent
                except SnapstoreError:
                    return False
                cur = bytes.fromhex(parent) if parent else None
        return False

    # -- fetch, pull, clone -----------------------------------------------------------------

    def fetch(
        self, refs: Sequence[str] = (), *, remote: str = "origin", progress: Progress | None = None,
        keep_going: bool = False,
    ) -> FetchReport:
        """Bring the checkpoints of the remote ``refs``' histories (default: every ref) and all
        they reach into this store; the tree is not touched.  Each history is listed from where
        the last fetch stopped: only pushes not taken up yet are read.

        A ref that is damaged or names damaged objects adds nothing and does not stop the
        others: with ``keep_going`` it is a line of ``report.problems``, else the first such
        problem is raised (CorruptError) once the sound refs are fetched."""
        from snapstore.remote import fetch

        cfg, t = self._connect(remote, empty_ok=not refs)
        report = FetchReport(cfg.name)
        try:
            names = list(refs)
            if not names:
                names = _ref_names(t)
            for name in names:
                try:
                    report.refs.append(fetch.fetch_ref(
                        self.backend, t, cfg, name, lock=self._lock.held, progress=progress,
                        add=partial(fetch.add_bundle, excluded=self.excluded, keep_latest=True), whole_history=True,
                    ))
                except CorruptError as exc:
                    report.problems.append(exc.message)
        finally:
            report.requests = t.requests
        if report.problems and not keep_going:
            raise _first(report.problems)
        return report

    def _default_ref(self, t: CountingTransport) -> str:
        names = _ref_names(t)
        if DEFAULT_REF in names or not names:
            return DEFAULT_REF
        if len(names) == 1:
            return names[0]
        raise UsageError(f"the remote has several refs ({', '.join(sorted(names)[:10])}): name one")

    def pull(
        self, ref: str | None = None, *, remote: str = "origin", progress: Progress | None = None, at: str | None = None,
    ) -> FetchReport:
        """Fetch remote ref ``ref`` (default: ``default``, or the only one) and restore the tree
        to it through the normal journaled restore (``undo`` puts the tree back).  With ``at``
        (a checkpoint id or prefix), that checkpoint of the ref's history instead."""
        from snapstore.remote import fetch

        cfg, t = self._connect(remote)
        report = FetchReport(cfg.name)
        try:
            name = ref or self._default_ref(t)
            got = fetch.fetch_ref(
                self.backend, t, cfg, name, lock=self._lock.held, progress=progress,
                add=partial(fetch.add_bundle, excluded=self.excluded), at=at,
            )
            report.refs.append(got)
        finally:
            report.requests = t.requests
        report.restore = self._restore(got.checkpoint, None, dry_run=False)
        return report

    def _read_through(self, remote: str = "origin") -> FetchReport:
        """Make this store, a browsing cache (only :meth:`snapstore.Store.remote_view` calls
        this: it adds checkpoints whose data stays on the remote), read remote ``remote``
        through: take up the checkpoints its refs name (a LIST, a GET of each
        ref, and of the bundle of each checkpoint not held yet), then read chunks and records
        on demand by range (:mod:`snapstore.remote.browse`).  The report counts the requests
        made so far; ``self.remote_requests`` keeps counting them."""
        from snapstore.remote import browse
        from snapstore.storage.readthrough import ReadThroughBackend

        cfg, t = self._connect(remote, empty_ok=True)
        if isinstance(self.backend, ReadThroughBackend):
            raise UsageError("this store reads a remote through already")
        filler = browse.Filler(self.backend, t, cfg)
        self.backend = ReadThroughBackend(self.backend, filler, browse.TABLES, self._lock.held)
        self.context.backend = self.backend
        self.remote_requests = t
        report = FetchReport(cfg.name)
        try:
            for again in (False, True):
                try:
                    self._take_up_refs(t, cfg, filler, report, again)
                    break
                except _Forgotten:
                    self._drop_history(cfg)
                    report.refs, report.problems = [], []
        finally:
            report.requests = t.requests
        return report

    def _take_up_refs(
        self, t: CountingTransport, cfg: RemoteConfig, filler: Any, report: FetchReport, again: bool,
    ) -> None:
        """Take up the history of every ref into a browsing cache (:meth:`_read_through`);
        _Forgotten when a push it took up was forgotten since, or a ref it read was deleted
        (not ``again``)."""
        from snapstore.remote import fetch, state

        def forgotten() -> None:
            if not again:
                raise _Forgotten

        names = _ref_names(t)
        if set(state.seen_refs(self.backend, cfg.rid)) - set(names):
            forgotten()  # a ref was deleted: its history went with it
        for name in names:
            try:
                report.refs.append(fetch.fetch_ref(
                    self.backend, t, cfg, name, lock=self._lock.held, add=filler.add_bundle,
                    whole_history=True, on_forgotten=forgotten,
                ))
            except CorruptError as exc:  # the sound refs are browsed all the same
                report.problems.append(exc.message)
                self.notes.append(f"skipped: {exc.message}")  # type: ignore[attr-defined]

    def _drop_history(self, cfg: RemoteConfig) -> None:
        """Empty a browsing cache's history: its checkpoints and what it took up (the data it
        read stays), to take up the live history again after pushes were forgotten."""
        from snapstore.ops import retention
        from snapstore.remote import state

        with self._lock.held():
            retention.remove(self.backend, list(self._load()[0]))
            state.drop_history(self.backend, cfg.rid)

    # -- looking at a remote ------------------------------------------------------------------

    def remote_ls(self, remote: str = "origin", *, problems: list[str] | None = None) -> list[dict[str, Any]]:
        """The remote's refs: name, checkpoint, bundle, time, writer (one LIST, one GET each).

        A damaged ref is left out: with ``problems`` given it gets a line there, else the
        first is raised (CorruptError) once every ref is read."""
        from snapstore.remote import refs

        _, t = self._connect(remote, empty_ok=True)
        out = []
        bad: list[str] = [] if problems is None else problems
        for name in _ref_names(t):
            try:
                ref, _ = refs.read(t, name)
            except CorruptError as exc:
                bad.append(exc.message)
                continue
            if ref is not None:
                out.append({"ref": name, "checkpoint": ref.checkpoint.hex(), "bundle": ref.bundle,
                            "time_ns": ref.time_ns, "writer": ref.writer})
        if bad and problems is None:
            raise _first(bad)
        return out

    def remote_verify(self, remote: str = "origin", progress: Progress | None = None) -> RemoteVerifyReport:
        """Read and check everything published on the remote; the report lists every problem."""
        from snapstore.remote import state, verify

        cfg, t = self._connect(remote, empty_ok=True)
        with _scratch_store(self.store_dir) as scratch:
            report = verify.run(t, progress, scratch)
        if report.missing:  # the next push sends their data again instead of naming them
            with self._lock.held(), self.backend.write() as batch:
                for key in report.missing:
                    state.put_lost(batch, cfg.rid, key)
        return report

    def remote_gc(
        self, remote: str = "origin", *, dry_run: bool = False, grace_s: float | None = None,
        window_s: float | None = None,
    ) -> RemoteGcReport:
        """Remove the packs no bundle names, two-phase (condemn, then delete a run later at
        least ``window_s`` after), never one younger than ``grace_s`` by the engine's clock."""
        from snapstore.remote import gc

        _, t = self._connect(remote, empty_ok=True)
        return gc.run(
            t, dry_run=dry_run, grace_s=gc.GRACE if grace_s is None else grace_s,
            window_s=gc.WINDOW if window_s is None else window_s,
        )

    def remote_doctor(self, remote: str = "origin") -> DoctorReport:
        """Probe the engine's conditional writes again and remember the answer (a remote that
        ignores them gets no shared-ref moves)."""
        from snapstore.remote import doctor, state

        cfg, t = self._connect(remote, writing=True)
        report = doctor.probe(t)
        with self._lock.held(), self.backend.write() as batch:
            state.put_config(batch, cfg._replace(cas=report.ok))
        return report


@contextmanager
def _scratch_store(store_dir: str | None) -> Iterator[Backend | None]:
    """A throw-away on-disk store in the store directory (not a tmpfs: what it holds is the
    size of the remote), removed after use; None for a store kept in memory."""
    if store_dir is None:
        yield None
        return
    import tempfile

    from snapstore.storage.lmdb_backend import LmdbBackend

    base = os.path.join(store_dir, CACHE_DIRNAME)
    os.makedirs(base, mode=0o700, exist_ok=True)
    for entry in os.scandir(base):  # left by a verify killed a day ago or more
        if entry.name.startswith("verify-") and entry.stat(follow_symlinks=False).st_mtime < time.time() - 86400:
            shutil.rmtree(entry.path, ignore_errors=True)
    path = tempfile.mkdtemp(prefix="verify-", dir=base)
    try:
        backend = LmdbBackend(path, create=True)
        try:
            yield backend
        finally:
            backend.close()
    finally:
        shutil.rmtree(path, ignore_errors=True)


class _Forgotten(Exception):
    """A browsing cache holds pushes forgotten since: it starts its history again."""


def _first(problems: list[str]) -> CorruptError:
    more = f" (and {len(problems) - 1} more damaged refs)" if len(problems) > 1 else ""
    return CorruptError(problems[0] + more)


def _ref_names(t: CountingTransport) -> list[str]:
    from snapstore.remote import refs

    return refs.names(t)


#: Where the browsing caches of a store's remotes live (in the store directory).
CACHE_DIRNAME = "remote-cache"


def cache_dirs(store_dir: str, cfg: RemoteConfig) -> tuple[str, str]:
    """``(tree, store)`` directories of remote ``cfg``'s browsing cache (its tree stays empty:
    a cache is only read)."""
    base = os.path.join(store_dir, CACHE_DIRNAME, cfg.rid.hex())
    return os.path.join(base, "tree"), os.path.join(base, "store")
