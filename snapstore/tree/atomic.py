"""Writing one file atomically, safely, anywhere (also outside the tree, e.g. ``-o FILE``).

The temporary file is made by :func:`tempfile.mkstemp` in the target's directory (O_EXCL and an
unpredictable name, so another local user cannot plant a symlink under it), fsynced, then
renamed over the target; the target itself is replaced, never written through, so a symlink at
the target's name is replaced rather than followed.
"""

from __future__ import annotations

import os
import tempfile

from snapstore.errors import TreeIOError


def write_file_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` in one rename; nothing half-written is ever visible."""
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".snapstore-tmp.", dir=directory)
    except OSError as exc:
        raise TreeIOError(f"cannot write {target}: {exc.strerror}") from exc
    try:
        try:
            os.fchmod(fd, mode & ~_umask())
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise TreeIOError(f"cannot write {target}: {exc.strerror}") from exc
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def _umask() -> int:
    # os.umask can only be read by setting it; do so once, restoring it at once.
    current = os.umask(0o022)
    os.umask(current)
    return current
