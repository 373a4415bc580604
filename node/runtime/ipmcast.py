"""IP multicast for the UDP transport: one datagram per (bundled) multicast, as JGroups' UDP.

Theory of operation
-------------------
A multicast layer (NAKACK2, MCAST) stays sans-I/O and unchanged: it sends one copy of a
multicast per member, all copies sharing one headers dict and one payload, and the in-process
fault layer below it still sees (and may drop, delay or duplicate) every copy per destination.
What reaches the runtime is a run of copies that differ only in their destination. `take()` finds
such runs (two or more distinct known peers), queues one message for "*" per run, in segments of
consecutive runs to the same set of destinations (so that no receiver sees them out of order),
and returns everything else for the unicast bundler. At the end of the loop iteration `flush()`
packs each segment into as few frames as the bundle size allows (like the bundler) and sends each
frame once to the group, behind an envelope naming the destinations:

    datagram := "SBM" ndest:u8 dest:str8*ndest frame      (frame: node/wire.py, dest "*")

Receiving: one socket bound to the group's address and port (SO_REUSEADDR: on loopback every
node of a cluster shares the port) that joined the group on the node's own address
(IP_ADD_MEMBERSHIP; loopback for the local backend, the container's interface for docker). A
datagram from the node's own address is its own, looped back, and is dropped; one from an address
that is no peer's (another cluster's group, a stranger) is dropped and counted; one whose envelope
does not name this node (a copy the sender's fault layer dropped, a member outside the sender's
view) is ignored. The rest is readdressed to this node and handed to the node's frame handler, so
the stack sees exactly what N unicasts would have brought, and a receiver's own fault layer drops
per receiver as before. The destination list is stricter than JGroups (whose receivers discard
multicasts from non-members themselves): it keeps a run on IP multicast equal to a run on N
unicasts, check for check.

Start-up proves the path instead of assuming it: a probe datagram must come back to the node's
own socket within PROBE_WAIT_S, or the node stops with a configuration error naming mcast_group.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from collections.abc import Callable
from typing import Any

from ..message import MCAST_DEST, Message
from ..wire import WireError, encode_frame, readdressed, split_into_frames
from .config import Address, ConfigError
from .transport import DropHandler, FrameHandler, TransportStats, _big_buffers

log = logging.getLogger("node.ipmcast")

MAGIC = b"SBM"
PROBE = b"SBP"
TTL = 1  # the group never leaves the node's link
PROBE_WAIT_S = 1.0


def envelope(dests: tuple[str, ...]) -> bytes:
    """The header naming the receivers of a multicast datagram."""
    parts = [MAGIC, bytes((len(dests),))]
    for dest in dests:
        raw = dest.encode()
        parts.append(bytes((len(raw),)) + raw)
    return b"".join(parts)


def addressed_to(data: bytes, name: bytes) -> tuple[bool, int]:
    """(whether the envelope names `name`, where the frame starts); WireError when malformed."""
    size = len(data)
    if size < 4 or data[:3] != MAGIC:
        raise WireError("not a multicast envelope")
    pos = 4
    found = False
    for _ in range(data[3]):
        if pos >= size:
            raise WireError("truncated multicast envelope")
        end = pos + 1 + data[pos]
        if end > size:
            raise WireError("truncated multicast envelope")
        if data[pos + 1 : end] == name:
            found = True
        pos = end
    return found, pos


class McastStats:
    __slots__ = ("multicasts", "copies", "datagrams_out", "bytes_out", "datagrams_in", "own", "foreign", "not_for_us")

    def __init__(self) -> None:
        self.multicasts = 0  # runs of copies sent as one multicast
        self.copies = 0  # the unicast copies they replaced
        self.datagrams_out = 0
        self.bytes_out = 0
        self.datagrams_in = 0
        self.own = 0  # our own datagrams, looped back
        self.foreign = 0  # from an address that is no peer's
        self.not_for_us = 0  # the envelope does not name this node

    def to_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.__slots__}


class _Receiver(asyncio.DatagramProtocol):
    def __init__(self, owner: IpMulticast):
        self.owner = owner

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.owner.received(data, addr[0])

    def error_received(self, exc: Exception) -> None:
        self.owner.unicast_stats.send_errors += 1


class _Sender(asyncio.DatagramProtocol):
    def __init__(self, owner: IpMulticast):
        self.owner = owner

    def error_received(self, exc: Exception) -> None:
        self.owner.unicast_stats.send_errors += 1


class IpMulticast:
    """The IP multicast side of a node's UDP transport (the unicast socket stays as it is)."""

    def __init__(
        self,
        local: str,
        bind: Address,
        group: Address,
        peers: dict[str, tuple[Any, ...]],
        on_frame: FrameHandler,
        on_drop: DropHandler,
        unicast_stats: TransportStats,
        max_bytes: int,
        bundling: bool = True,
        on_error: Callable[[str, Exception], None] | None = None,
    ):
        self.local = local
        self._name = local.encode()
        self.bind = bind
        self.group = group
        self.peer_ips = {addr[0] for addr in peers.values()}
        self.peers = frozenset(peers)
        self.on_frame = on_frame
        self.on_drop = on_drop
        # Multicast datagrams count as frames sent in /metrics, like the unicast ones.
        self.unicast_stats = unicast_stats
        self.max_bytes = max_bytes
        self.bundling = bundling
        self.on_error = on_error
        self.stats = McastStats()
        self.own_ip = ""
        self._queues: list[tuple[tuple[str, ...], list[Message]]] = []
        self._envelopes: dict[tuple[str, ...], bytes] = {}
        self._scheduled = False
        self._probe: asyncio.Future[None] | None = None
        self._recv: asyncio.DatagramTransport | None = None
        self._send: asyncio.DatagramTransport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Join the group on the node's address and prove the path with a probe; ConfigError
        (key mcast_group) when this host or network namespace cannot do it."""
        loop = self._loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(self.bind.host, None, family=socket.AF_INET, type=socket.SOCK_DGRAM)
        except OSError as exc:
            raise ConfigError("bind", f"cannot resolve {self.bind.host!r}: {exc}") from None
        self.own_ip = str(infos[0][4][0])
        if self.own_ip == "0.0.0.0":
            raise ConfigError("mcast_group", "IP multicast needs bind on the node's own address, not 0.0.0.0")
        iface = socket.inet_aton(self.own_ip)
        recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        send = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            recv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            _big_buffers(recv)  # a burst of multicasts from every member at once
            recv.bind((self.group.host, self.group.port))
            mreq = struct.pack("4s4s", socket.inet_aton(self.group.host), iface)
            recv.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
            recv.setblocking(False)
            _big_buffers(send)
            send.bind((self.own_ip, 0))  # the source address receivers and iptables rules see
            send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, iface)
            send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, TTL)
            # Other nodes on this host (the local backend) get the datagram only by loopback.
            send.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            send.setblocking(False)
        except OSError as exc:
            recv.close()
            send.close()
            raise ConfigError(
                "mcast_group", f"cannot join {self.group} on {self.own_ip}: {exc.strerror or exc} (splitbrain doctor)"
            ) from None
        self._recv, _ = await loop.create_datagram_endpoint(lambda: _Receiver(self), sock=recv)
        self._send, _ = await loop.create_datagram_endpoint(lambda: _Sender(self), sock=send)
        self._probe = loop.create_future()
        self._send.sendto(PROBE, (self.group.host, self.group.port))
        try:
            await asyncio.wait_for(asyncio.shield(self._probe), PROBE_WAIT_S)
        except TimeoutError:
            await self.close()
            raise ConfigError(
                "mcast_group",
                f"joined {self.group} on {self.own_ip}, but a datagram sent to it did not come back within "
                f"{PROBE_WAIT_S:g} s: IP multicast does not work here (splitbrain doctor)",
            ) from None
        finally:
            self._probe = None

    async def close(self) -> None:
        if self._send is not None:
            st = self.stats
            log.info(
                "%s: ip multicast %s: %d multicasts (%d copies) sent as %d datagrams; received %d "
                "(own %d, not for us %d, foreign %d)",
                self.local,
                self.group,
                st.multicasts,
                st.copies,
                st.datagrams_out,
                st.datagrams_in,
                st.own,
                st.not_for_us,
                st.foreign,
            )
        for transport in (self._send, self._recv):
            if transport is not None:
                transport.close()
        self._send = self._recv = None

    # ---- sending ------------------------------------------------------------------------------

    def take(self, msgs: list[Message]) -> list[Message]:
        """Queue every run of copies of one multicast as one message; return the rest."""
        n = len(msgs)
        if n < 2:
            return msgs
        rest: list[Message] = []
        peers = self.peers
        i = 0
        while i < n:
            first = msgs[i]
            headers, payload = first.headers, first.payload
            j = i + 1
            while j < n and msgs[j].headers is headers and msgs[j].payload is payload:
                j += 1
            if j - i >= 2:
                dests = tuple(sorted(m.dest for m in msgs[i:j]))
                # A duplicated copy (the fault layer's DUPL) or an unknown peer stays unicast.
                if len(set(dests)) == j - i and peers.issuperset(dests):
                    queues = self._queues
                    if not queues or queues[-1][0] != dests:
                        queues.append((dests, []))
                    queues[-1][1].append(Message(first.src, MCAST_DEST, payload, headers))
                    self.stats.multicasts += 1
                    self.stats.copies += j - i
                    i = j
                    continue
            rest.extend(msgs[i:j])
            i = j
        if self._queues and not self._scheduled:
            self._scheduled = True
            assert self._loop is not None, "take() before start()"
            self._loop.call_soon(self.flush)
        return rest

    def flush(self) -> None:
        self._scheduled = False
        if not self._queues:
            return
        queues, self._queues = self._queues, []
        transport = self._send
        if transport is None or transport.is_closing():
            self.unicast_stats.dropped_out += sum(len(q) for _, q in queues)
            return
        addr = (self.group.host, self.group.port)
        stats, ustats = self.stats, self.unicast_stats
        for dests, msgs in queues:
            head = self._envelopes.get(dests)
            if head is None:
                head = self._envelopes[dests] = envelope(dests)
            for frame in self._frames(msgs, len(head)):
                datagram = head + frame
                stats.datagrams_out += 1
                stats.bytes_out += len(datagram)
                ustats.frames_out += 1
                ustats.bytes_out += len(datagram)
                transport.sendto(datagram, addr)

    def _frames(self, msgs: list[Message], head: int) -> list[bytes]:
        try:
            if self.bundling:
                return split_into_frames(self.local, msgs, self.max_bytes - head)
            return [encode_frame(self.local, [m]) for m in msgs]
        except (ValueError, OverflowError, struct.error) as exc:
            # One message that cannot be encoded must not take the others down with it.
            frames = []
            for m in msgs:
                try:
                    frames.append(encode_frame(self.local, [m]))
                except (ValueError, OverflowError, struct.error) as one:
                    if self.on_error is None:
                        raise exc from None
                    self.on_error(MCAST_DEST, one)
            return frames

    # ---- receiving ----------------------------------------------------------------------------

    def received(self, data: bytes, source: str) -> None:
        stats = self.stats
        stats.datagrams_in += 1
        if source == self.own_ip:
            stats.own += 1
            if self._probe is not None and data == PROBE and not self._probe.done():
                self._probe.set_result(None)
            return
        if source not in self.peer_ips:
            stats.foreign += 1
            return
        if data == PROBE:
            return  # a peer starting up
        try:
            mine, at = addressed_to(data, self._name)
            if not mine:
                stats.not_for_us += 1
                return
            frame = readdressed(data[at:], self.local)
        except WireError as exc:
            self.on_drop(f"malformed multicast datagram: {exc}", None)
            return
        self.on_frame(frame, None)

    def snapshot(self) -> dict[str, Any]:
        return {"group": str(self.group), "interface": self.own_ip, **self.stats.to_dict()}
