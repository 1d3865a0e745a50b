"""The tree as a restore left it, without walking it again (for the record taken after it).

The restore's safety checkpoint walked the tree just before; the restore then changed only the
paths of its steps.  So the walk's records, with each step's path looked at again (``lstat``,
and ``listdir`` for a directory that may now be empty), are what a new walk would find, at
O(changed) cost.  The paths whose records may differ from the walk's are named too
(:class:`After`'s ``touched``): the record after the restore takes every other path's entry from
the safety checkpoint's (:func:`snapstore.ops.snapshot.walk.inputs`), so it neither passes over
the stat cache nor reads again the files the safety checkpoint had to read (racy ones: a
checkout rewrote them just before).  When that cannot be known so cheaply (an ignore file changed, which may hide
or show anything) there is no hint, and the record walks as before.  A wrong hint could not hide
a change anyway: the next snapshot walks (or watches) for itself and compares its own manifest.
"""

from __future__ import annotations

import bisect
import os
import stat
from collections.abc import Callable, Mapping
from contextlib import ExitStack

from snapstore.errors import SnapstoreError
from snapstore.ops.context import StageContext
from snapstore.ops.restore.plan import Step
from snapstore.ops.snapshot.result import SnapshotResult
from snapstore.records.manifest import DIR, EXEC, FILE, SYMLINK, Entry
from snapstore.storage.lock import WriterLock
from snapstore.tree import scan
from snapstore.tree.ignore import IGNORE_FILES
from snapstore.tree.paths import parents


class After:
    """What a walk would find after a restore: every record (sorted by path), and the paths
    whose records may differ from the safety checkpoint's walk, each with its record now (None:
    no record, as for a non-empty directory or a path that is gone)."""

    __slots__ = ("records", "touched")

    def __init__(self, records: list[scan.Found], touched: dict[bytes, scan.Found | None]) -> None:
        self.records = records
        self.touched = touched


def found_after(root: bytes, found: Mapping[bytes, scan.Found], steps: list[Step]) -> After | None:
    """The walk's records after ``steps``, or None when a walk is needed."""
    if any(s.path.rsplit(b"/", 1)[-1] in IGNORE_FILES for s in steps):
        return None
    out = dict(found)
    before = sorted(found)  # (what lies under a path: a bisection, not a pass over all)
    dirs: set[bytes] = set()
    touched: set[bytes] = set()
    gone: set[bytes] = set()
    for s in steps:
        dirs.update(parents(s.path))
        touched.add(s.path)
        try:
            st = os.lstat(os.path.join(root, s.path))
        except (FileNotFoundError, NotADirectoryError):  # (a parent is a file now)
            gone.add(s.path)
            touched.update(_drop(out, s.path, before))
            continue
        except OSError:
            return None
        mode = st.st_mode
        if stat.S_ISREG(mode):
            out[s.path] = scan.Found(s.path, EXEC if mode & 0o100 else FILE, scan.compact(st), b"")
        elif stat.S_ISLNK(mode):
            try:
                out[s.path] = scan.Found(s.path, SYMLINK, scan.compact(st), os.readlink(os.path.join(root, s.path)))
            except OSError:
                return None
        elif stat.S_ISDIR(mode):
            if s.path in out and out[s.path].kind != DIR:
                del out[s.path]  # what was there before the restore (a file, a symlink)
            dirs.add(s.path)
        else:
            return None  # something the restore did not write appeared: let a walk say what
    for p in touched - gone:  # (a step's record under a path a later step found gone)
        if p in out and any(d in gone for d in parents(p)):
            del out[p]
    paths = sorted(out)  # (what may be under a directory: a bisection, not a pass over all)
    for d in sorted(dirs, key=len, reverse=True):  # deepest first, as a walk decides emptiness
        if not _empty_dir_record(root, d, out, paths):
            return None
    touched |= dirs
    return After(sorted(out.values()), {p: out.get(p) for p in touched})


def _drop(out: dict[bytes, scan.Found], path: bytes, before: list[bytes]) -> list[bytes]:
    """Drop the records of ``path`` and of everything the walk found under it (``before``: its
    paths, sorted); the paths dropped."""
    out.pop(path, None)
    prefix = path + b"/"
    n = bisect.bisect_left(before, prefix)
    below = []
    while n < len(before) and before[n].startswith(prefix):
        below.append(before[n])
        n += 1
    for p in below:
        out.pop(p, None)
    return below


def _empty_dir_record(root: bytes, d: bytes, out: dict[bytes, scan.Found], paths: list[bytes]) -> bool:
    """Record ``d`` as an empty DIR exactly when a walk would (it exists and holds nothing at
    all), else drop such a record; False when it cannot be told.  ``paths``: the keys of
    ``out``, sorted, before the directories were looked at (a record added since, an empty
    directory's, is one the listing below sees anyway)."""
    record = out.get(d)
    if record is not None and record.kind != DIR:
        return True  # a file or symlink there now (its step set it), or unreadable as it was
    out.pop(d, None)
    prefix = d + b"/"
    n = bisect.bisect_left(paths, prefix)
    while n < len(paths) and paths[n].startswith(prefix):
        if paths[n] in out:  # (one dropped since is passed over)
            return True
        n += 1
    try:
        st = os.lstat(os.path.join(root, d))
        if not stat.S_ISDIR(st.st_mode):
            return True  # gone, or its record is that of a file (set above)
        if not os.listdir(os.path.join(root, d)):
            out[d] = scan.Found(d, DIR, scan.compact(st), b"")
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return True


def by_path(ctx: StageContext, result: SnapshotResult) -> tuple[Mapping[bytes, Entry], Mapping[bytes, scan.Found]]:
    """A safety checkpoint's entries and walk records by path, as the restore reads them: the
    manifest memo's entries (the dict this snapshot recorded, kept until the next snapshot,
    which comes after the restore is done with them) and, after a watcher's patch, the tree
    state's own map of records; a dict of each otherwise."""
    found = result.found if isinstance(result.found, Mapping) else {f.path: f for f in result.found}
    memo = ctx.manifest_memo
    if memo.mid == result.manifest_id and memo.entries is not None:
        return memo.entries, found
    return {e.path: e for e in result.entries}, found


def record_after(ctx: StageContext, record: Callable[[], object], lock: WriterLock, message: str) -> str | None:
    """Record the tree as a restore left it (``record``: a hidden checkpoint, so the next
    checkpoint's parent and counts describe the tree it was taken from); why not, when the
    store could not (best effort: the restore is done, its journal cleared or marked applied,
    its operation logged).  The restore taught the stat cache (and a watcher's state) the files
    it wrote, so this reads none of them.

    In a service request (``ctx.after_answer``) the tree is read now and the record written
    once the answer is out (:func:`_later`).  Wholly after the answer it would take in what
    the user changed once the answer was out, which the next checkpoint would then lack."""
    try:
        if ctx.after_answer is None:
            record()
        else:
            ctx.after_answer.append(_later(ctx, lock, message))
    except SnapstoreError as exc:
        return str(exc)
    finally:
        ctx.found_hint = None  # used by that record or by nothing
    return None


def _later(ctx: StageContext, lock: WriterLock, message: str) -> Callable[[], None]:
    """Read the tree for its record now; the function returned writes the record
    (:func:`snapstore.ops.snapshot.pipeline.take_later`).  The writer lock stays held from
    here to that write, a few milliseconds after the service's answer: no other process
    records, or collects garbage, in between."""
    from snapstore.ops import snapshot
    from snapstore.records.checkpoint import SAFETY

    held = ExitStack()
    held.enter_context(lock.held())
    try:
        later = snapshot.take_later(ctx, message=message, kind=SAFETY, skip_unchanged=True)
    except BaseException:
        held.close()
        raise

    def write() -> None:
        with held:
            later.write()

    return write
