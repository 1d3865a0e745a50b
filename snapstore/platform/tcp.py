"""Which local user owns the other end of a loopback TCP connection.

Linux lists each TCP socket of the network namespace with the uid that created it: netlink's
``sock_diag`` answers one exact query in microseconds, ``/proc/net/tcp`` and ``/proc/net/tcp6``
list them all.  Other systems have no such list that a process may read (macOS's would need
``lsof`` or private interfaces): there :func:`tells_owners` is False and the callers use their
documented weaker mode (the UI serves whoever holds its cookie; http hooks are refused).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import sys
from typing import Any

from snapstore import platform

TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
#: What :func:`socket_uid` says of a socket that no process holds.
NOBODY = -1
Address = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


def tells_owners() -> bool:
    """Whether this system lists its TCP sockets with their owners (Linux's ``/proc/net/tcp``)."""
    import os

    return platform.linux() and os.access(TABLES[0], os.R_OK)


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
        return plain(ipaddress.ip_address(raw)), port
    except ValueError:
        return None


def plain(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """IPv4-mapped IPv6 addresses as IPv4 (a dual-stack socket sees its IPv4 peers that way)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def socket_uid(local: Address, remote: Address) -> int | None:
    """The uid owning the TCP socket ``local`` -> ``remote`` of this network namespace.

    None when no such socket is listed (the peer is another machine); :data:`NOBODY` when it is
    listed but no process holds it any more (a time-wait or orphaned socket is listed with uid
    0 and inode 0: it must not pass for root's).
    """
    if not platform.linux():
        return None
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


def listener_uid(port: int) -> int | None:
    """The uid of the socket listening on 127.0.0.1 (or any address) at ``port``, if any is
    known (None also where :func:`tells_owners` is False)."""
    if not platform.linux():
        return None
    try:
        with open(TABLES[0], encoding="ascii") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        fields = row.split()
        if len(fields) > 7 and fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
            return int(fields[7])
    return None


def connection_uid(conn: Any) -> int | None:
    """The uid owning the other end of the connected loopback TCP socket ``conn`` (IPv4), or
    None when unknown."""
    if not platform.linux():
        return None
    try:
        peer, here = conn.getpeername()[:2], conn.getsockname()[:2]
        with open(TABLES[0], encoding="ascii") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return None

    def address(host: str, port: int) -> str:
        return f"{socket.inet_aton(host)[::-1].hex().upper()}:{port:04X}"

    theirs, ours = address(*peer), address(*here)
    for row in rows:  # the peer's socket: its local address is our peer, its remote is us
        fields = row.split()
        if len(fields) > 7 and fields[1] == theirs and fields[2] == ours:
            return int(fields[7])
    return None
