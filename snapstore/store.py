"""The Store: the one object agents, the CLI and the benchmarks talk to.

A store belongs to one working tree (its *root*).  By default it lives in ``<root>/.snapstore``;
``Store.init(root, store=DIR)`` puts it elsewhere and records the root in its meta table.
Every method that writes holds the store's writer lock; reads take no lock.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

import msgpack

from snapstore.errors import (
    CorruptError,
    FormatVersionError,
    RefError,
    StoreExistsError,
    StoreNotFoundError,
    TreeIOError,
    UsageError,
)
from snapstore.hooks import HookRegistry
from snapstore.ops import snapshot
from snapstore.ops.diff import Change, compare
from snapstore.records import conversation, manifest, refs
from snapstore.records.checkpoint import USER, Checkpoint, load_all, load_one
from snapstore.records.manifest import Entry
from snapstore.records.oplog import Operation
from snapstore.storage import chunker, objects
from snapstore.storage.backend import JOURNAL_KEY, MemoryBackend
from snapstore.storage.lock import DEFAULT_TIMEOUT, WriterLock
from snapstore.tree.paths import display, from_user

if TYPE_CHECKING:
    from snapstore.ops.history import Version
    from snapstore.ops.restore import RestoreReport
    from snapstore.ops.verify import VerifyReport

STORE_DIRNAME = ".snapstore"
FORMAT_VERSION = 1


class Rewind(NamedTuple):
    """What :meth:`Store.rewind` did: the checkpoint, the restore report (None when files were
    not asked for) and the conversation to reinstate (None when not asked for)."""

    checkpoint: Checkpoint
    report: RestoreReport | None
    conversation: list[Any] | None


class _ThreadLock:
    """The writer lock of an in-memory store (one process, so a thread lock is enough)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    @contextmanager
    def held(self, timeout: float | None = None):
        with self._lock:
            yield


class Store:
    """A snapshot store for one directory tree.

    Open one with :meth:`init` (creates it), :meth:`open` (a tree's store, or a store directory)
    or :meth:`find` (search upwards from a directory, like git).  Use it as a context manager or
    call :meth:`close`.
    """

    def __init__(self, backend, root: str, store_dir: str | None, lock, compression_level: int):
        self.backend = backend
        self.root = os.path.abspath(root)
        self.root_bytes = os.fsencode(self.root)
        self.store_dir = store_dir
        self.compression_level = compression_level
        self._lock = lock
        if hasattr(lock, "on_acquire") and hasattr(backend, "reopen_if_replaced"):
            # Another process's `gc --compact` may have renamed a new data.mdb in: every writer
            # checks right after taking the lock, so no write goes to the old file.
            lock.on_acquire = backend.reopen_if_replaced
        excluded = set()
        if store_dir is not None:
            rel = os.path.relpath(os.path.realpath(store_dir), os.path.realpath(self.root))
            if not rel.startswith(".."):
                excluded.add(os.fsencode(rel).replace(os.sep.encode(), b"/"))
        self.excluded = frozenset(excluded)
        #: Lifecycle hooks (see snapstore.hooks): ``store.hooks.register(event, fn)``.
        self.hooks = HookRegistry(self)

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        root: str | os.PathLike = ".",
        *,
        store: str | os.PathLike | None = None,
        compression_level: int = objects.DEFAULT_LEVEL,
        lock_timeout: float = DEFAULT_TIMEOUT,
    ) -> Store:
        """Create a store for the tree at ``root`` (in ``root/.snapstore`` unless ``store``)."""
        from snapstore.storage.lmdb_backend import LmdbBackend

        root = os.path.abspath(os.fspath(root))
        if not os.path.isdir(root):
            raise TreeIOError(f"{root} is not a directory")
        inside = store is None
        store_dir = os.path.join(root, STORE_DIRNAME) if inside else os.path.abspath(os.fspath(store))
        if os.path.exists(os.path.join(store_dir, "data.mdb")):
            raise StoreExistsError(f"a store already exists at {store_dir}")
        if not 1 <= compression_level <= 22:
            raise UsageError("the compression level must be between 1 and 22")
        try:
            os.makedirs(store_dir, exist_ok=True)
        except OSError as exc:
            raise TreeIOError(f"cannot create {store_dir}: {exc.strerror}") from exc
        backend = LmdbBackend(store_dir, create=True)
        with backend.write() as batch:
            batch.put("meta", b"format", str(FORMAT_VERSION).encode())
            batch.put("meta", b"root", os.fsencode(root))
            batch.put("meta", b"layout", b"inside" if inside else b"outside")
            batch.put("meta", b"chunker", msgpack.packb(chunker.PARAMS))
            batch.put("meta", b"compression", str(compression_level).encode())
            batch.put("meta", b"created", str(time.time_ns()).encode())
        backend.sync()
        lock = WriterLock(os.path.join(store_dir, "lock"), lock_timeout)
        return cls(backend, root, store_dir, lock, compression_level)

    @classmethod
    def open(
        cls,
        root: str | os.PathLike | None = None,
        *,
        store: str | os.PathLike | None = None,
        lock_timeout: float = DEFAULT_TIMEOUT,
    ) -> Store:
        """Open the store of the tree at ``root``, or the store directory ``store``."""
        from snapstore.storage.lmdb_backend import LmdbBackend

        if store is None:
            if root is None:
                raise UsageError("Store.open needs a root or a store directory")
            store_dir = os.path.join(os.path.abspath(os.fspath(root)), STORE_DIRNAME)
            if not os.path.exists(os.path.join(store_dir, "data.mdb")):
                raise StoreNotFoundError(
                    f"no store in {os.path.abspath(os.fspath(root))} (run 'snapstore init' there)"
                )
        else:
            store_dir = os.path.abspath(os.fspath(store))
            if not os.path.exists(os.path.join(store_dir, "data.mdb")):
                raise StoreNotFoundError(f"no store at {store_dir}")
        backend = LmdbBackend(store_dir)
        try:
            meta = cls._read_meta(backend)
        except BaseException:
            backend.close()
            raise
        if meta.get(b"layout") == b"inside":
            tree = os.path.dirname(store_dir)
        else:
            tree = os.fsdecode(meta.get(b"root", b""))
        if root is not None and store is not None and not _same_dir(os.fspath(root), tree):
            backend.close()
            raise StoreNotFoundError(_not_this_tree(store_dir, tree, os.fspath(root)))
        lock = WriterLock(os.path.join(store_dir, "lock"), lock_timeout)
        try:
            level = int(meta.get(b"compression", b"3"))
        except ValueError:
            backend.close()
            raise CorruptError("the store's meta 'compression' is damaged") from None
        store = cls(backend, tree, store_dir, lock, level)
        try:
            store._recover_on_open()
        except BaseException:
            store.close()
            raise
        return store

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
        store_dir = cls.locate(start, store=store)
        if store is None:
            return cls.open(os.path.dirname(store_dir), lock_timeout=lock_timeout)
        opened = cls.open(store=store_dir, lock_timeout=lock_timeout)
        try:
            opened.check_tree(start)
        except BaseException:
            opened.close()
            raise
        return opened

    @staticmethod
    def locate(start: str | os.PathLike[str] = ".", *, store: str | os.PathLike[str] | None = None) -> str:
        """The store directory :meth:`find` would open (StoreNotFoundError when there is none)."""
        if store is not None:
            return os.path.abspath(os.fspath(store))
        here = os.path.abspath(os.fspath(start))
        while True:
            if os.path.exists(os.path.join(here, STORE_DIRNAME, "data.mdb")):
                return os.path.join(here, STORE_DIRNAME)
            parent = os.path.dirname(here)
            if parent == here:
                raise StoreNotFoundError(
                    f"no store in {os.path.abspath(os.fspath(start))} or any parent (run "
                    "'snapstore init' in the tree's top directory; a store kept outside the tree "
                    "is named with --store DIR or SNAPSTORE_STORE=DIR)"
                )
            here = parent

    def check_tree(self, start: str | os.PathLike[str]) -> None:
        """Refuse (StoreNotFoundError) when ``start`` is not inside this store's tree."""
        if not _inside(os.fspath(start), self.root):
            raise StoreNotFoundError(_not_this_tree(self.store_dir or "", self.root, os.fspath(start)))

    @classmethod
    def in_memory(cls, root: str | os.PathLike) -> Store:
        """A store kept in memory (for tests and experiments; gone when the object is)."""
        backend = MemoryBackend()
        with backend.write() as batch:
            batch.put("meta", b"format", str(FORMAT_VERSION).encode())
            batch.put("meta", b"chunker", msgpack.packb(chunker.PARAMS))
        return cls(backend, os.fspath(root), None, _ThreadLock(), objects.DEFAULT_LEVEL)

    @staticmethod
    def _read_meta(backend) -> dict[bytes, bytes]:
        with backend.read() as view:
            meta = dict(view.items("meta"))
        fmt = meta.get(b"format")
        if fmt is None:
            raise CorruptError("this is not a snapstore store (no format version)")
        if fmt != str(FORMAT_VERSION).encode():
            raise FormatVersionError(
                f"the store has format version {fmt.decode(errors='replace')}; this snapstore "
                f"reads version {FORMAT_VERSION} (upgrade snapstore)"
            )
        try:
            params = msgpack.unpackb(meta.get(b"chunker", b"\xc0"), strict_map_key=False)
        except (ValueError, msgpack.UnpackException):
            params = None
        if params != chunker.PARAMS:
            raise FormatVersionError("the store was written with other chunker parameters")
        return meta

    def relocate(self, new_root: str | os.PathLike[str]) -> str:
        """Re-point a store kept outside its tree at the tree's new place; returns the old root.

        Commands refuse a tree that is not the store's root (a copied store must never read or
        rewrite the original tree), so a moved or copied tree is adopted explicitly.  The stat
        cache is cleared: it describes the old tree's inodes.
        """
        new = os.path.abspath(os.fspath(new_root))
        if not os.path.isdir(new):
            raise TreeIOError(f"{new} is not a directory")
        if self.store_dir is None:
            raise UsageError("an in-memory store has no tree to re-point")
        with self.backend.read() as view:
            layout = view.get("meta", b"layout")
        if layout == b"inside":
            raise UsageError(f"the store {self.store_dir} lives inside its tree and moves with it")
        old = self.root
        with self._lock.held():
            with self.backend.read() as view:
                stale = [k for k, _ in view.items("statcache")]
            with self.backend.write() as batch:
                batch.put("meta", b"root", os.fsencode(new))
                for key in stale:
                    batch.delete("statcache", key)
            self.backend.sync()
        self.root = new
        self.root_bytes = os.fsencode(new)
        return old

    def close(self) -> None:
        """Release the store (the LMDB environment closes with its last user)."""
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
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
        progress=None,
    ) -> Checkpoint:
        """Record the tree (and optionally the agent's conversation) as a new checkpoint.

        Returns the checkpoint; its ``warnings`` list what was skipped (vanished, unreadable,
        special files).  With ``skip_unchanged`` and nothing changed since the latest checkpoint,
        returns that one (``reused`` is True) and records nothing.
        """
        for tag in tags:
            _check_tag(tag)
        if metadata is not None and not isinstance(metadata, dict):
            raise UsageError("metadata must be a dict")
        self.hooks.before(
            "before_snapshot", message=message, task=task, tags=list(tags), metadata=metadata
        )
        with self._lock.held():
            self._recover()
            cp, result = snapshot.take(
                self,
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
                result.report.warnings.extend(self._auto_retention())
        cp = dataclasses.replace(cp, warnings=tuple(result.report.warnings), reused=result.reused)
        late = self.hooks.after("after_snapshot", checkpoint=cp)
        return dataclasses.replace(cp, warnings=cp.warnings + tuple(late)) if late else cp

    def restore(
        self, ref: str, paths: list[str] | None = None, *, dry_run: bool = False
    ) -> RestoreReport:
        """Make the tree (or just ``paths``) equal to checkpoint ``ref``.

        Records the current tree first (a safety checkpoint), so :meth:`undo` can put it back;
        only paths that differ are touched; ignored files, ``.git`` and the store never are.
        With ``dry_run`` nothing changes (tree or store) and the report says what would.
        """
        with self._lock.held():
            self._recover()
            target = self.resolve(ref)
            return self._run_restore(target, paths, dry_run, "restore", f"before restore of {target.short_id}")

    def _run_restore(self, target: Checkpoint, paths, dry_run: bool, kind: str, message: str) -> RestoreReport:
        self.hooks.before("before_restore", target=target, paths=paths, dry_run=dry_run, kind=kind)
        from snapstore.ops import restore

        report = restore.run(self, target, paths, dry_run=dry_run, kind=kind, message=message)
        report.warnings.extend(self.hooks.after("after_restore", report=report))
        return report

    def undo(self, *, dry_run: bool = False) -> RestoreReport:
        """Put the tree back as it was before the last restore or undo (undo twice = redo)."""
        with self._lock.held():
            self._recover()
            ops = self.operations()
            if not ops:
                raise RefError("nothing to undo: no restore has been done in this store")
            last = ops[0]
            with self.backend.read() as view:
                before = load_one(view, bytes.fromhex(last.before))
            return self._run_restore(
                before, last.paths, dry_run, "undo", f"before undo of operation {last.seq}"
            )

    def rewind(
        self,
        ref: str,
        *,
        files: bool = True,
        conversation: bool = True,
        paths: list[str] | None = None,
        dry_run: bool = False,
        task: str | None = None,
    ) -> Rewind:
        """Go back to checkpoint ``ref``: its files (through the undoable restore), its
        conversation (returned for the agent to reinstate), or both.

        Asking for the conversation of a checkpoint that has none fails with RefError before
        anything is touched.
        """
        if not files and not conversation:
            raise UsageError("rewind needs files, conversation or both")
        target = self.resolve(ref, task=task)
        messages = None
        if conversation:
            messages = self.conversation(target.id)
            if messages is None:
                raise RefError(f"no conversation stored with checkpoint {target.short_id}")
        report = self.restore(target.id, paths, dry_run=dry_run) if files else None
        return Rewind(target, report, messages)

    def snapshot_if(self, context, *, policy=None, **snapshot_args) -> Checkpoint | None:
        """Take a checkpoint only when ``policy`` (default :class:`snapstore.policy.Policy`)
        says ``context`` (an OperationContext) warrants one; returns it, or None."""
        from snapstore.policy import Policy, seconds_since

        latest = self.checkpoints()
        since = seconds_since(latest[0].time_ns) if latest else None
        decision = (policy or Policy()).decide(context, since)
        if not decision.checkpoint:
            return None
        metadata = dict(snapshot_args.pop("metadata", None) or {})
        metadata.setdefault("policy", {"score": round(decision.score, 3), "reasons": decision.reasons})
        if context.tool and "tool" not in metadata:
            metadata["tool"] = context.tool
        return self.snapshot(metadata=metadata, **snapshot_args)

    def history(self, path: str | bytes, *, task: str | None = None) -> list[Version]:
        """The checkpoints in which ``path`` changed, oldest first, with lines +/-."""
        from snapstore.ops.history import file_history

        rows = list(reversed(self.checkpoints(task=task)))
        return file_history(self, from_user(path), rows)

    def summary(self, ref: str, *, task: str | None = None) -> dict[str, Any]:
        """What an agent UI shows for a checkpoint: the record, changed files with +/- counts,
        the conversation's size and last messages (``None`` when none is stored)."""
        cp = self.resolve(ref, task=task)
        found = self.changes(cp.id)
        changes = [
            {**c.to_json(), "added": added, "removed": removed, "binary": binary}
            for c, (added, removed, binary) in zip(found, self.line_counts(found))
        ]
        convo = None
        if cp.conversation is not None:
            convo = conversation.preview(self.conversation(cp.id))
        return {**cp.to_json(), "changes": changes, "conversation": convo}

    def operations(self) -> list[Operation]:
        """The operation log (restores and undos), newest first."""
        out = []
        with self.backend.read() as view:
            for key, value in view.items("oplog", reverse=True):
                out.append(Operation.parse(key, value))
        return out

    def recover(self) -> bool:
        """Finish a restore that a crash interrupted; True if there was one."""
        with self._lock.held():
            return self._recover()

    def _recover(self) -> bool:
        if not self._journal_pending():
            return False
        from snapstore.ops import restore

        return restore.recover(self)

    def _journal_pending(self) -> bool:
        with self.backend.read() as view:
            return view.get("journal", JOURNAL_KEY) is not None

    def _recover_on_open(self) -> None:
        with self.backend.read() as view:
            pending = view.get("journal", JOURNAL_KEY) is not None
        if not pending:
            return
        from snapstore.errors import LockedError

        try:
            with self._lock.held(timeout=0):
                self._recover()
        except LockedError:
            pass  # a live restore holds the lock; it finishes its own work

    # -- retention, deletion, gc, stats, config (see snapstore.retention, snapstore.gc) ------

    def prune(
        self,
        *,
        keep_last: int | None = None,
        keep_within: str | int | None = None,
        keep_tagged: bool = False,
        task: str | None = None,
        dry_run: bool = False,
    ):
        """Remove the checkpoints no keep rule keeps; returns a retention.PruneReport.

        ``keep_within`` is a duration (``"30m"``, ``"12h"``, ``"7d"``) or seconds.  Checkpoints
        that ``undo`` can reach (the newest retention.UNDO_DEPTH operations) and those of a
        pending restore are never removed.  Their data stays until :meth:`gc`.
        """
        from snapstore.ops import retention

        if keep_last is not None:
            keep_last = retention.parse_count(keep_last)
        if isinstance(keep_within, str):
            keep_within = retention.parse_duration(keep_within)
        elif keep_within is not None and keep_within <= 0:
            raise UsageError("--keep-within must be longer than zero")
        policy = retention.Policy(keep_last, keep_within, bool(keep_tagged))
        if not policy.active:
            raise UsageError("prune needs a rule: --keep-last, --keep-within or --keep-tagged")
        with self._lock.held():
            self._recover()
            return self._prune(policy, task, dry_run)

    def _prune(self, policy, task: str | None, dry_run: bool):
        from snapstore.ops import retention

        all_, _ = self._load()
        with self.backend.read() as view:
            guarded = retention.protected(view)
        report = retention.select(all_, policy, guarded, task=task)
        report.dry_run = dry_run
        if not dry_run:
            retention.remove(self.backend, report.removed)
        return report

    def _auto_retention(self) -> list[str]:
        """Apply the store's retention policy after a snapshot (lock held); returns warnings."""
        from snapstore.errors import SnapstoreError
        from snapstore.ops import gc, retention

        try:
            values = self.config()
            policy = retention.policy_from_config(values)
            if policy is None:
                return []
            report = self._prune(policy, None, False)
            if report.removed and values.get("retention.gc") == "true":
                gc.run(self)
        except SnapstoreError as exc:
            return [f"automatic retention failed: {exc}"]
        return []

    def delete(self, ref: str) -> Checkpoint:
        """Remove checkpoint ``ref`` (its record, log entry and tags); its data stays until gc.

        Later checkpoints keep working.  Refuses (UsageError) a checkpoint that ``undo`` or a
        pending restore needs.
        """
        from snapstore.ops import retention

        with self._lock.held():
            self._recover()
            cp = self.resolve(ref)
            with self.backend.read() as view:
                guarded = retention.protected(view)
            if cp.id in guarded:
                raise UsageError(f"checkpoint {cp.short_id} cannot be deleted: {guarded[cp.id]}")
            retention.remove(self.backend, [cp])
            return cp

    def gc(self, *, compact: bool = False, dry_run: bool = False):
        """Remove the chunks, streams and manifests no checkpoint reaches; returns a gc.GcReport.

        Holds the writer lock throughout, so no snapshot can be writing meanwhile.  With
        ``compact`` the LMDB file is rewritten so the disk space really comes back.
        """
        from snapstore.ops import gc

        with self._lock.held():
            self._recover()
            return gc.run(self, compact=compact and not dry_run, dry_run=dry_run)

    def stats(self):
        """Counts and sizes of the store (a stats.StoreStats)."""
        from snapstore.ops import stats

        return stats.collect(self)

    def config(self) -> dict[str, str]:
        """Every configuration key with its value (the default when unset)."""
        from snapstore.ops import retention

        with self.backend.read() as view:
            return {
                key: (view.get("meta", retention.config_key(key)) or default.encode()).decode()
                for key, (default, _) in retention.CONFIG_KEYS.items()
            }

    def config_get(self, key: str) -> str:
        """The value of configuration ``key`` (UsageError for an unknown key)."""
        from snapstore.ops import retention

        retention.config_key(key)
        return self.config()[key]

    def config_set(self, key: str, value: str | int | None) -> str:
        """Set configuration ``key`` (``None`` or ``"off"`` resets it); returns the new value."""
        from snapstore.ops import retention

        mkey = retention.config_key(key)
        stored = None if value is None else retention.normalise(key, str(value))
        with self._lock.held():
            with self.backend.write() as batch:
                if stored is None:
                    batch.delete("meta", mkey)
                else:
                    batch.put("meta", mkey, stored.encode())
            self.backend.sync()
        return self.config_get(key)

    # -- reading ------------------------------------------------------------------------------

    def diff(
        self, a: str = "latest", b: str | None = None, paths: list[str] | None = None
    ) -> list[Change]:
        """Changes from checkpoint ``a`` to checkpoint ``b`` (the working tree when None).

        Two checkpoints are compared through their manifests alone (shared manifest chunks are
        skipped undecoded); the working tree through the stat cache (unchanged files are not
        read).  Each Change gives lazy access to its old and new bytes.
        """
        from snapstore.ops import diff as diff_mod
        from snapstore.ops.restore import selector
        from snapstore.tree import worktree

        sel = selector(paths)
        old_cp = self.resolve(a)
        with self.backend.read() as view:
            if b is None:
                old = manifest.load(view.get, old_cp.manifest)
                new, _ = worktree.current_state(self)
                new_loader = self._disk_loader
            else:
                new_cp = self.resolve(b)
                old, new = diff_mod.manifest_difference(view.get, old_cp.manifest, new_cp.manifest)
                new_loader = self._store_loader
        old = {p: e for p, e in old.items() if sel(p)}
        new = {p: e for p, e in new.items() if sel(p)}
        return diff_mod.with_loaders(compare(old, new), self._store_loader, new_loader)

    def _store_loader(self, entry: Entry) -> bytes:
        with self.backend.read() as view:
            return objects.read_stream(view.get, entry.ref)

    def _disk_loader(self, entry: Entry) -> bytes:
        fd = os.open(os.path.join(self.root_bytes, entry.path), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            return f.read()


    def checkpoints(self, *, task: str | None = None, include_safety: bool = False) -> list[Checkpoint]:
        """Checkpoints newest first, as ``list`` shows them (safety ones only if asked)."""
        all_, _ = self._load()
        rows = list(reversed(all_))
        if not include_safety:
            rows = [c for c in rows if not c.is_safety]
        if task is not None:
            rows = [c for c in rows if c.task == task]
        return rows

    def numbered_checkpoints(
        self, *, task: str | None = None, include_safety: bool = False
    ) -> list[tuple[int | None, Checkpoint]]:
        """What ``list`` shows: newest first, each with its ``#N`` reference (None for safety
        checkpoints, which are listed only with ``include_safety``)."""
        all_, _ = self._load()
        return refs.numbered(all_, task, include_safety)

    def line_counts(self, changes: list[Change]) -> list[tuple[int, int, bool]]:
        """``(added, removed, binary)`` lines of each change, as ``diff --stat`` shows them."""
        from snapstore.ops import textdiff

        return [textdiff.line_counts(c) for c in changes]

    def resolve(self, ref: str, *, task: str | None = None) -> Checkpoint:
        """The checkpoint ``ref`` names (see :mod:`snapstore.refs`)."""
        all_, tags = self._load()
        return refs.resolve(ref, all_, tags, task)

    def entries(self, ref: str) -> list[Entry]:
        """The manifest entries of checkpoint ``ref``, in path order."""
        cp = self.resolve(ref)
        with self.backend.read() as view:
            return list(manifest.iter_entries(view.get, cp.manifest))

    def changes(self, ref: str) -> list[Change]:
        """What checkpoint ``ref`` changed against its parent (with lazy old/new bytes)."""
        from snapstore.ops import diff as diff_mod

        cp = self.resolve(ref)
        with self.backend.read() as view:
            parent = None
            if cp.parent and view.get("checkpoints", bytes.fromhex(cp.parent)) is not None:
                parent = load_one(view, bytes.fromhex(cp.parent))
            if parent is None:
                old, new = {}, manifest.load(view.get, cp.manifest)
            else:
                old, new = diff_mod.manifest_difference(view.get, parent.manifest, cp.manifest)
        return diff_mod.with_loaders(compare(old, new), self._store_loader, self._store_loader)

    def iter_bytes(self, ref: str, path: str | bytes) -> Iterator[bytes]:
        """The content of ``path`` in checkpoint ``ref``, chunk by chunk (each chunk verified)."""
        cp = self.resolve(ref)
        rel = from_user(path)
        with self.backend.read() as view:
            entry = _find_entry(view.get, cp, rel)
            if not entry.is_file:
                if entry.kind == manifest.SYMLINK:
                    raise RefError(f"{display(rel)} is a symlink in {cp.short_id} (to {display(entry.ref)})")
                raise RefError(f"{display(rel)} is not a file in checkpoint {cp.short_id}")
            yield from objects.iter_stream(view.get, entry.ref)

    def read_bytes(self, ref: str, path: str | bytes) -> bytes:
        """The exact bytes of ``path`` (root-relative) in checkpoint ``ref``."""
        return b"".join(self.iter_bytes(ref, path))

    def conversation(self, ref: str) -> list[Any] | None:
        """The conversation stored with checkpoint ``ref``, or None when it has none."""
        cp = self.resolve(ref)
        if cp.conversation is None:
            return None
        with self.backend.read() as view:
            return conversation.read(view.get, cp.conversation)

    def verify(self, progress=None) -> VerifyReport:
        """Re-read and re-hash everything; the report lists every problem found."""
        from snapstore.ops import verify

        return verify.run(self.backend, progress)

    # -- internals ----------------------------------------------------------------------------

    def _load(self) -> tuple[list[Checkpoint], dict[str, str]]:
        with self.backend.read() as view:
            all_ = load_all(view)
            tags = {k.decode("utf-8", "replace"): v.hex() for k, v in view.items("tags")}
        by_id: dict[str, list[str]] = {}
        for name, cid in tags.items():
            by_id.setdefault(cid, []).append(name)
        all_ = [dataclasses.replace(c, tags=tuple(sorted(by_id.get(c.id, ())))) for c in all_]
        return all_, tags

    def _checkpoint_by_id(self, cid: bytes) -> Checkpoint:
        with self.backend.read() as view:
            return load_one(view, cid)

    def _manifest_dict(self, mid: bytes) -> dict[bytes, Entry]:
        with self.backend.read() as view:
            return manifest.load(view.get, mid)

    # -- tags and a change token (for the web UI, snapstore.ui) -------------------------------

    def tag(self, ref: str, name: str) -> str | None:
        """Name checkpoint ``ref`` ``name``; returns the id the tag named before (None if new).

        As with ``snapshot --tag``, a tag names one checkpoint: an existing tag moves.
        """
        _check_tag(name)
        with self._lock.held():
            cp = self.resolve(ref)
            with self.backend.read() as view:
                before = view.get("tags", name.encode())
            with self.backend.write() as batch:
                batch.put("tags", name.encode(), bytes.fromhex(cp.id))
            self.backend.sync()
        return before.hex() if before is not None else None

    def untag(self, name: str) -> str:
        """Remove tag ``name`` (RefError if there is none); returns the id it named."""
        with self._lock.held():
            with self.backend.read() as view:
                before: bytes | None = view.get("tags", name.encode())
            if before is None:
                raise RefError(f"no tag {name!r}")
            with self.backend.write() as batch:
                batch.delete("tags", name.encode())
            self.backend.sync()
        return before.hex()

    def revision(self) -> str:
        """A short token that changes whenever checkpoints, tags or operations change.

        Cheap (no record is decoded): a UI polls it to know when to refresh.
        """
        import blake3

        h = blake3.blake3()
        with self.backend.read() as view:
            for table in ("log", "oplog"):
                last = next(iter(view.items(table, reverse=True)), None)
                h.update(b"%d:" % view.count(table) + (last[0] if last else b"-"))
            for key, value in view.items("tags"):
                h.update(key + b"\0" + value)
        return h.hexdigest()[:16]


def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _inside(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (symlinks resolved)."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def _not_this_tree(store_dir: str, root: str, asked: str) -> str:
    return (
        f"the store {store_dir} belongs to the tree {root}, not to {os.path.abspath(asked)}: run "
        f"the command in {root}, or, if the tree was moved or copied, re-point the store with "
        f"'snapstore --store {store_dir} relocate {os.path.abspath(asked)}'"
    )


def _find_entry(get, cp: Checkpoint, rel: bytes) -> Entry:
    for e in manifest.iter_entries(get, cp.manifest):
        if e.path == rel:
            return e
        if e.path > rel:
            break
    raise RefError(f"{display(rel) or '.'} is not in checkpoint {cp.short_id}")


def _check_tag(tag: str) -> None:
    import re

    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,99}", tag) or tag.startswith("latest"):
        raise UsageError(
            f"bad tag {tag!r}: use letters, digits, '_', '.', '-', '/' (and not 'latest...')"
        )
    if all(c in "0123456789abcdefABCDEF" for c in tag) and len(tag) >= 4:
        raise UsageError(f"bad tag {tag!r}: it could be mistaken for a checkpoint id")
