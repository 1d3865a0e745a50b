"""Restore: make the tree equal to a checkpoint, atomically, safely, undoably.

The protocol (docs/architecture.md, "Restore"):

1. Under the writer lock, record the tree as it is now (a *safety* checkpoint; the latest
   checkpoint is reused when the tree has not changed since), so nothing the user had is lost.
2. Plan: compare the tree's manifest with the target's (restricted to the selected paths).
   Every target path is validated first (no absolute path, ``..``, empty part, NUL, ``.git``, the
   store, nothing below a non-directory of the same manifest) and every chunk the plan needs is
   read and re-hashed: a damaged store fails here, before the tree is touched.
3. Journal the plan in the store (one transaction, flushed to disk).
4. Apply: deletions deepest first, then writes shallowest first.  A file is written to a temp
   file in its target directory, fsynced and renamed over the target; directories are opened
   one component at a time with O_NOFOLLOW, so no write can pass through a symlink.  Before each
   path is touched its lstat is compared with what the plan saw; a difference means someone else
   changed it: the restore rolls back what it did and raises ConflictError naming the file.
5. Fsync the touched directories, then clear the journal and append to the operation log in one
   transaction.

A process killed anywhere in 4-5 leaves the journal; the next snapstore command that opens the
store rolls the restore forward (every journaled step is idempotent), so the tree ends exactly
in the after state.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import msgpack

from snapstore.errors import ConflictError, CorruptError, TreeIOError, UnsafePathError
from snapstore.ops.diff import ADDED, DELETED, MODE_CHANGED, MODIFIED, TYPE_CHANGED, Change, compare
from snapstore.records import manifest
from snapstore.records.checkpoint import SAFETY, Checkpoint, next_seq, parse_record, seq_key
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, Entry
from snapstore.storage import objects
from snapstore.storage.backend import JOURNAL_KEY
from snapstore.tree import worktree
from snapstore.tree.paths import display

TMP_PREFIX = b".snapstore-tmp."

#: Test seam: called with the op index before each step of phase 4 (crash tests kill there).
step_hook: Callable[[int], None] | None = None


# -- path safety ------------------------------------------------------------------------------


# Any empty, ".", ".." or ".git" component, a leading "/" or a NUL: the common case (a clean
# path) is one regex search, which matters when a restore validates a whole manifest.
_SUSPECT = re.compile(rb"(?:^|/)(?:|\.|\.\.|\.git)(?:/|$)|\x00")


def check_path(path: bytes) -> None:
    """Raise UnsafePathError unless ``path`` is a plain relative path inside the tree."""
    if path and _SUSPECT.search(path) is None:
        return
    shown = display(path)
    if not path:
        raise UnsafePathError("empty path in manifest")
    if b"\x00" in path:
        raise UnsafePathError(f"path with a NUL byte in manifest: {shown!r}")
    if path.startswith(b"/"):
        raise UnsafePathError(f"absolute path in manifest: {shown}")
    for part in path.split(b"/"):
        if part in (b"", b".", b".."):
            raise UnsafePathError(f"path with an empty, '.' or '..' part in manifest: {shown}")
        if part == b".git":
            raise UnsafePathError(f"path inside a .git directory in manifest: {shown}")


def check_manifest(entries: dict[bytes, Entry], excluded: frozenset[bytes]) -> None:
    """Validate every path of a manifest before any of it is used."""
    non_dirs = {p for p, e in entries.items() if e.kind != DIR}
    for path in entries:
        check_path(path)
        cut = path.rfind(b"/")
        while cut > 0:
            prefix = path[:cut]
            if prefix in non_dirs:
                raise UnsafePathError(
                    f"{display(path)} lies below {display(prefix)}, which is not a directory "
                    "in the same checkpoint"
                )
            cut = prefix.rfind(b"/")
        for ex in excluded:
            if path == ex or path.startswith(ex + b"/"):
                raise UnsafePathError(f"path inside the store in manifest: {display(path)}")


def selector(paths: Iterable[str | bytes] | None) -> Callable[[bytes], bool]:
    """A predicate for the paths a partial restore or diff covers (exact path or directory)."""
    if not paths:
        return lambda p: True
    from snapstore.tree.paths import from_user

    wanted = [from_user(p) for p in paths]
    if any(w == b"" for w in wanted):
        return lambda p: True

    def selected(p: bytes) -> bool:
        return any(p == w or p.startswith(w + b"/") for w in wanted)

    return selected


# -- planning ---------------------------------------------------------------------------------


@dataclass
class Step:
    """One idempotent action on one path: delete, rmdir, prune, write, symlink, mkdir, chmod."""

    action: str
    path: bytes


def plan(current: dict[bytes, Entry], target: dict[bytes, Entry], selected) -> tuple[list[Change], list[Step]]:
    cur = {p: e for p, e in current.items() if selected(p)}
    tgt = {p: e for p, e in target.items() if selected(p)}
    changes = compare(cur, tgt)
    removals: list[Step] = []
    writes: list[Step] = []
    removed_parents: set[bytes] = set()
    for c in changes:
        if c.status in (DELETED, TYPE_CHANGED):
            removals.append(Step("rmdir" if c.old.kind == DIR else "delete", c.path))
            cut = c.path.rfind(b"/")
            while cut > 0:
                removed_parents.add(c.path[:cut])
                cut = c.path.rfind(b"/", 0, cut)
        if c.status in (ADDED, MODIFIED, TYPE_CHANGED, MODE_CHANGED):
            new = c.new
            if c.status == MODE_CHANGED:
                action = "chmod"
            else:
                action = {FILE: "write", EXEC: "write", SYMLINK: "symlink", DIR: "mkdir"}[new.kind]
            writes.append(Step(action, c.path))
    needed: set[bytes] = set()
    for p, e in target.items():
        if e.kind == DIR:
            needed.add(p)
        cut = p.rfind(b"/")
        while cut > 0:
            needed.add(p[:cut])
            cut = p.rfind(b"/", 0, cut)
    for d in removed_parents:
        if d not in needed:
            # A directory left empty by the removals goes too; one the target puts a file or
            # symlink at must go (an error if it still holds ignored files).
            removals.append(Step("rmdir" if d in tgt else "prune", d))
    removals.sort(key=lambda s: s.path, reverse=True)
    writes.sort(key=lambda s: s.path)
    return changes, removals + writes


def skip_ignored(root: bytes, steps: list[Step], found: dict, warn) -> list[Step]:
    """Drop steps that would touch a path the scan did not see (ignored, .git, the store)."""
    known_dirs = {b""}
    for p, f in found.items():
        if f.kind == DIR:
            known_dirs.add(p)
        cut = p.rfind(b"/")
        while cut > 0:
            known_dirs.add(p[:cut])
            cut = p.rfind(b"/", 0, cut)
    hidden_cache: dict[bytes, bool] = {}

    def hidden(rel: bytes) -> bool:
        # Exists on disk but the scan did not report it: ignored or excluded.
        if rel in hidden_cache:
            return hidden_cache[rel]
        result = rel not in known_dirs and rel not in found and os.path.lexists(os.path.join(root, rel))
        hidden_cache[rel] = result
        return result

    kept = []
    for s in steps:
        p = s.path
        blocked = None
        cut = p.find(b"/")
        while cut > 0:
            if hidden(p[:cut]):
                blocked = p[:cut]
                break
            cut = p.find(b"/", cut + 1)
        if blocked is None and s.action in ("write", "symlink", "mkdir") and hidden(p):
            blocked = p
        if blocked is not None:
            warn(f"left {display(p)} alone: {display(blocked)} is ignored")
            continue
        kept.append(s)
    return kept


# -- applying ---------------------------------------------------------------------------------


class _Tree:
    """Directory handles below the root, opened one component at a time without following links."""

    def __init__(self, root: bytes):
        try:
            self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise TreeIOError(f"cannot open the tree {display(root)}: {exc.strerror}") from exc
        self.fds: dict[bytes, int] = {b"": self.root_fd}
        self.touched: set[bytes] = set()

    def dir_fd(self, rel_dir: bytes, create: bool) -> int | None:
        fd = self.fds.get(rel_dir)
        if fd is not None:
            return fd
        cut = rel_dir.rfind(b"/")
        parent, name = (rel_dir[:cut], rel_dir[cut + 1 :]) if cut >= 0 else (b"", rel_dir)
        pfd = self.dir_fd(parent, create)
        if pfd is None:
            return None
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=pfd)
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(name, 0o755, dir_fd=pfd)
            self.touched.add(parent)
            fd = os.open(name, flags, dir_fd=pfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise ConflictError(
                    f"{display(rel_dir)} is not a directory (a symlink or a file is in the way)"
                ) from exc
            raise
        self.fds[rel_dir] = fd
        return fd

    def split(self, path: bytes, create: bool) -> tuple[int | None, bytes, bytes]:
        cut = path.rfind(b"/")
        parent, name = (path[:cut], path[cut + 1 :]) if cut >= 0 else (b"", path)
        return self.dir_fd(parent, create), parent, name

    def split_existing(self, path: bytes) -> tuple[int | None, bytes, bytes]:
        """Like split, but a parent that is not a real directory means "not there" (a removal
        replayed after a crash may find its parent already replaced by a file)."""
        try:
            return self.split(path, create=False)
        except ConflictError:
            cut = path.rfind(b"/")
            return None, path[:cut] if cut >= 0 else b"", path[cut + 1 :]

    def forget(self, rel_dir: bytes) -> None:
        for key in [k for k in self.fds if k == rel_dir or k.startswith(rel_dir + b"/")]:
            if key:
                os.close(self.fds.pop(key))

    def lstat(self, path: bytes) -> os.stat_result | None:
        fd, _, name = self.split_existing(path)
        if fd is None:
            return None
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def sync_and_close(self) -> None:
        for rel in sorted(self.touched, reverse=True):
            fd = self.fds.get(rel)
            if fd is not None:
                try:
                    os.fsync(fd)
                except OSError:
                    pass
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def _file_mode(e: Entry) -> int:
    mode = e.mode & 0o777
    if e.kind == EXEC:
        mode |= 0o100 | ((mode & 0o044) >> 2)
    else:
        mode &= ~0o111
    return mode | 0o600 if mode & 0o600 == 0 else mode


class Applier:
    """Carries out steps against the tree; every step is idempotent (journal replay)."""

    def __init__(self, root: bytes, get, target: dict[bytes, Entry], tag: str):
        self.tree = _Tree(root)
        self.get = get
        self.target = target
        self.tag = tag.encode()
        self.counter = 0
        self.warnings: list[str] = []

    def close(self) -> None:
        self.tree.sync_and_close()

    def apply(self, step: Step) -> None:
        getattr(self, "_" + step.action)(step.path)

    def _delete(self, path: bytes) -> None:
        fd, parent, name = self.tree.split_existing(path)
        if fd is None:
            return
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            return
        except IsADirectoryError:
            self._rmdir(path)
            return
        self.tree.touched.add(parent)

    def _rmdir(self, path: bytes, quiet: bool = False) -> None:
        fd, parent, name = self.tree.split_existing(path)
        if fd is None:
            return
        self.tree.forget(path)
        try:
            os.rmdir(name, dir_fd=fd)
        except FileNotFoundError:
            return
        except NotADirectoryError:
            os.unlink(name, dir_fd=fd)
        except OSError as exc:
            if exc.errno != errno.ENOTEMPTY:
                raise
            if path in self.target:
                raise ConflictError(
                    f"cannot replace directory {display(path)}: it still holds files snapstore "
                    "does not track (ignored files)"
                ) from exc
            if not quiet:
                self.warnings.append(f"left directory {display(path)}: it still holds ignored files")
            return
        self.tree.touched.add(parent)

    def _prune(self, path: bytes) -> None:
        self._rmdir(path, quiet=True)

    def _tmp_name(self) -> bytes:
        self.counter += 1
        return TMP_PREFIX + self.tag + b"." + str(self.counter).encode()

    def _replace(self, fd: int, parent: bytes, tmp: bytes, name: bytes, path: bytes) -> None:
        try:
            os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError as exc:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise ConflictError(f"cannot replace {display(path)}: a directory is in the way") from exc
            raise
        self.tree.touched.add(parent)

    def _write(self, path: bytes) -> None:
        e = self.target[path]
        fd, parent, name = self.tree.split(path, create=True)
        tmp = self._tmp_name()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        out = os.open(tmp, flags, 0o600, dir_fd=fd)
        try:
            for data in objects.iter_stream(self.get, e.ref):
                view = memoryview(data)
                while view:
                    n = os.write(out, view)
                    view = view[n:]
            os.fchmod(out, _file_mode(e))
            os.fsync(out)
        except BaseException:
            os.close(out)
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
        os.close(out)
        self._replace(fd, parent, tmp, name, path)

    def _symlink(self, path: bytes) -> None:
        e = self.target[path]
        fd, parent, name = self.tree.split(path, create=True)
        tmp = self._tmp_name()
        os.symlink(e.ref, tmp, dir_fd=fd)
        self._replace(fd, parent, tmp, name, path)

    def _mkdir(self, path: bytes) -> None:
        self.tree.dir_fd(path, create=True)

    def _chmod(self, path: bytes) -> None:
        e = self.target[path]
        fd, parent, name = self.tree.split_existing(path)
        if fd is None:
            return self._write(path)
        try:
            f = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
        except FileNotFoundError:
            return self._write(path)
        try:
            os.fchmod(f, _file_mode(e))
        finally:
            os.close(f)
        self.tree.touched.add(parent)


def _same_as_seen(st: os.stat_result | None, seen) -> bool:
    """Is the path still as the plan saw it (``seen`` is a scan.Found or None for absent)?"""
    if seen is None:
        return st is None
    if st is None or seen.st is None:
        return False
    a, b = st, seen.st
    return (
        stat.S_IFMT(a.st_mode) == stat.S_IFMT(b.st_mode)
        and a.st_ino == b.st_ino
        and a.st_size == b.st_size
        and a.st_mtime_ns == b.st_mtime_ns
    )


def verify_sources(get, target: dict[bytes, Entry], steps: list[Step]) -> None:
    """Read and re-hash every chunk the steps need; raise CorruptError before any write."""
    seen: set[bytes] = set()
    for s in steps:
        if s.action != "write":
            continue
        sid = target[s.path].ref
        if sid in seen:
            continue
        seen.add(sid)
        try:
            for _ in objects.iter_stream(get, sid):
                pass
        except CorruptError as exc:
            raise CorruptError(
                f"cannot restore {display(s.path)}: {exc}; the tree was not touched"
            ) from exc


# -- the journal and the operation log ---------------------------------------------------------


def journal_record(op: dict, steps: list[Step]) -> bytes:
    return msgpack.packb({**op, "steps": [[s.action, s.path] for s in steps]}, use_bin_type=True)


def parse_journal(value: bytes) -> tuple[dict, list[Step]]:
    try:
        rec = msgpack.unpackb(value, raw=False)
        steps = [Step(str(a), bytes(p)) for a, p in rec.pop("steps")]
        valid = {"delete", "rmdir", "prune", "write", "symlink", "mkdir", "chmod"}
        for s in steps:
            if s.action not in valid:
                raise ValueError(f"unknown step {s.action!r}")
            check_path(s.path)
        if not isinstance(rec.get("target"), bytes):
            raise ValueError("no target")
    except (ValueError, TypeError, KeyError, msgpack.UnpackException, UnsafePathError) as exc:
        raise CorruptError(f"the restore journal is damaged ({exc})") from exc
    return rec, steps


@dataclass
class RestoreReport:
    """What a restore (or undo) did, or would do with ``dry_run``."""

    kind: str  # "restore" or "undo"
    target: Checkpoint
    safety: Checkpoint | None
    changes: list[Change]
    dry_run: bool
    warnings: list[str] = field(default_factory=list)
    op_seq: int | None = None

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "target": self.target.id,
            "safety_checkpoint": self.safety.id if self.safety else None,
            "dry_run": self.dry_run,
            "op": self.op_seq,
            "changes": [c.to_json() for c in self.changes],
            "warnings": self.warnings,
        }


def run(store, target: Checkpoint, paths, *, dry_run: bool, kind: str, message: str) -> RestoreReport:
    """Carry out the protocol above; the caller holds the writer lock."""
    from snapstore.ops import snapshot

    backend = store.backend
    selected = selector(paths)
    with backend.read() as view:
        target_entries = manifest.load(view.get, target.manifest)
    check_manifest(target_entries, store.excluded)

    if dry_run:
        current, found = worktree.current_state(store)
        safety = None
    else:
        safety_id, packed, result = snapshot.take(
            store.context, message=message, kind=SAFETY, skip_unchanged=True
        )
        safety = parse_record(safety_id, packed)
        current = {e.path: e for e in result.entries}
        found = {f.path: f for f in result.found}
    changes, steps = plan(current, target_entries, selected)
    warnings: list[str] = []
    steps = skip_ignored(store.root_bytes, steps, found, warnings.append)
    kept_paths = {s.path for s in steps}
    changes = [c for c in changes if c.path in kept_paths]
    if dry_run:
        return RestoreReport(kind, target, None, changes, True, warnings)

    with backend.read() as view:
        verify_sources(view.get, target_entries, steps)
    op = {
        "kind": kind,
        "target": bytes.fromhex(target.id),
        "before": bytes.fromhex(safety.id),
        "paths": [os.fsencode(p) for p in paths] if paths else None,
        "time_ns": time.time_ns(),
        "pid": os.getpid(),
    }
    with backend.write() as batch:
        batch.put("journal", JOURNAL_KEY, journal_record(op, steps))
    backend.sync()

    applier = Applier(store.root_bytes, _getter(backend), target_entries, f"{os.getpid()}")
    done: list[Step] = []
    touched: set[bytes] = set()
    try:
        tree = applier.tree
        for i, s in enumerate(steps):
            if step_hook is not None:
                step_hook(i)
            # Implicit directories (parents of entries) are not in the scan: their contents are
            # checked one by one instead.
            # A directory to create may already exist implicitly (it held files that earlier
            # steps removed); creating it is idempotent, so it is not a conflict either.
            implicit = s.action in ("prune", "rmdir", "mkdir") and s.path not in found
            check = not implicit and s.path not in touched
            if check and not _same_as_seen(tree.lstat(s.path), found.get(s.path)):
                raise ConflictError(
                    f"{display(s.path)} changed while the restore ran; the restore was rolled back "
                    "(nothing was lost)"
                )
            applier.apply(s)
            done.append(s)
            touched.add(s.path)
    except BaseException as exc:
        applier.close()
        if isinstance(exc, ConflictError | OSError):
            try:
                _roll_back(store, safety, done)
            except OSError as again:
                # The journal stays: like after a crash, the next command finishes the restore
                # (rolls it forward) once the cause (a full disk, say) is gone.
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise TreeIOError(
                    f"restore failed ({why}) and could not be rolled back "
                    f"({again.strerror or again}); the next snapstore command on this tree "
                    "finishes the restore once that is fixed (nothing was lost)"
                ) from exc
            with backend.write() as batch:
                batch.delete("journal", JOURNAL_KEY)
            backend.sync()
            if isinstance(exc, OSError):
                raise TreeIOError(
                    f"restore failed and was rolled back: {exc.strerror or exc}"
                    + (f" ({display(os.fsencode(exc.filename))})" if exc.filename else "")
                ) from exc
        raise
    applier.close()
    warnings.extend(applier.warnings)
    seq = finish(backend, op, len(changes))
    return RestoreReport(kind, target, safety, changes, False, warnings, seq)


def _getter(backend):
    def get(table: str, key: bytes):
        with backend.read() as view:
            return view.get(table, key)

    return get


def _roll_back(store, safety: Checkpoint, done: list[Step]) -> None:
    """Put the paths already touched back as the safety checkpoint has them."""
    if not done:
        return
    with store.backend.read() as view:
        before = manifest.load(view.get, safety.manifest)
    touched = {s.path for s in done}
    current, _ = worktree.current_state(store)
    _, steps = plan(current, before, lambda p: p in touched or any(p.startswith(t + b"/") for t in touched))
    applier = Applier(store.root_bytes, _getter(store.backend), before, f"{os.getpid()}r")
    try:
        for s in steps:
            applier.apply(s)
    finally:
        applier.close()


def finish(backend, op: dict, changed: int) -> int:
    """Clear the journal and log the operation, in one transaction."""
    with backend.read() as view:
        last = next(iter(view.items("oplog", reverse=True)), None)
    seq = next_seq(last[0] if last else None)
    record = {k: v for k, v in op.items() if k != "pid"}
    record["changed"] = changed
    record["done_ns"] = time.time_ns()
    with backend.write() as batch:
        batch.delete("journal", JOURNAL_KEY)
        batch.put("oplog", seq_key(seq), msgpack.packb(record, use_bin_type=True))
    backend.sync()
    return seq


def recover(store) -> bool:
    """Finish an interrupted restore (roll forward); True if there was one.  Lock held."""
    backend = store.backend
    with backend.read() as view:
        value = view.get("journal", JOURNAL_KEY)
    if value is None:
        return False
    op, steps = parse_journal(value)
    from snapstore.records.checkpoint import load_one

    with backend.read() as view:
        target = load_one(view, op["target"])
        target_entries = manifest.load(view.get, target.manifest)
    check_manifest(target_entries, store.excluded)
    applier = Applier(store.root_bytes, _getter(backend), target_entries, f"{os.getpid()}c")
    try:
        for s in steps:
            if s.action in ("write", "symlink", "mkdir", "chmod") and s.path not in target_entries:
                raise CorruptError(f"the restore journal names {display(s.path)}, absent from its target")
            applier.apply(s)
        _clean_temp_files(applier.tree, steps)
    except OSError as exc:
        raise TreeIOError(
            f"cannot finish the interrupted restore: {exc.strerror or exc}"
            + (f" ({display(os.fsencode(exc.filename))})" if exc.filename else "")
            + "; it is still journaled and is finished by the next command once that is fixed"
        ) from exc
    finally:
        applier.close()
    finish(backend, op, len(steps))
    return True


def _clean_temp_files(tree: _Tree, steps: list[Step]) -> None:
    """Remove temp files an interrupted restore left in the directories it was writing to."""
    dirs = {s.path.rpartition(b"/")[0] for s in steps}
    for rel in dirs:
        try:
            fd = tree.dir_fd(rel, create=False)
        except ConflictError:
            continue  # no longer a directory: nothing of ours can be in it
        if fd is None:
            continue
        for name in os.listdir(fd):
            if isinstance(name, str):
                name = os.fsencode(name)
            if name.startswith(TMP_PREFIX):
                try:
                    os.unlink(name, dir_fd=fd)
                    tree.touched.add(rel)
                except OSError:
                    pass
