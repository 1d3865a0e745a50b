"""Writing a whole file atomically, safely, in a directory someone else may also write to.

The temp file is created in the target's own directory (so the rename is atomic) under an
unpredictable name with O_CREAT|O_EXCL|O_NOFOLLOW: a name planted in advance, as a symlink or
a file, is never followed or reused.  The data is fsynced before the rename and the directory
after it, so a crash leaves the old file or the new one, never a torn one.  A symlink at the
target path is replaced (not followed).
"""

from __future__ import annotations

import os
import secrets

from snapstore.errors import TreeIOError

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_file_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o666) -> None:
    """Replace ``path`` by a file holding ``data`` (``mode`` is filtered by the umask).

    Raises TreeIOError (one line, naming the path) when it cannot; no temp file is left.
    """
    target = os.path.abspath(os.fspath(path))
    directory, name = os.path.split(target)
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise TreeIOError(f"cannot write {target}: {exc.strerror}") from exc
    tmp = ""
    try:
        tmp, fd = create_temp(dir_fd, name, mode)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = ""
        try:
            os.fsync(dir_fd)
        except OSError:
            pass  # some file systems cannot fsync a directory; the rename is done
    except OSError as exc:
        raise TreeIOError(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        if tmp:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
        os.close(dir_fd)


def create_temp(dir_fd: int, name: str, mode: int = 0o600) -> tuple[str, int]:
    """A new temp file beside ``name`` in directory ``dir_fd``: an unpredictable name created
    ``O_EXCL | O_NOFOLLOW`` (nothing planted there is followed or reused); its name and fd."""
    while True:
        tmp = f".{name}.snapstore-tmp.{secrets.token_hex(8)}"
        try:
            return tmp, os.open(tmp, _FLAGS, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (short writes continued)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
