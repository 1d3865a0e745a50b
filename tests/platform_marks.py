"""Skip marks for the tests of a Linux-only facility, which ``make test-portable``
(``SNAPSTORE_PLATFORM=portable``: snapstore.platform) masks as macOS or a BSD would lack it.

Each names what it needs and why the portable path has no such thing; every other test runs
under the mask as it is.
"""

from __future__ import annotations

import pytest

from snapstore.platform import linux, maps, tcp

#: A test of inotify itself (its limits, its queue overflow, no instance left).
needs_inotify = pytest.mark.skipif(
    not linux(), reason="tests inotify itself (limits, queue overflow, instances): the portable polling source has none"
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
