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
import socket
import struct
import sys
from typing import Any

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
#: What :func:`socket_uid` says of a socket that no process holds.
NOBODY = -1
Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def random_loopback() -> str:
    """A random loopback address ``127.a.b.c``, away from the well-known ``127.0.x.x`` ones."""
    # 127.0.0.1, 127.0.1.1 (Debian's host name), 127.0.0.53 (systemd-resolved) are all 127.0.x.x.
    return f"127.{1 + secrets.randbelow(254)}.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}"


def _address(field: str) -> Address | None:
    """An address of ``/proc/net/tcp*`` (``HEX:PORT``, each 32-bit word in host order)."""
    hexaddr, _, hexport = field.partition(":")
    try:
        raw = bytes.fromhex(hexaddr)
        port = int(hexport, 16)
    except ValueError:
        return None
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    try:
        return _plain(ipaddress.ip_address(raw)), port
    except ValueError:
        return None


def _plain(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """IPv4-mapped IPv6 addresses as IPv4 (a dual-stack socket sees its IPv4 peers that way)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _parse(pair: Any) -> Address | None:
    """``(host, port)`` as ASGI servers give ``client`` and ``server``, or None."""
    try:
        host, port = pair
        return _plain(ipaddress.ip_address(str(host).strip("[]").split("%")[0])), int(port)
    except (TypeError, ValueError):
        return None


def socket_uid(local: Address, remote: Address) -> int | None:
    """The uid owning the TCP socket ``local`` -> ``remote`` of this network namespace.

    None when no such socket is listed (the peer is another machine); :data:`NOBODY` when it is
    listed but no process holds it any more (a time-wait or orphaned socket is listed with uid
    0 and inode 0: it must not pass for root's).
    """
    found = _ask_kernel(local, remote)
    if found is not None:
        return found
    # Not found by the exact query (or no sock_diag here): read the tables.  The kernel makes
    # them in pieces, not as one snapshot, and a socket closed meanwhile can make a read skip a
    # line; a live peer is listed for as long as its connection is open, so another look
    # settles a miss.
    for _ in range(3):
        found = _lookup(local, remote)
        if found is not None:
            return found
    return None


#: sock_diag (netlink): one exact query for a socket by its four addresses.
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, NLMSG_ERROR = 4, 20, 1, 2
_REQUEST = struct.Struct("=IHHII BBBxI HH16s16sI8s")  # nlmsghdr, inet_diag_req_v2
_REPLY = struct.Struct("=IHHII BBBB HH16s16sI8s IIIII")  # nlmsghdr, inet_diag_msg


def _ask_kernel(local: Address, remote: Address) -> int | None:
    """:func:`socket_uid` through ``NETLINK_SOCK_DIAG`` (microseconds), or None when it cannot say."""
    v6 = isinstance(local[0], ipaddress.IPv6Address)
    if v6 != isinstance(remote[0], ipaddress.IPv6Address):
        return None  # a mix of families: leave it to the tables
    message = _REQUEST.pack(
        _REQUEST.size, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0,
        socket.AF_INET6 if v6 else socket.AF_INET, socket.IPPROTO_TCP, 0, 0xFFFFFFFF,  # any state
        socket.htons(local[1]), socket.htons(remote[1]),
        local[0].packed.ljust(16, b"\0"), remote[0].packed.ljust(16, b"\0"), 0, b"\xff" * 8,
    )
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(1)
            nl.sendto(message, (0, 0))
            reply = nl.recv(8192)
    except (OSError, AttributeError):  # no netlink (not Linux), no sock_diag, a timeout
        return None
    if len(reply) < _REPLY.size or struct.unpack_from("=H", reply, 4)[0] == NLMSG_ERROR:
        return None  # not found (or no handler for TCP): the tables decide
    fields = _REPLY.unpack_from(reply)
    sport, dport, src, dst, uid, inode = fields[9], fields[10], fields[11], fields[12], fields[-2], fields[-1]
    size = 16 if v6 else 4
    if (socket.ntohs(sport), socket.ntohs(dport)) != (local[1], remote[1]):
        return None  # not the socket asked for
    if (src[:size], dst[:size]) != (local[0].packed, remote[0].packed):
        return None
    return NOBODY if inode == 0 else int(uid)


def _lookup(local: Address, remote: Address) -> int | None:
    suffix = f":{local[1]:04X}"
    for table in TABLES:
        try:
            with open(table, encoding="ascii", errors="replace") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or not fields[1].endswith(suffix):
                continue
            if _address(fields[1]) == local and _address(fields[2]) == remote:
                return NOBODY if fields[9] == "0" else int(fields[7])
    return None


def tables_readable() -> bool:
    """Whether this system lists its sockets with their owners (Linux's ``/proc/net/tcp``)."""
    return os.access(TABLES[0], os.R_OK)


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
