"""Carrying out a restore's steps: the directory-fd walker and the applier.

Directories are opened one component at a time with O_NOFOLLOW below the root, so no write can
pass through a symlink.  A file is written to a temp file in its target directory (created
O_EXCL|O_NOFOLLOW, so nothing planted there is followed or reused), given its mode with fchmod,
made durable and renamed over the target: an existing inode is never written or chmodded in
place (a hard link to a file outside the tree keeps its content and mode).  Every step is
idempotent, so a journal of them can be replayed after a crash.  :mod:`.batch` carries out a
whole plan: the temp files are written in parallel and made durable together.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from snapstore.errors import ConflictError, TreeIOError
from snapstore.ops.context import StageContext
from snapstore.ops.diff import Getter
from snapstore.ops.restore.journal import tables
from snapstore.ops.restore.plan import Step
from snapstore.records.manifest import EXEC, Entry, exact_mode
from snapstore.storage import objects
from snapstore.tree import statcache
from snapstore.tree.paths import display

TMP_PREFIX = b".snapstore-tmp."

#: Test seam: how the applier writes a block of a file (tests patch this, never ``os.write``).
write: Callable[[int, memoryview], int] = os.write


def rename(tmp: bytes, name: bytes, dir_fd: int) -> None:
    """Rename ``tmp`` to ``name`` inside directory ``dir_fd`` (a test seam, like :data:`write`)."""
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def unlink(name: bytes, dir_fd: int) -> None:
    """Unlink ``name`` in directory ``dir_fd``: a file the restore replaces (a test seam)."""
    os.unlink(name, dir_fd=dir_fd)


@dataclass
class Staged:
    """A file's new content, written to a temp file next to its target, not yet renamed."""

    path: bytes
    dir_fd: int
    parent: bytes
    tmp: bytes
    name: bytes
    #: The fstat of the temp file once written and given its mode (for the stat cache).
    st: os.stat_result


class Aside(NamedTuple):
    """A file of the tree renamed out of the way (:meth:`Applier.set_aside`), to be unlinked."""

    dir_fd: int
    name: bytes
    tmp: bytes


def getter(ctx: StageContext) -> Getter:
    """``get(table, key)`` through a fresh read transaction per call (the applier streams)."""

    def get(table: str, key: bytes) -> bytes | None:
        with tables(ctx.backend).read() as view:
            value: bytes | None = view.get(table, key)
            return value

    return get


def _split_name(path: bytes) -> tuple[bytes, bytes]:
    parent, _, name = path.rpartition(b"/")
    return parent, name


class DirTree:
    """Directory handles below the root, opened one component at a time without following links."""

    def __init__(self, root: bytes):
        try:
            self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise TreeIOError(f"cannot open the tree {display(root)}: {exc.strerror}") from exc
        self.fds: dict[bytes, int] = {b"": self.root_fd}
        self.touched: set[bytes] = set()

    def dir_fd(self, rel_dir: bytes, create: bool) -> int | None:
        """An fd of directory ``rel_dir`` (created with its parents if ``create``), or None."""
        fd = self.fds.get(rel_dir)
        if fd is not None:
            return fd
        parent, name = _split_name(rel_dir)
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
        """``(fd of the parent directory or None, parent, name)`` of ``path``."""
        parent, name = _split_name(path)
        return self.dir_fd(parent, create), parent, name

    def split_existing(self, path: bytes) -> tuple[int | None, bytes, bytes]:
        """Like split, but a parent that is not a real directory means "not there" (a removal
        replayed after a crash may find its parent already replaced by a file)."""
        try:
            return self.split(path, create=False)
        except ConflictError:
            parent, name = _split_name(path)
            return None, parent, name

    def forget(self, rel_dir: bytes) -> None:
        """Close the handles of ``rel_dir`` and below (it is about to be removed)."""
        for key in [k for k in self.fds if k == rel_dir or k.startswith(rel_dir + b"/")]:
            if key:
                os.close(self.fds.pop(key))

    def lstat(self, path: bytes) -> os.stat_result | None:
        """The lstat of ``path``, or None when it (or a real directory above it) is not there."""
        fd, _, name = self.split_existing(path)
        if fd is None:
            return None
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def sync_and_close(self) -> None:
        """Fsync the directories written to, then close every handle."""
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


def file_mode(e: Entry) -> int:
    """The permission bits a restored file gets: exact, or (old entries) the exec bit's rule."""
    exact = exact_mode(e.mode)
    if exact is not None:
        return exact
    mode = e.mode & 0o777
    if e.kind == EXEC:
        mode |= 0o100 | ((mode & 0o044) >> 2)
    else:
        mode &= ~0o111
    return mode | 0o600 if mode & 0o600 == 0 else mode


class Applier:
    """Carries out steps against the tree; every step is idempotent (journal replay)."""

    def __init__(self, root: bytes, get: Getter, target: Mapping[bytes, Entry], tag: str):
        self.tree = DirTree(root)
        self.get = get
        self.target = target
        self.tag = tag.encode()
        self._names = itertools.count(1)  # next() on a count is atomic: writer threads share it
        self.warnings: list[str] = []
        #: Pre-read contents by stream id (restore.verify_sources keeps small ones), so a file
        #: is not read and decompressed twice.
        self.contents: dict[bytes, list[bytes]] = {}
        #: Stat-cache values of the files written (statcache key -> value), for the next snapshot.
        self.cache: dict[bytes, bytes] = {}
        #: The files written that the stat cache vouches for: path -> (lstat after the rename, sid).
        self.written: dict[bytes, tuple[os.stat_result, bytes]] = {}
        #: Each file renamed into place: path -> (inode, mtime) it had (a deferred restore
        #: journals them: after a power failure they tell its own files from the user's).
        self.identity: dict[bytes, tuple[int, int]] = {}

    def close(self) -> None:
        """Fsync what was written and release the directory handles."""
        self.tree.sync_and_close()

    def apply(self, step: Step) -> None:
        """Carry out one step."""
        action = "write" if step.action == "chmod" else step.action
        getattr(self, "_" + action)(step.path)

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
        return TMP_PREFIX + self.tag + b"." + str(next(self._names)).encode()

    def _replace(self, fd: int, parent: bytes, tmp: bytes, name: bytes, path: bytes) -> None:
        try:
            rename(tmp, name, fd)
        except OSError as exc:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            if exc.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise ConflictError(f"cannot replace {display(path)}: a directory is in the way") from exc
            raise
        self.tree.touched.add(parent)

    def _parent_fd(self, path: bytes) -> tuple[int, bytes, bytes]:
        fd, parent, name = self.tree.split(path, create=True)
        assert fd is not None  # create=True makes the parent or raises
        return fd, parent, name

    def _write(self, path: bytes) -> None:
        fd, parent, name = self._parent_fd(path)
        staged = self.stage(path, fd, parent, name, durable=True)
        self.commit(staged)

    def stage(self, path: bytes, fd: int, parent: bytes, name: bytes, *, durable: bool) -> Staged:
        """Write ``path``'s target content to a new temp file in directory ``fd``.

        Safe in a worker thread (it touches no shared state but the name counter).  With
        ``durable`` the data is fsynced; otherwise the caller makes it durable (syncfs) before
        :meth:`commit`.
        """
        e = self.target[path]
        mode = file_mode(e)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            tmp = self._tmp_name()
            try:
                # (created with its mode, but no write access for group or others until its
                # bytes are in: the umask may take bits away too, both put back below; the
                # creating descriptor writes whatever the mode says)
                out = os.open(tmp, flags, mode & ~0o022, dir_fd=fd)
                break
            except FileExistsError:
                continue  # a name left by a killed restore (or planted): never reuse it
        try:
            blocks = self.contents.get(e.ref)
            for data in objects.iter_stream(self.get, e.ref) if blocks is None else blocks:
                view = memoryview(data)
                while view:
                    n = write(out, view)
                    view = view[n:]
            st = os.fstat(out)
            if stat.S_IMODE(st.st_mode) != mode:  # (the new inode only)
                os.fchmod(out, mode)
                st = os.fstat(out)
            if durable:
                os.fsync(out)
        except BaseException:
            os.close(out)
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
        os.close(out)
        return Staged(path, fd, parent, tmp, name, st)

    def set_aside(self, dir_fd: int, parent: bytes, name: bytes, seen: os.stat_result | None = None) -> Aside | None:
        """Rename the file or symlink ``name`` (in directory ``dir_fd``, the tree's ``parent``)
        to a temp name beside it; None when nothing was moved (absent, or a directory: that
        stays, for its step to meet).  ``seen``: its lstat, just taken (the caller's check),
        else it is taken here.  Renaming is quick where freeing a file's blocks may wait on
        the disk: :meth:`drop_aside` frees them, many at once."""
        st = seen
        if st is None:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
        if stat.S_ISDIR(st.st_mode):
            return None
        aside = Aside(dir_fd, name, self._tmp_name())
        try:
            os.rename(name, aside.tmp, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        self.tree.touched.add(parent)
        return aside

    def drop_aside(self, aside: Aside) -> None:
        """Unlink what :meth:`set_aside` moved (safe in a worker thread); a directory swapped
        in meanwhile is put back (the step that meets it then conflicts)."""
        try:
            unlink(aside.tmp, aside.dir_fd)
        except FileNotFoundError:
            pass
        except (IsADirectoryError, PermissionError):  # (EPERM is Linux's answer for a directory)
            self.put_back(aside)

    def put_back(self, aside: Aside) -> None:
        """Give what :meth:`set_aside` moved its name again (a restore that stops)."""
        os.rename(aside.tmp, aside.name, src_dir_fd=aside.dir_fd, dst_dir_fd=aside.dir_fd)

    def commit(self, staged: Staged) -> None:
        """Rename a staged file over its target and note its stat-cache value."""
        self._replace(staged.dir_fd, staged.parent, staged.tmp, staged.name, staged.path)
        try:
            after = os.stat(staged.name, dir_fd=staged.dir_fd, follow_symlinks=False)
        except OSError:
            return  # gone already: the next snapshot sees that
        self.identity[staged.path] = (after.st_ino, after.st_mtime_ns)
        sid = self.target[staged.path].ref
        value = statcache.written(staged.st, after, sid)
        if value is not None:
            self.cache[statcache.key(staged.path)] = value
            self.written[staged.path] = (after, sid)

    def discard(self, staged: Staged) -> None:
        """Remove a staged temp file that will not be renamed."""
        try:
            os.unlink(staged.tmp, dir_fd=staged.dir_fd)
        except OSError:
            pass

    def _symlink(self, path: bytes) -> None:
        e = self.target[path]
        fd, parent, name = self._parent_fd(path)
        while True:
            tmp = self._tmp_name()
            try:
                os.symlink(e.ref, tmp, dir_fd=fd)
                break
            except FileExistsError:
                continue
        self._replace(fd, parent, tmp, name, path)

    def _mkdir(self, path: bytes) -> None:
        self.tree.dir_fd(path, create=True)

    def _dirmode(self, path: bytes) -> None:
        mode = exact_mode(self.target[path].mode)
        fd = self.tree.dir_fd(path, create=False)
        if fd is None or mode is None:
            return
        os.fchmod(fd, mode)  # through the fd opened with O_NOFOLLOW: never a symlink's target
        self.tree.touched.add(path)


def clean_temp_files(tree: DirTree, paths: list[bytes]) -> None:
    """Remove temp files an interrupted restore left in the directories it was writing to."""
    for rel in {p.rpartition(b"/")[0] for p in paths}:
        try:
            fd = tree.dir_fd(rel, create=False)
        except (ConflictError, OSError):
            continue  # no longer a directory (or unreadable): nothing of ours can be in it
        if fd is None:
            continue
        for name in os.listdir(fd):
            raw = os.fsencode(name)
            if raw.startswith(TMP_PREFIX):
                try:
                    os.unlink(raw, dir_fd=fd)
                    tree.touched.add(rel)
                except OSError:
                    pass
