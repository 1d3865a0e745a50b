"""Remotes: push, fetch, pull and clone through S3-compatible object storage (docs/remote.md).

Each method opens one transport (obstore, imported here, never at start-up), counts its
requests into the report it returns, and takes the writer lock only around its local writes:
a long transfer never blocks the agent's snapshots.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from snapstore.errors import CorruptError, RefError, UsageError
from snapstore.facade.base import StoreBase
from snapstore.records.checkpoint import Checkpoint

if TYPE_CHECKING:
    from snapstore.remote.doctor import DoctorReport
    from snapstore.remote.fetch import FetchReport
    from snapstore.remote.gc import RemoteGcReport
    from snapstore.remote.keys import KeyInfo
    from snapstore.remote.push import PushReport
    from snapstore.remote.state import RemoteConfig
    from snapstore.remote.transport import CountingTransport
    from snapstore.remote.verify import RemoteVerifyReport

Progress = Callable[[int, int], None]
#: The ref a push without ``--task``/``--to`` moves, and the one clone and pull prefer.
DEFAULT_REF = "default"


class RemotesMixin(StoreBase):
    """remote add/list/remove/ls/verify/doctor, push, fetch, pull and clone."""

    #: A browsing cache's transport (:meth:`_read_through`): its requests, counted.
    remote_requests: CountingTransport | None = None

    # -- settings ---------------------------------------------------------------------------

    def remote_add(
        self, name: str, url: str, *, endpoint: str | None = None, region: str | None = None,
        profile: str | None = None, encrypt: bool = False, key_file: str | None = None,
    ) -> RemoteConfig:
        """Record remote ``name`` at ``url`` (``s3://bucket/prefix``).  No request is made and
        no credential is stored: keys come from the AWS environment variables or ``profile``.
        With ``encrypt`` (or ``key_file``) everything put there is encrypted (remote/keys.py):
        the passphrase comes from ``key_file``, SNAPSTORE_PASSPHRASE or the terminal."""
        from snapstore.remote import keys, state

        crypt = keys.settings(key_file) if encrypt or key_file is not None else None
        cfg = state.new_config(name, url, endpoint, region, profile, crypt)
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
                shutil.rmtree(os.path.dirname(state.cache_dirs(self.store_dir, cfg)[0]), ignore_errors=True)

    def remote_refs_seen(self, name: str) -> dict[str, str]:
        """The remote's refs as this store last saw or set them: name -> checkpoint id."""
        from snapstore.remote import state

        cfg = state.get_config(self.backend, name)
        return {k: v.checkpoint.hex() for k, v in state.seen_refs(self.backend, cfg.rid).items()}

    def _retry_budget(self) -> str | None:
        """The store's ``remote.retry-budget`` as set (None: unset; checked by the reader)."""
        from snapstore.storage.backend import CONFIG_PREFIX

        with self.backend.read() as view:
            raw = view.get("meta", CONFIG_PREFIX + b"remote.retry-budget")
        return raw.decode("utf-8", "replace") if raw is not None else None

    def _connect(self, name: str, *, writing: bool = False, empty_ok: bool = False) -> tuple[RemoteConfig, CountingTransport]:
        """The remote's settings and a counting transport.  On first contact its config is
        read (a first push writes it), and before the first push the engine's conditional
        writes are probed; both are remembered, so later commands make neither request.
        Reading commands never write (a read-only credential can fetch and clone)."""
        from snapstore.remote import doctor, keys, state, transport

        cfg = seen = state.get_config(self.backend, name)
        t = transport.CountingTransport(
            transport.connect(cfg.parsed, endpoint=cfg.endpoint, region=cfg.region, profile=cfg.profile,
                              retry_budget=self._retry_budget())
        )
        t, cfg = keys.encrypted(t, cfg, writing=writing)  # as it is unless the remote is encrypted
        if cfg.remote_id is None or (writing and cfg.cas is None) or cfg != seen:
            try:
                remote_id = cfg.remote_id or doctor.ensure_config(t, time.time_ns(), create=writing)
            except RefError:
                if empty_ok:  # nothing pushed there yet: an empty remote to list or verify
                    return cfg, t
                raise
            cas = doctor.probe(t).ok if writing and cfg.cas is None else cfg.cas
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
        from snapstore.remote.retention import who

        cps = self._to_push(refs, task)
        ns = to or task or cps[-1].task or DEFAULT_REF
        cfg, t = self._connect(remote, writing=True)
        with self.backend.read() as view:
            records = [(bytes.fromhex(c.id), view.get("checkpoints", bytes.fromhex(c.id)) or b"") for c in cps]
        report = push.run(
            self.backend, t, cfg, records, ns, level=self.compression_level, lock=self._lock.held,
            descends_from=lambda old: self._descends(bytes.fromhex(cps[-1].id), old),
            force=force, move_ref=cfg.cas is not False, progress=progress, who=who(self.backend),
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
        from snapstore.records.checkpoint import descends

        with self.backend.read() as view:
            return descends(view, head, old)

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
        from snapstore.remote import refs as refs_mod

        cfg, t = self._connect(remote, empty_ok=not refs)
        report = fetch.FetchReport(cfg.name)
        try:
            names = list(refs)
            if not names:
                names = refs_mod.names(t)
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
            raise refs_mod.first_problem(report.problems)
        return report

    def _default_ref(self, t: CountingTransport) -> str:
        from snapstore.remote import refs

        names = refs.names(t)
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
        report = fetch.FetchReport(cfg.name)
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
        from snapstore.remote import browse, fetch
        from snapstore.storage.readthrough import ReadThroughBackend

        cfg, t = self._connect(remote, empty_ok=True)
        if isinstance(self.backend, ReadThroughBackend):
            raise UsageError("this store reads a remote through already")
        filler = browse.Filler(self.backend, t, cfg)
        self.backend = ReadThroughBackend(self.backend, filler, browse.TABLES, self._lock.held)
        self.context.backend = self.backend
        self.remote_requests = t
        report = fetch.FetchReport(cfg.name)
        try:
            for again in (False, True):
                try:
                    fetch.take_up_refs(
                        self.backend, t, cfg, filler.add_bundle, report, again=again, lock=self._lock.held,
                        notes=self.notes,  # type: ignore[attr-defined]
                    )
                    break
                except fetch.Forgotten:
                    self._drop_history(cfg)
                    report.refs, report.problems = [], []
        finally:
            report.requests = t.requests
        return report

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
        return refs.listing(t, problems)

    def remote_verify(self, remote: str = "origin", progress: Progress | None = None) -> RemoteVerifyReport:
        """Read and check everything published on the remote; the report lists every problem."""
        from snapstore.remote import state, verify

        cfg, t = self._connect(remote, empty_ok=True)
        with verify.scratch_store(self.store_dir) as scratch:
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

    # -- the keys of an encrypted remote (remote/keys.py) ---------------------------------------

    def remote_keys(self, remote: str = "origin") -> list[KeyInfo]:
        """The keys of the encrypted remote ``remote`` (each wraps its one master key)."""
        from snapstore.remote import keys, state

        return keys.list_keys(state.get_config(self.backend, remote))

    def remote_key_add(self, remote: str = "origin", *, key_file: str | None = None) -> str:
        """Add a key (a passphrase, or ``key_file``) to the encrypted remote; its id."""
        from snapstore.remote import keys, state

        return keys.add_key(state.get_config(self.backend, remote), key_file)

    def remote_key_remove(self, key_id: str, remote: str = "origin") -> None:
        """Remove key ``key_id`` of the encrypted remote (not the one opening it now)."""
        from snapstore.remote import keys, state

        keys.remove_key(state.get_config(self.backend, remote), key_id)
