"""Who is at the other end of a connection, and where the UI listens.

Loopback is shared by every local user: any of them can connect to any 127.x.y.z port, bind
another port of the same address, and read ``/proc/net/tcp``.  Two things follow:

* **A private address per launch.**  The UI listens on a random ``127.x.y.z`` (not
  ``127.0.0.1``), so the browser keeps its cookie under a host name that no other local server
  uses: a server of another user on ``127.0.0.1``/``localhost`` never receives it.  (The address
  is not a secret: ``/proc/net/tcp`` lists it.)
* **The peer's uid.**  The kernel lists each TCP socket of the network namespace with the uid
  that created it (``/proc/net/tcp``, ``/proc/net/tcp6``).  A connection to a loopback address
  comes from a socket of this namespace, so its owner is known; the UI answers only its own
  user and root (and, when it runs as root through ``sudo``, the user who ran ``sudo``).  A
  cookie or link that reached another user is useless from that user's processes.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from typing import Any

from snapstore.platform import tcp
from snapstore.platform.tcp import NOBODY, Address, plain, socket_uid

__all__ = ["NOBODY", "PeerCheck", "random_loopback", "socket_uid", "tables_readable", "trusted_uids"]


def random_loopback() -> str:
    """A random loopback address ``127.a.b.c``, away from the well-known ``127.0.x.x`` ones."""
    # 127.0.0.1, 127.0.1.1 (Debian's host name), 127.0.0.53 (systemd-resolved) are all 127.0.x.x.
    return f"127.{1 + secrets.randbelow(254)}.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}"


def _parse(pair: Any) -> Address | None:
    """``(host, port)`` as ASGI servers give ``client`` and ``server``, or None."""
    try:
        host, port = pair
        return plain(ipaddress.ip_address(str(host).strip("[]").split("%")[0])), int(port)
    except (TypeError, ValueError):
        return None


def tables_readable() -> bool:
    """Whether this system says who owns each local TCP connection (:mod:`snapstore.platform.tcp`)."""
    return tcp.tells_owners()


def trusted_uids() -> frozenset[int]:
    """The users the UI serves: its own, and root (who can read every user's files and
    browser profile anyway); as root, also the user who ran ``sudo``."""
    uid = os.geteuid()
    uids = {uid, 0}
    sudo = os.environ.get("SUDO_UID", "")
    if uid == 0 and sudo.isdigit():
        uids.add(int(sudo))
    return frozenset(uids)


class PeerCheck:
    """Admits a connection when the local socket at its other end belongs to a trusted uid.

    A peer with no local socket is a remote machine: admitted only when ``remote_ok`` (the UI
    was told to listen on a non-loopback address, with a warning), never on loopback.
    """

    def __init__(self, uids: frozenset[int], *, remote_ok: bool):
        self.uids = uids
        self.remote_ok = remote_ok

    def __call__(self, client: Any, server: Any) -> bool:
        peer, served = _parse(client), _parse(server)
        if peer is None or served is None:
            return False
        uid = socket_uid(peer, served)
        if uid is None:  # no local socket: another machine
            return self.remote_ok and not peer[0].is_loopback
        return uid in self.uids
