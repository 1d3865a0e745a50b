"""The file an edit reads and replaces, reached through directory descriptors.

Every directory of the path is opened one component at a time from the tree's root with
``O_NOFOLLOW`` (as restore does), afresh for each read and under the writer lock for the write,
so a directory swapped for a symlink while the edit waited for the lock makes it refuse, never
write outside the tree.  The file is replaced (temp file beside it, ``fchmod``, ``fsync``,
``rename``) only while it still holds the bytes the edit was planned on, and a write that lands
in the old version between the last check and the rename is detected afterwards and put back:
an edit never replaces content that no checkpoint holds and nobody can see any more.
"""

from __future__ import annotations

import errno
import os
import stat

from snapstore.errors import ConflictError, TreeIOError, UnsafePathError, UsageError
from snapstore.tree.atomic import create_temp, write_all

#: Files larger than this are not edited (the whole file is held in memory, twice).
MAX_EDIT_BYTES = 64 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def rename(tmp: str, name: str, dir_fd: int) -> None:
    """Rename ``tmp`` over ``name`` in directory ``dir_fd`` (a test seam: a write racing it)."""
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


class Target:
    """The file ``path`` of the tree at ``root`` (absolute, or relative to the root)."""

    def __init__(self, root: str, path: str, store_dir: str | None):
        full = os.path.normpath(path if os.path.isabs(path) else os.path.join(root, path))
        top = os.path.realpath(root)
        for candidate in (os.path.relpath(full, os.path.normpath(root)), os.path.relpath(os.path.realpath(full), top)):
            if candidate == os.curdir or candidate.startswith(os.pardir + os.sep) or candidate == os.pardir:
                what = "outside the tree" if candidate != os.curdir else "the tree itself"
                raise UnsafePathError(f"{path} is {what} ({root}): refused (a symlink may lead out)")
            if ".git" in candidate.split(os.sep):
                raise UnsafePathError(f"{path} is inside .git: refused")
        real = os.path.realpath(full)
        if store_dir is not None:
            store_real = os.path.realpath(store_dir)
            if real == store_real or real.startswith(store_real.rstrip(os.sep) + os.sep):
                raise UnsafePathError(f"{path} is inside the store {store_dir}: refused")
        #: The root-relative path shown to the user (the name given, symlinks not resolved).
        self.shown = os.path.relpath(full, os.path.normpath(root)).replace(os.sep, "/")
        self._top = top
        # The path as it was resolved now (a symlink inside the tree is followed once, here):
        # from now on it is opened component by component, following nothing.
        parts = os.path.relpath(real, top).split(os.sep)
        self._dirs, self._name = parts[:-1], parts[-1]

    def read(self) -> bytes:
        """The file's bytes (refusing what is not a regular file, or too large)."""
        dir_fd = self._open_dir()
        try:
            fd = self._open_file(dir_fd)
            try:
                return _read_all(fd, self.shown)
            finally:
                os.close(fd)
        finally:
            os.close(dir_fd)

    def replace(self, new: bytes, old: bytes) -> None:
        """Replace the file's ``old`` bytes by ``new`` (the caller holds the writer lock).

        ConflictError, nothing written, when the file no longer holds ``old``; ConflictError,
        the edit taken back, when a write landed in the old version during the replacement.
        """
        dir_fd = self._open_dir()
        try:
            fd = self._open_file(dir_fd)
            try:
                seen = os.fstat(fd)
                if _read_all(fd, self.shown) != old:
                    raise ConflictError(f"{self.shown} changed while the edit was prepared: nothing written; read it again")
                tmp, written = self._stage(dir_fd, new, seen)
                try:
                    self._check_unchanged(dir_fd, seen)
                    rename(tmp, self._name, dir_fd)
                    tmp = ""
                finally:
                    if tmp:
                        _unlink(tmp, dir_fd)
                _fsync(dir_fd)
                late = _pread_all(fd)
                if late != old:
                    self._put_back(dir_fd, late, seen, written)
            finally:
                os.close(fd)
        except OSError as exc:
            raise TreeIOError(f"cannot write {self.shown}: {exc.strerror or exc}") from exc
        finally:
            os.close(dir_fd)

    # -- the steps --------------------------------------------------------------------------

    def _open_dir(self) -> int:
        try:
            fd = os.open(self._top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise TreeIOError(f"cannot open the tree {self._top}: {exc.strerror}") from exc
        for part in self._dirs:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafePathError(
                        f"cannot edit {self.shown}: a directory of its path is now a symlink or a "
                        "file: refused (nothing is written through a symlink)"
                    ) from exc
                raise TreeIOError(f"cannot edit {self.shown}: {exc.strerror}") from exc
            os.close(fd)
            fd = nxt
        return fd

    def _open_file(self, dir_fd: int) -> int:
        try:
            fd = os.open(self._name, _READ_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePathError(f"cannot edit {self.shown}: it is now a symlink: refused") from exc
            raise TreeIOError(f"cannot edit {self.shown}: {exc.strerror}") from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise TreeIOError(f"cannot edit {self.shown}: not a regular file")
        return fd

    def _stage(self, dir_fd: int, data: bytes, like: os.stat_result) -> tuple[str, os.stat_result]:
        """A temp file beside the target holding ``data``, with the target's mode (and owner,
        when root edits another user's file), durable."""
        tmp, fd = create_temp(dir_fd, self._name)
        try:
            write_all(fd, data)
            if os.geteuid() == 0 and (like.st_uid, like.st_gid) != (0, 0):
                os.fchown(fd, like.st_uid, like.st_gid)
            os.fchmod(fd, stat.S_IMODE(like.st_mode))
            os.fsync(fd)
            return tmp, os.fstat(fd)
        except BaseException:
            _unlink(tmp, dir_fd)
            raise
        finally:
            os.close(fd)

    def _check_unchanged(self, dir_fd: int, seen: os.stat_result) -> None:
        """The last look before the rename: the name still holds the version read, and the
        directory is still the one the path leads to from the root."""
        now = os.stat(self._name, dir_fd=dir_fd, follow_symlinks=False)
        if (now.st_ino, now.st_dev, now.st_size, now.st_mtime_ns) != (seen.st_ino, seen.st_dev, seen.st_size, seen.st_mtime_ns):
            raise ConflictError(f"{self.shown} changed while the edit was written: nothing written; read it again")
        again = self._open_dir()
        try:
            moved = (os.fstat(again).st_ino, os.fstat(again).st_dev) != (os.fstat(dir_fd).st_ino, os.fstat(dir_fd).st_dev)
        finally:
            os.close(again)
        if moved:
            raise UnsafePathError(f"cannot edit {self.shown}: its directory was moved while the edit ran: refused")

    def _put_back(self, dir_fd: int, late: bytes, seen: os.stat_result, written: os.stat_result) -> None:
        """A write reached the old version after the last check: it is newer than the edit, so
        it goes back in place of the edit (unless the new file was written to meanwhile too)."""
        now = os.stat(self._name, dir_fd=dir_fd, follow_symlinks=False)
        if (now.st_ino, now.st_size, now.st_mtime_ns) != (written.st_ino, written.st_size, written.st_mtime_ns):
            raise ConflictError(
                f"{self.shown} was written by another process while the edit replaced it, and again "
                "after: the edit stands and that first write is lost"
            )
        tmp, _ = self._stage(dir_fd, late, seen)
        try:
            os.rename(tmp, self._name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError:
            _unlink(tmp, dir_fd)
            raise
        _fsync(dir_fd)
        raise ConflictError(
            f"{self.shown} was written by another process while the edit replaced it: the edit was "
            "taken back and the file holds that write (nothing lost); read it again"
        )


def _read_all(fd: int, shown: str) -> bytes:
    size = os.fstat(fd).st_size
    if size > MAX_EDIT_BYTES:
        raise UsageError(f"{shown} is larger than {MAX_EDIT_BYTES >> 20} MiB: not edited")
    data = _pread_all(fd, MAX_EDIT_BYTES + 1)
    if len(data) > MAX_EDIT_BYTES:
        raise UsageError(f"{shown} is larger than {MAX_EDIT_BYTES >> 20} MiB: not edited")
    return data


def _pread_all(fd: int, limit: int = MAX_EDIT_BYTES + 1) -> bytes:
    chunks, offset = [], 0
    while offset < limit:
        block = os.pread(fd, min(1 << 20, limit - offset), offset)
        if not block:
            break
        chunks.append(block)
        offset += len(block)
    return b"".join(chunks)


def _unlink(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _fsync(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is done
