"""The platform layer: every call that only Linux offers, each beside its portable stand-in.

Nothing else in the package names a Linux-only facility (inotify, ``/proc``, ``syncfs``,
``SO_PEERCRED``, netlink's sock_diag, ``O_PATH``): it asks a module here, which answers with
the Linux call on Linux and with a portable one (or a documented weaker mode) elsewhere
(tests/test_platform_layer.py keeps it so).  One concept per module:

* :mod:`.events`, :mod:`.inotify`, :mod:`.polling`: the watcher's source of change events;
* :mod:`.maps`: which files processes map shared and writable (the watcher's blind spot);
* :mod:`.sync`: flushing a whole file system (``syncfs``);
* :mod:`.unix`: a Unix socket's peer uid and long socket paths;
* :mod:`.tcp`: which local user owns the other end of a loopback TCP connection;
* :mod:`.processes`: other users' processes, zombies;
* :mod:`.files`: open flags.

``SNAPSTORE_PLATFORM=portable`` masks the Linux-only calls on Linux, so the portable paths run
here as they do on macOS or a BSD (``make test-portable``; docs/platforms.md).
"""

from __future__ import annotations

import os
import sys

#: The switch that masks the Linux-only facilities (``portable``), read at each call: tests
#: and ``make test-portable`` set it in the environment of the processes they start.
SWITCH = "SNAPSTORE_PLATFORM"


def masked() -> bool:
    """Whether the Linux-only facilities are masked (``SNAPSTORE_PLATFORM=portable``)."""
    return os.environ.get(SWITCH, "") == "portable"


def linux() -> bool:
    """Whether the Linux-only facilities may be used: on Linux, unless masked."""
    return sys.platform.startswith("linux") and not masked()


def name() -> str:
    """What ``serve --status`` and ``doctor`` call this platform."""
    if linux():
        return "linux"
    return f"portable ({sys.platform}{', Linux facilities masked' if masked() else ''})"
