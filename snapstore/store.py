"""The Store: the one object agents, the CLI and the benchmarks talk to.

A store belongs to one working tree (its *root*).  By default it lives in ``<root>/.snapstore``;
``Store.init(root, store=DIR)`` puts it elsewhere and records the root in its meta table.
Every method that writes holds the store's writer lock; reads take no lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import msgpack

from snapstore.errors import CorruptError, StoreNotFoundError, UsageError
from snapstore.facade.going_back import GoingBackMixin
from snapstore.facade.reading import ReadingMixin
from snapstore.facade.remote_history import RemoteHistoryMixin
from snapstore.facade.remotes import RemotesMixin
from snapstore.facade.tags import TagsMixin, check_tag
from snapstore.facade.upkeep import UpkeepMixin
from snapstore.hooks import HookRegistry
from snapstore.ops.context import StageContext
from snapstore.records import schema
from snapstore.records.checkpoint import (
    USER,
    Checkpoint,
    parse_record,
)
from snapstore.storage import chunker, creation, lmdb_generations, objects, opening, packs
from snapstore.storage.backend import Backend
from snapstore.storage.lock import DEFAULT_TIMEOUT, WriterLock
from snapstore.storage.memory import MemoryBackend
from snapstore.storage.opening import FORMAT_VERSION, READABLE_FORMATS
from snapstore.tree.paths import is_inside

if TYPE_CHECKING:
    from snapstore.ops.edit import EditReport
    from snapstore.policy import OperationContext, Policy
    from snapstore.remote.fetch import FetchReport

__all__ = ["FORMAT_VERSION", "READABLE_FORMATS", "Store"]


class _ThreadLock:
    """The writer lock of an in-memory store (one process, so a thread lock is enough)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    @contextmanager
    def held(self, timeout: float | None = None) -> Iterator[None]:
        with self._lock:
            yield


class Store(ReadingMixin, RemotesMixin, RemoteHistoryMixin, GoingBackMixin, UpkeepMixin, TagsMixin):
    """A snapshot store for one directory tree.

    Open one with :meth:`init` (creates it), :meth:`open` (a tree's store, or a store directory)
    or :meth:`find` (search upwards from a directory, like git).  Use it as a context manager or
    call :meth:`close`.
    """

    def __init__(
        self, backend: Backend, root: str, store_dir: str | None, lock: WriterLock | _ThreadLock, compression_level: int
    ):
        self.backend = backend
        self.root = os.path.abspath(root)
        self.root_bytes = os.fsencode(self.root)
        self.store_dir = store_dir
        self.compression_level = compression_level
        self._lock = lock
        if isinstance(lock, WriterLock):
            # Another process's `gc --compact` may have renamed a new data.mdb in: every writer
            # checks right after taking the lock, so no write goes to the old file.
            lock.on_acquire = backend.refresh
        excluded = set()
        if store_dir is not None:
            rel = os.path.relpath(os.path.realpath(store_dir), os.path.realpath(self.root))
            if not rel.startswith(".."):
                excluded.add(os.fsencode(rel).replace(os.sep.encode(), b"/"))
        self.excluded = frozenset(excluded)
        #: What the stages are given instead of the Store (its memo lives as long as the Store).
        self.context = StageContext(
            backend, self.root, self.excluded, compression_level, store_dir
        )
        #: What a command should tell the user about how this store was opened.
        self.notes: list[str] = []
        #: Lifecycle hooks (see snapstore.hooks): ``store.hooks.register(event, fn)``.
        self.hooks = HookRegistry(self)
        #: Why :meth:`watch` could not watch (for :meth:`watch_status`), and whether each
        #: snapshot tries again (no inotify instance could be made: one may be free later).
        self._unwatched: str | None = None
        self._watch_retry = False
        #: Whether a snapshot runs the automatic maintenance pass when it is due (its plan reads
        #: every chunk entry, paid by that checkpoint).  The resident
        #: service turns it off: it maintains the store when idle instead.
        self.maintain_after_snapshot = True

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        root: str | os.PathLike[str] = ".",
        *,
        store: str | os.PathLike[str] | None = None,
        compression_level: int = objects.DEFAULT_LEVEL,
        lock_timeout: float = DEFAULT_TIMEOUT,
        durability: str | None = None,
    ) -> Store:
        """Create a store for the tree at ``root`` (in ``root/.snapstore`` unless ``store``).

        Atomic: the store appears complete or not at all (see :func:`_build_store`).
        ``durability`` is this Store's durability setting (see :meth:`open`).
        """
        from snapstore.storage.lmdb_backend import LmdbBackend

        root_dir, store_dir, meta = opening.new_store(
            os.fspath(root), None if store is None else os.fspath(store), compression_level
        )
        creation.build(store_dir, meta)
        backend = LmdbBackend(store_dir, durability=opening.durability_of(durability, {}))
        lock = WriterLock(os.path.join(store_dir, "lock"), lock_timeout)
        return cls(backend, root_dir, store_dir, lock, compression_level)

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str] | None = None,
        *,
        store: str | os.PathLike[str] | None = None,
        lock_timeout: float = DEFAULT_TIMEOUT,
        watch: bool = False,
        durability: str | None = None,
    ) -> Store:
        """Open the store of the tree at ``root``, or the store directory ``store``.

        With ``watch``, the tree is watched (inotify) for as long as the Store is open, so each
        snapshot re-examines only what changed (see :meth:`watch`).  ``durability`` (``"full"``,
        ``"normal"`` or ``"off"``; default: the store's ``storage.durability`` setting) says
        when a checkpoint reaches the disk and what a power failure may lose
        (docs/reliability.md); a process crash loses nothing under any of them.
        """
        from snapstore.storage.lmdb_backend import LmdbBackend

        root_path = None if root is None else os.fspath(root)
        store_dir = opening.existing_store(root_path, None if store is None else os.fspath(store))
        backend = LmdbBackend(store_dir)
        try:
            found = opening.read(backend, store_dir, root_path, named=store is not None)
            backend.set_durability(opening.durability_of(durability, found.meta))
        except BaseException:
            backend.close()
            raise
        lock = WriterLock(os.path.join(store_dir, "lock"), lock_timeout)
        # Opening never replays a restore journal: read-only commands must not write the tree
        # (they report it: pending_restore); writers recover under the lock (_recover).
        opened = cls(backend, found.tree, store_dir, lock, found.level)
        opened.context.delta_depth = packs.delta_depth_of(found.meta)
        if watch:
            opened.watch()
        return opened

    @classmethod
    def find(
        cls,
        start: str | os.PathLike[str] = ".",
        *,
        store: str | os.PathLike[str] | None = None,
        lock_timeout: float = DEFAULT_TIMEOUT,
    ) -> Store:
        """Open ``store`` if given, else the nearest ``.snapstore`` at or above ``start``.

        With ``store``, ``start`` must be inside the store's tree (StoreNotFoundError otherwise):
        a command acts on the tree the user is in, never on another one.
        """
        if not os.path.isdir(start):  # not a parent's tree instead (`-C typo` must not act there)
            raise UsageError(f"cannot change to {os.fspath(start)}: no such directory")
        store_dir = cls.locate(start, store=store)
        if store is None:
            return cls.open(os.path.dirname(store_dir), lock_timeout=lock_timeout)
        opened = cls.open(store=store_dir, lock_timeout=lock_timeout)
        from snapstore.storage.discovery import foreign_owner

        owner = foreign_owner(store_dir)
        if owner is not None:  # allowed because it was named; said so (see storage.discovery)
            opened.notes.append(f"using {store_dir}, a store of another user (uid {owner}), as named")
        try:
            opened.check_tree(start)
        except BaseException:
            opened.close()
            raise
        return opened

    @staticmethod
    def locate(start: str | os.PathLike[str] = ".", *, store: str | os.PathLike[str] | None = None) -> str:
        """The store directory :meth:`find` would open (StoreNotFoundError when there is none).

        Searching upwards uses only a store of this user and stops at a file-system boundary
        (:mod:`snapstore.storage.discovery`); a store named with ``store`` is used as named.
        """
        return opening.locate(os.fspath(start), None if store is None else os.fspath(store))

    def check_tree(self, start: str | os.PathLike[str]) -> None:
        """Refuse (StoreNotFoundError) when ``start`` is not inside this store's tree."""
        if not is_inside(os.path.realpath(start), os.path.realpath(self.root)):
            raise StoreNotFoundError(opening.not_this_tree(self.store_dir or "", self.root, os.fspath(start)))

    @classmethod
    def clone(
        cls, url: str, directory: str | os.PathLike[str], *, ref: str | None = None, name: str = "origin",
        endpoint: str | None = None, region: str | None = None, profile: str | None = None,
        progress: Callable[[int, int], None] | None = None, encrypt: bool = False, key_file: str | None = None,
        at: str | None = None,
    ) -> FetchReport:
        """Make ``directory`` (absent or empty) a tree whose store holds remote ref ``ref``
        (default: ``default``, or the remote's only ref) of ``url``, and restore it there
        (``at``: that checkpoint of the ref's history, by id or prefix, instead of its latest).
        Reads only what that checkpoint needs; on failure nothing is left behind.
        ``encrypt``/``key_file``: the remote is encrypted (see :meth:`remote_add`)."""
        from snapstore.remote.clone import clone_into

        return clone_into(
            lambda d: cls.init(d), url, directory, ref=ref, name=name, endpoint=endpoint,
            region=region, profile=profile, progress=progress, encrypt=encrypt, key_file=key_file, at=at,
        )

    def remote_view(self, name: str = "origin", *, progress: Callable[[int, int], None] | None = None) -> Store:
        """A read-only window on remote ``name``: a cache store kept in this store's directory
        (``remote-cache/``) that holds every checkpoint the remote's refs name, and reads what
        a command touches of them on demand, by range (``_read_through``; what it read is
        kept: remote objects are immutable).  Browse it like any store (list, show, log, cat,
        diff of two checkpoints); close it after use.  ``progress`` is not called (kept for
        callers of the whole-closure cache)."""
        from snapstore.remote import state

        cfg = state.get_config(self.backend, name)
        if self.store_dir is None:
            raise UsageError("an in-memory store keeps no remote cache")
        root, store_dir = state.cache_dirs(self.store_dir, cfg)
        if lmdb_generations.is_store(store_dir):
            cache = type(self).open(store=store_dir)
        else:
            os.makedirs(root, mode=0o700, exist_ok=True)
            cache = type(self).init(root, store=store_dir)
        try:
            if not any(c.name == name for c in cache.remote_list()):
                cache.remote_add(name, cfg.url, endpoint=cfg.endpoint, region=cfg.region, profile=cfg.profile,
                                 encrypt=cfg.crypt is not None, key_file=(cfg.crypt or {}).get("key_file"))
            cache._read_through(name)
        except BaseException:
            cache.close()
            raise
        return cache

    @classmethod
    def in_memory(cls, root: str | os.PathLike[str]) -> Store:
        """A store kept in memory (for tests and experiments; gone when the object is)."""
        backend = MemoryBackend()
        with backend.write() as batch:
            batch.put("meta", b"format", str(FORMAT_VERSION).encode())
            batch.put("meta", b"chunker", msgpack.packb(chunker.PARAMS))
        return cls(backend, os.fspath(root), None, _ThreadLock(), objects.DEFAULT_LEVEL)

    def watch(self) -> str | None:
        """Watch the tree so snapshots cost O(changed); returns why not when it cannot.

        Events are hints: a snapshot re-examines the paths they name, walks the directories
        it could not watch, re-stats files with more than one link, and walks the whole tree
        whenever the events cannot be trusted (at start, after an overflow, periodically).
        Not available on file systems without reliable events (NFS, FUSE, ...) nor when no
        inotify instance can be made (``fs.inotify.max_user_instances``): then every snapshot
        walks, as without ``watch``, and :meth:`watch_status` says why.
        """
        from snapstore.tree import watcher

        if self.context.watcher is not None:
            return None
        why = None if self._watch_retry else watcher.watchable(self.root)  # (checked once)
        if why is None:
            try:
                w = watcher.Watcher(self.root, self.excluded, consistency_interval=self._check_interval())
            except OSError as exc:  # EMFILE: max_user_instances; ENFILE, ENOMEM
                from snapstore.platform import events

                why = events.instance_error(exc)
                self._watch_retry = True
            else:
                w.watch_tree()
                self.context.watcher = w
                self._unwatched, self._watch_retry = None, False
                return None
        self._unwatched = why
        return why

    def _check_interval(self) -> float:
        with contextlib.suppress(CorruptError):  # (damage: the commands that read it say so)
            return float(self.config_get("watch.check-interval"))
        return 300.0

    def watch_status(self) -> dict[str, Any] | None:
        """The watcher's counters (events, overflows, full walks, blind directories, ...) and
        ``mode`` (what a snapshot does, in words); None when not asked to watch."""
        w = self.context.watcher
        if w is not None:
            return dict(w.status())
        if self._unwatched is None:
            return None
        again = "; each checkpoint tries again to watch" if self._watch_retry else ""
        return {"watching": False, "mode": f"not watching ({self._unwatched}): every checkpoint walks the whole tree{again}"}

    def close(self) -> None:
        """Release the store (the LMDB environment closes with its last user)."""
        w, self.context.watcher = self.context.watcher, None
        if w is not None:
            w.close()
        self.backend.close()

    def set_lock_timeout(self, seconds: float) -> None:
        """How long writers wait for another process's writer lock (LockError after it)."""
        if isinstance(self._lock, WriterLock):
            self._lock.timeout = seconds

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing ------------------------------------------------------------------------------

    def snapshot(
        self,
        message: str = "",
        *,
        tags: list[str] | tuple[str, ...] = (),
        task: str | None = None,
        metadata: dict[str, Any] | None = None,
        conversation: list[Any] | None = None,
        skip_unchanged: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> Checkpoint:
        """Record the tree (and optionally the agent's conversation) as a new checkpoint.

        Returns the checkpoint; its ``warnings`` list what was skipped (vanished, unreadable,
        special files).  With ``skip_unchanged`` and nothing changed since the latest checkpoint,
        returns that one (``reused`` is True) and records nothing.
        """
        for tag in tags:
            check_tag(tag)
        # Text that is not valid Unicode (a cut emoji in a transcript, a non-UTF-8 byte in an
        # argument) is stored with U+FFFD in its place, and said so, never refused.
        # (The conversation's messages are checked as they are encoded: records/conversation.py.)
        (message, task, metadata), replaced = schema.clean_text([message, task, metadata])
        schema.check_new_record(message, task, metadata)
        self.hooks.before(
            "before_snapshot", message=message, task=task, tags=list(tags), metadata=metadata
        )
        if self._watch_retry:
            self.watch()  # (no inotify instance could be made before: one may be free now)
        with self._lock.held():
            self._recover()
            from snapstore.ops import snapshot

            cp_id, packed, result = snapshot.take(
                self.context,
                message=message,
                task=task,
                tags=list(tags),
                metadata=metadata,
                messages=conversation,
                kind=USER,
                skip_unchanged=skip_unchanged,
                progress=progress,
            )
            if not result.reused:
                from snapstore.ops import schedule

                result.report.warnings.extend(schedule.retention_after_snapshot(
                    self.backend, self.config, lambda rules: self._prune(rules, None, False), self.compression_level
                ))
                result.report.warnings.extend(schedule.maintenance_after_snapshot(
                    self.backend, self.config, self.compression_level, self.store_dir, self.root,
                    in_checkpoint=self.maintain_after_snapshot,
                ))
        if replaced:
            result.report.warnings.append(
                "some text was not valid Unicode (a cut emoji or raw bytes): stored with U+FFFD in its place"
            )
        cp = parse_record(cp_id, packed)
        cp = cp._replace(warnings=tuple(result.report.warnings), reused=result.reused)
        late = self.hooks.after("after_snapshot", checkpoint=cp)
        return cp._replace(warnings=cp.warnings + tuple(late)) if late else cp

    def snapshot_if(
        self, context: OperationContext, *, policy: Policy | None = None, **snapshot_args: Any
    ) -> Checkpoint | None:
        """Take a checkpoint only when ``policy`` (default :class:`snapstore.policy.Policy`)
        says ``context`` (an OperationContext) warrants one; returns it, or None."""
        from snapstore.policy import Policy as DefaultPolicy
        from snapstore.policy import metadata_for, seconds_since

        latest = self.checkpoints()
        decision = (policy or DefaultPolicy()).decide(context, seconds_since(latest[0].time_ns) if latest else None)
        if not decision.checkpoint:
            return None
        return self.snapshot(metadata=metadata_for(decision, context, snapshot_args.pop("metadata", None)), **snapshot_args)

    # -- the edit tool (agents) -----------------------------------------------------------------

    def edit(
        self,
        path: str,
        edits: Any,
        *,
        expected: str | None = None,
        dry_run: bool = False,
        replace_all: bool = False,
        task: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> EditReport:
        """Replace text in the tree's file ``path`` (see :mod:`snapstore.ops.edit`).

        ``edits`` is a list of ``{"old_text", "new_text"}`` applied in order; ``expected`` is the
        content hash a previous read returned (ConflictError, nothing written, when the file is
        another version).  Unless ``dry_run``, the tree is checkpointed first (skip-unchanged),
        then the file is replaced atomically with its mode, line endings and other bytes kept.
        Returns an :class:`~snapstore.ops.edit.EditReport` with the unified diff.
        """
        from snapstore.ops import edit as edit_op
        from snapstore.records import requests

        return edit_op.run(
            self.root, self.store_dir, os.fspath(path), edits, expected=expected, dry_run=dry_run,
            replace_all=replace_all, metadata=metadata, hold=self._lock.held,
            checkpoint=lambda message, meta: self.snapshot(message, task=task, metadata=meta, skip_unchanged=True),
            announce=lambda rel, old, new: requests.note(self.context.backend, self.context.request, stage="writing", path=rel, old=old, new=new),
        )
