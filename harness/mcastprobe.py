"""Does IP multicast work where splitbrain runs? (`splitbrain doctor`, one line.)

One UDP datagram to an administratively scoped group (239.255.0.0/16, TTL 1, looped back to this
host), received by a socket that joined the group: first on the interface the routing table picks
for the group, then on loopback with IP_MULTICAST_IF 127.0.0.1. Linux sends a multicast only where
a route for it exists: a host (or a network namespace) with nothing but `lo` and no
`224.0.0.0/4` route cannot even join the group on the default interface ("No such device"), while
an explicit IP_MULTICAST_IF on 127.0.0.1 still loops back on the same host (it never reaches
another host or namespace).

The IP multicast transport (scenario key `ip_multicast`, node key `mcast_group`) needs the
loopback probe on the local backend (every node joins on its own 127.x address, and the datagrams
loop back on this host); `check_backend` refuses such a scenario where it fails. In containers
each node proves its own path when it starts (node/runtime/ipmcast.py).
"""

from __future__ import annotations

import select
import socket
import struct

GROUP = "239.255.42.99"
WAIT_S = 0.5


def _loop_once(iface: str | None) -> tuple[bool, str]:
    """Send one datagram to GROUP and wait WAIT_S for it on a member socket; (got it, why not)."""
    recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    send = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        recv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        recv.bind(("", 0))
        port = recv.getsockname()[1]
        mreq = struct.pack("4s4s", socket.inet_aton(GROUP), socket.inet_aton(iface or "0.0.0.0"))
        recv.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
        send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        if iface:
            send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(iface))
        send.sendto(b"splitbrain doctor", (GROUP, port))
        ready, _, _ = select.select([recv], [], [], WAIT_S)
        return (True, "") if ready else (False, f"sent, nothing received within {WAIT_S:g} s")
    except OSError as exc:
        return False, exc.strerror or str(exc)
    finally:
        recv.close()
        send.close()


def loopback_status() -> tuple[bool, str]:
    """Whether the local backend can run `ip_multicast: true` (a group joined on 127.x)."""
    lo, why = _loop_once("127.0.0.1")
    return lo, "a datagram to the group looped back on 127.0.0.1" if lo else why


def ip_multicast_status() -> tuple[bool, str]:
    """(works on the routed interface, one line on both probes and what the transport can do)."""
    routed, why = _loop_once(None)
    lo, lo_why = loopback_status()
    lo_text = "on loopback (IP_MULTICAST_IF 127.0.0.1, this host only): " + ("yes" if lo else f"no, {lo_why}")
    transport = "; ip_multicast transport on the local backend: " + (
        "can run" if lo else "cannot run (scenarios with ip_multicast: true are refused)"
    )
    if routed:
        return True, f"{GROUP} looped back through the multicast route; {lo_text}{transport}"
    return False, (
        f"{GROUP} on the default route: {why} (no multicast route? `ip route add 224.0.0.0/4 dev <if>`); "
        f"{lo_text}{transport}"
    )
