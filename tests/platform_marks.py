"""Skip marks for the tests of a Linux-only facility, which ``make test-portable``
(``SNAPSTORE_PLATFORM=portable``: snapstore.platform) masks as macOS or a BSD would lack it.

Each names what it needs and why the portable path has no such thing; every other test runs
under the mask as it is.
"""

from __future__ import annotations

import pytest

from snapstore.platform import linux, maps, sync, tcp

#: A test of inotify itself: its limits, its queue, or that its events name exactly what changed.
needs_inotify = pytest.mark.skipif(
    not linux(),
    reason="tests inotify itself (its limits, its queue, events naming exactly what changed): the portable polling "
    "source has no limits or queue and, by design, names again a file written within a tick of its last look",
)
#: A test that counts syncfs calls or kills a restore at one.
needs_syncfs = pytest.mark.skipif(
    not sync.available(), reason="counts Linux's syncfs calls: without syncfs every file and directory is fsynced "
    "(tests/test_restore_speed.py::test_without_syncfs_every_file_is_fsynced_before_its_rename)"
)
#: A test of the mapped-file guarantee, which reads other processes' maps in /proc.
needs_proc_maps = pytest.mark.skipif(
    not maps.sees_mappings(),
    reason="tests the re-read of files mapped shared and writable, found in /proc/*/maps: without /proc the "
    "guarantee is weaker (a mapped write is seen when it changes the file's mtime or size, as a walk sees it)",
)
#: A test of knowing which local user holds a TCP connection (/proc/net/tcp, sock_diag).
needs_tcp_owners = pytest.mark.skipif(
    not tcp.tells_owners(), reason="needs the TCP socket owners Linux lists (/proc/net/tcp): the portable mode cannot tell"
)
