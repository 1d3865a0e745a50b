"""The restore journal: its record, the one parser of it, and crash recovery.

Before a restore touches the tree it stores its plan (the steps, the target checkpoint and the
safety checkpoint that holds the tree as it was) under ``journal/current``, flushed to disk; the
journal is cleared in the same transaction that appends the operation log.  A journal left by a
killed process is finished (rolled forward) or rolled back only by a writer or an explicit
``snapstore recover``, and only after each journaled path has been checked: it must be as the
safety checkpoint recorded it, as the target has it, or absent.  Anything else is work done
after the crash; recovery then refuses (ConflictError) rather than overwrite it.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, cast

import msgpack

from snapstore.errors import ConflictError, CorruptError
from snapstore.ops.restore.plan import ACTIONS, Step
from snapstore.ops.restore.safety import check_path
from snapstore.records import requests
from snapstore.records.checkpoint import next_seq, seq_key
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, Entry
from snapstore.records.requests import Request
from snapstore.storage.backend import JOURNAL_KEY, Backend, ReadView, WriteBatch
from snapstore.tree import statcache, worktree
from snapstore.tree.paths import display, parents

__all__ = [
    "JOURNAL_KEY", "Journal", "JournalTables", "clear", "clear_if", "finish", "implied_dirs", "matches", "parse", "pending_ids",
    "read", "record", "tables",
]


class JournalTables(Protocol):
    """The backend's transactions, typed (``Backend.read``/``write`` carry no annotations)."""

    def read(self) -> AbstractContextManager[ReadView]: ...

    def write(self) -> AbstractContextManager[WriteBatch]: ...

    def sync(self) -> None: ...

    def barrier(self) -> None: ...


def tables(backend: Backend) -> JournalTables:
    """``backend`` seen through :class:`JournalTables` (the same object)."""
    return cast(JournalTables, backend)


#: What every message about a journal that cannot be finished points to.
RECOVER_HINT = "see 'snapstore recover --help'"


@dataclass
class Journal:
    """A parsed journal: the operation record (as the oplog will keep it) and the steps."""

    op: dict[str, Any]
    steps: list[Step]

    @property
    def target(self) -> bytes:
        """The checkpoint id the restore makes the tree equal to."""
        value: bytes = self.op["target"]
        return value

    @property
    def before(self) -> bytes | None:
        """The safety checkpoint id (the tree before the restore)."""
        value = self.op.get("before")
        return value if isinstance(value, bytes) else None

    @property
    def kind(self) -> str:
        """``"restore"`` or ``"undo"``."""
        return str(self.op.get("kind", "restore"))

    @property
    def boot(self) -> str | None:
        """The boot id of a restore that left the tree's syncs for later (:mod:`.settle`)."""
        value = self.op.get("boot")
        return value if isinstance(value, str) else None

    @property
    def applied(self) -> dict[str, Any] | None:
        """Set once such a restore was carried out whole, its tree not yet synced: ``dirs``
        (one directory per file system written to) and ``ids`` (``[step index, inode,
        mtime_ns]`` of each file it renamed into place)."""
        value = self.op.get("applied")
        return value if isinstance(value, dict) else None


def record(op: dict[str, Any], steps: list[Step]) -> bytes:
    """The journal value of operation ``op`` with ``steps``."""
    packed: bytes = msgpack.packb({**op, "steps": [[s.action, s.path] for s in steps]}, use_bin_type=True)
    return packed


def parse(value: bytes) -> Journal:
    """Parse and validate a journal value; CorruptError for anything malformed (any cause)."""
    try:
        rec = msgpack.unpackb(value, raw=False, strict_map_key=True, max_bin_len=64 << 20)
        if not isinstance(rec, dict):
            raise ValueError("not a map")
        raw_steps = rec.pop("steps")
        if not isinstance(raw_steps, list):
            raise ValueError("no steps")
        steps = []
        for item in raw_steps:
            if not (isinstance(item, list) and len(item) == 2):
                raise ValueError("a step is not a pair")
            action, path = item
            if not isinstance(action, str) or action not in ACTIONS:
                raise ValueError(f"unknown step {action!r}")
            if not isinstance(path, bytes):
                raise ValueError("a step has no path")
            check_path(path)
            steps.append(Step(action, path))
        _check_fields(rec, len(steps))
    except Exception as exc:  # any malformed value, whatever the decoder raises
        raise CorruptError(f"the restore journal is damaged ({exc}); {RECOVER_HINT}") from exc
    return Journal(rec, steps)


def _check_fields(rec: dict[str, Any], n_steps: int) -> None:
    """Raise ValueError unless the journal record's fields (but its steps) are well formed."""
    for key in ("target", "before"):
        if key in rec and not (isinstance(rec[key], bytes) and len(rec[key]) == 32):
            raise ValueError(f"bad {key}")
    if "target" not in rec:
        raise ValueError("no target")
    if rec.get("kind", "restore") not in ("restore", "undo"):
        raise ValueError("unknown kind")
    t = rec.get("time_ns", 0)
    if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < (1 << 63):
        raise ValueError("bad time")
    paths = rec.get("paths")
    if paths is not None and not (isinstance(paths, list) and all(isinstance(p, bytes) for p in paths)):
        raise ValueError("bad paths")
    boot = rec.get("boot")
    if boot is not None and not (isinstance(boot, str) and 0 < len(boot) <= 40):
        raise ValueError("bad boot id")
    if "applied" in rec:
        _check_applied(rec["applied"], n_steps)


def _check_applied(applied: Any, n_steps: int) -> None:
    if not isinstance(applied, dict) or set(applied) != {"dirs", "ids"}:
        raise ValueError("bad applied mark")
    dirs, ids = applied["dirs"], applied["ids"]
    if not isinstance(dirs, list) or not all(isinstance(d, bytes) for d in dirs):
        raise ValueError("bad applied directories")
    for d in dirs:
        if d:
            check_path(d)
    if not isinstance(ids, list):
        raise ValueError("bad applied files")
    for item in ids:
        if not (
            isinstance(item, list) and len(item) == 3
            and all(isinstance(x, int) and not isinstance(x, bool) for x in item)
            and 0 <= item[0] < n_steps and 0 <= item[1] < (1 << 64) and abs(item[2]) < (1 << 63)
        ):
            raise ValueError("bad applied file")


def read(view: ReadView) -> Journal | None:
    """The pending journal, or None; CorruptError when there is one that cannot be parsed."""
    value = view.get("journal", JOURNAL_KEY)
    return None if value is None else parse(value)


def pending_ids(view: ReadView) -> list[bytes]:
    """The checkpoint ids a pending journal needs (prune and delete must keep them).

    A journal too damaged to replay still protects the ids it names: keeping a checkpoint
    longer is harmless, removing one that recovery needs is not.
    """
    value = view.get("journal", JOURNAL_KEY)
    if value is None:
        return []
    try:
        j = parse(value)
        if j.applied is not None:
            # Logged with the operation, the newest (a restore settles an applied journal before
            # it journals its own): undo's reach keeps both, and says so.
            return []
        return [cid for cid in (j.target, j.before) if cid is not None]
    except CorruptError:
        pass
    try:
        rec = msgpack.unpackb(value, raw=False, strict_map_key=False)
    except Exception:  # unreadable as msgpack: nothing can be named
        return []
    if not isinstance(rec, dict):
        return []
    return [v for v in (rec.get("target"), rec.get("before")) if isinstance(v, bytes) and len(v) == 32]


def finish(
    backend: Backend, op: dict[str, Any], changed: int, cache: dict[bytes, bytes] | None = None,
    request: Request | None = None, deleted: list[bytes] | None = None, keep: bytes | None = None,
) -> int:
    """Clear the journal and log the operation, in one transaction; returns its sequence.

    With ``keep`` (the journal value marked applied: :mod:`.settle`) the journal is replaced by
    it instead of cleared: the tree's writes are not synced yet.

    ``cache`` (statcache key -> value) refreshes the stat cache of the files the restore wrote,
    and the values of the files it ``deleted`` go (a watching Store's state forgets them
    without a listing that would report them gone: :mod:`.watching`);
    ``request`` (the service's) is recorded as done in the same transaction.  Not synced here:
    the record of the tree after the restore follows at once and syncs both as the store's
    durability setting says; should a power failure undo this commit, the journal is still
    there and the next writer finishes the restore again (every step is idempotent, and the
    tree already matches).
    """
    with tables(backend).read() as view:
        last = next(iter(view.items("oplog", reverse=True)), None)
    seq = next_seq(last[0] if last else None)
    entry = {k: v for k, v in op.items() if k not in ("pid", "boot", "applied")}
    entry["changed"] = changed
    entry["done_ns"] = time.time_ns()
    with tables(backend).write() as batch:
        if keep is None:
            batch.delete("journal", JOURNAL_KEY)
        else:
            batch.put("journal", JOURNAL_KEY, keep)
        batch.put("oplog", seq_key(seq), msgpack.packb(entry, use_bin_type=True))
        for key, value in (cache or {}).items():
            batch.put("statcache", key, value)
        for path in deleted or ():
            key = statcache.key(path)
            if cache is None or key not in cache:  # (not a file written where it was)
                batch.delete("statcache", key)
        requests.record(batch, request, stage="done", op=seq, kind=op["kind"], changed=changed)
    return seq


def clear(backend: Backend) -> None:
    """Drop the journal (the tree is left as it is)."""
    with tables(backend).write() as batch:
        batch.delete("journal", JOURNAL_KEY)
    backend.sync()


def clear_if(backend: Backend, value: bytes) -> bool:
    """Drop the journal if it is still ``value`` (the caller holds the writer lock); whether
    it was."""
    with tables(backend).read() as view:
        if view.get("journal", JOURNAL_KEY) != value:
            return False
    clear(backend)
    return True


# -- checking the tree against the journal -----------------------------------------------------


def matches(root: bytes, path: bytes, st: os.stat_result, entries: dict[bytes, Entry], dirs: set[bytes]) -> bool:
    """Is what lies at ``path`` (lstat ``st``) exactly what ``entries`` records there?"""
    e = entries.get(path)
    if e is None:
        return stat.S_ISDIR(st.st_mode) and path in dirs  # a directory implied by entries below
    if e.kind == DIR:
        return stat.S_ISDIR(st.st_mode)
    if e.kind == SYMLINK:
        if not stat.S_ISLNK(st.st_mode):
            return False
        try:
            return os.readlink(os.path.join(root, path)) == e.ref
        except OSError:
            return False
    if e.kind in (FILE, EXEC):
        if not stat.S_ISREG(st.st_mode) or st.st_size != e.size:
            return False
        hashed = worktree.hash_file(root, path)
        return hashed is not None and hashed[0] == e.ref
    return False  # unreadable: what is there cannot be shown to be recorded


def implied_dirs(entries: dict[bytes, Entry]) -> set[bytes]:
    out: set[bytes] = set()
    for p in entries:
        out.update(parents(p))
    return out


def conflicts(
    root: bytes, paths: Iterable[bytes], before: dict[bytes, Entry], after: dict[bytes, Entry],
    ours: Callable[[bytes, os.stat_result], bool] | None = None,
) -> list[bytes]:
    """The paths that are neither absent, nor as ``before`` has them, nor as ``after`` has them
    (nor, with ``ours``, a file the interrupted restore itself wrote, whatever it holds)."""
    before_dirs, after_dirs = implied_dirs(before), implied_dirs(after)
    out = []
    for path in sorted(set(paths)):
        try:
            st = os.lstat(os.path.join(root, path))
        except (FileNotFoundError, NotADirectoryError):
            continue  # absent: writing it destroys nothing
        if matches(root, path, st, before, before_dirs) or matches(root, path, st, after, after_dirs):
            continue
        if ours is not None and ours(path, st):
            continue
        out.append(path)
    return out


def conflict_error(found: list[bytes], doing: str) -> ConflictError:
    """The refusal when paths changed after a crash (nothing has been touched)."""
    shown = ", ".join(display(p) for p in found[:5]) + (" ..." if len(found) > 5 else "")
    return ConflictError(
        f"cannot {doing} the interrupted restore: {len(found)} path(s) changed since it was "
        f"interrupted ({shown}); nothing was touched.  Run 'snapstore recover --abandon' to keep "
        f"the tree as it is (it is recorded first), or {RECOVER_HINT}"
    )

