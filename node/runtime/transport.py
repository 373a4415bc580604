"""Transports of the node daemon: frames (node/wire.py) over UDP datagrams or TCP connections.

A transport moves opaque frames. Sending: `send(peer, frame)`. Receiving: every complete frame
goes to the `on_frame(data, conn_peer)` callback of the node, which decodes and validates it and
returns the frame's source name when it accepted the frame (None when it dropped it); input that
is not even a frame (a TCP stream that lost its framing) goes to `on_drop(reason, peer)`.

UDP: one datagram socket bound to the node's address, large socket buffers, one frame per
datagram. There is no connection, so nothing to repair: loss is UNICAST3's business.

TCP: one connection per peer pair, frames prefixed by their length (4 bytes, big endian).
Outgoing connections are made when there is something to send, with exponential backoff (and
jitter) while the peer is unreachable; frames wait in a bounded queue meanwhile. An accepted
connection is adopted for sending to the peer named by its first valid frame, so either end may
connect. When both ends connected at the same time, both keep the connection initiated by the
node with the smaller name (as JGroups' TCP connection map does) and the other is closed by its
initiator after its buffered frames are written; an outgoing connection that completes after the
peer's was adopted is closed unused, since frames may already travel on the adopted one. A lost
connection is forgotten; the next frame for that peer reconnects, and UNICAST3's retransmission
recovers what was in flight.

Closing is graceful, both while running and at stop: what is buffered is written, then FIN
(write_eof), and the connection is read until the peer closes its side. Frames the peer wrote
before it saw our FIN are still read (the node processes them, or counts them when it stops), and
no socket is closed with unread data, which would send RST and make the kernel discard what it had
not yet sent of our last frames. At stop the transport waits CLOSE_WAIT_S for the peers, then cuts.
Every connection a connect or an accept makes is used or closed: one made for a connect attempt
that was given up (a cancel or timeout that came as it completed) or while the transport closes
is cut at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import struct
import sys
from collections.abc import Callable
from typing import Any, cast

from .config import Address, ConfigError

log = logging.getLogger("node.transport")

# on_frame(frame, peer of the TCP connection or None) -> the frame's source when accepted, None when
# dropped; on_drop(reason, peer)
FrameHandler = Callable[[bytes, str | None], str | None]
DropHandler = Callable[[str, str | None], None]

SOCKET_BUFFER_BYTES = 16 * 1024 * 1024
TCP_HIGH_WATER_BYTES = 4 * 1024 * 1024  # above this a peer's connection counts as not writable
# Above these frames for a peer are dropped (and counted), unless the transport is `lossless`.
TCP_MAX_BUFFERED_BYTES = 64 * 1024 * 1024  # written to a connection the peer does not read
TCP_QUEUE_MAX_BYTES = 8 * 1024 * 1024  # frames waiting for a connection
TCP_MAX_FRAME_BYTES = 2 * 1024 * 1024  # a longer length prefix is garbage: the connection is closed
CONNECT_TIMEOUT_S = 2.0
# At stop: how long the peers get to read our last frames and close their side, polled this often.
CLOSE_WAIT_S = 0.2
CLOSE_POLL_S = 0.01
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 2.0
_LEN = struct.Struct("!I")
# Python's socket module does not name these Linux options (asm-generic/socket.h): they exceed
# net.core.rmem_max / wmem_max for a process with CAP_NET_ADMIN.
_LINUX = sys.platform.startswith("linux")
_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33 if _LINUX else None)
_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32 if _LINUX else None)


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _big_buffers(sock: socket.socket) -> tuple[int, int]:
    """Ask for large socket buffers: SO_*BUFFORCE when privileged, else what rmem_max allows."""
    for force, plain in ((_SO_RCVBUFFORCE, socket.SO_RCVBUF), (_SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        done = False
        if force is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER_BYTES)
                done = True
            except OSError:
                pass
        if not done:
            try:
                sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER_BYTES)
            except OSError:
                pass
    return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF), sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))


async def resolve_peers(peers: dict[str, Address]) -> dict[str, tuple[Any, ...]]:
    """name -> sockaddr, resolved once at start; an unresolvable host names its key."""
    loop = asyncio.get_running_loop()
    out = {}
    for name, addr in peers.items():
        try:
            infos = await loop.getaddrinfo(addr.host, addr.port, type=socket.SOCK_DGRAM)
        except OSError as exc:
            raise ConfigError(f"peers.{name}", f"cannot resolve {addr.host!r}: {exc}") from None
        out[name] = infos[0][4]
    return out


class TransportStats:
    __slots__ = (
        "frames_out",
        "bytes_out",
        "send_errors",
        "dropped_out",
        "connects",
        "connect_failures",
        "connections_lost",
        "stream_errors",
    )

    def __init__(self) -> None:
        self.frames_out = 0
        self.bytes_out = 0
        self.send_errors = 0
        self.dropped_out = 0
        self.connects = 0
        self.connect_failures = 0
        self.connections_lost = 0
        self.stream_errors = 0


# ---- UDP --------------------------------------------------------------------------------------


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, owner: UdpTransport):
        self.owner = owner

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.owner.on_frame(data, None)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable (a peer that is down) and the like: UNICAST3 retransmits.
        self.owner.stats.send_errors += 1

    def pause_writing(self) -> None:
        self.owner.paused = True

    def resume_writing(self) -> None:
        self.owner.paused = False


class UdpTransport:
    kind = "udp"

    def __init__(
        self, local: str, bind: Address, peers: dict[str, tuple[Any, ...]], on_frame: FrameHandler, on_drop: DropHandler
    ):
        self.local = local
        self.bind = bind
        self.peers = peers
        self.on_frame = on_frame
        self.on_drop = on_drop
        self.stats = TransportStats()
        self.paused = False
        self.address: Address | None = None
        self.buffers = (0, 0)
        self._transport: asyncio.DatagramTransport | None = None

    async def start(self) -> Address:
        loop = asyncio.get_running_loop()
        sock = socket.socket(_family(self.bind.host), socket.SOCK_DGRAM)
        try:
            self.buffers = _big_buffers(sock)
            sock.bind((self.bind.host, self.bind.port))
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ConfigError("bind", f"cannot bind UDP {self.bind}: {exc.strerror or exc}") from None
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _UdpProtocol(self), sock=sock)
        host, port = sock.getsockname()[:2]
        self.address = Address(host, port)
        return self.address

    def send(self, peer: str, frame: bytes) -> None:
        addr = self.peers.get(peer)
        transport = self._transport
        if addr is None or transport is None or transport.is_closing():
            self.stats.dropped_out += 1
            return
        self.stats.frames_out += 1
        self.stats.bytes_out += len(frame)
        transport.sendto(frame, addr)

    def writable(self, peer: str) -> bool:
        return not self.paused

    def connected(self) -> dict[str, bool]:
        return {}

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None


# ---- TCP --------------------------------------------------------------------------------------


class _TcpConn(asyncio.Protocol):
    def __init__(self, owner: TcpTransport, peer: str | None, outgoing: bool):
        self.owner = owner
        self.peer = peer
        self.outgoing = outgoing
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.paused = False
        self.closed = False  # nothing more is sent on it (it may still be read)
        self.aborted = False  # cut: nothing more is read either
        self.abandoned = False  # made for a connect attempt that was given up

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # a stream connection's transport
        self.transport = transport
        if self.abandoned or self.owner._closing:
            # Nobody will use it and close() has already looked for connections: cut it now.
            self.closed = self.aborted = True
            transport.abort()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        transport.set_write_buffer_limits(high=TCP_HIGH_WATER_BYTES)
        self.owner._all.add(self)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        size = len(buf)
        pos = 0
        on_frame = self.owner.on_frame
        while size - pos >= 4:
            (length,) = _LEN.unpack_from(buf, pos)
            if length == 0 or length > TCP_MAX_FRAME_BYTES:
                self.owner._bad_stream(self, f"frame length {length} out of range")
                return
            end = pos + 4 + length
            if end > size:
                break
            frame = bytes(buf[pos + 4 : end])
            pos = end
            src = on_frame(frame, self.peer)
            if src is not None and self.peer is None:
                self.owner._adopt(self, src)
            if self.aborted:
                return
        if pos:
            del buf[:pos]

    def eof_received(self) -> None:
        # The peer sends nothing more here and reads until we close: what we buffered goes out,
        # then asyncio closes (this returns None), and the next frame for the peer reconnects.
        self.closed = True
        self.owner._retire(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = self.aborted = True
        self.buf = bytearray()
        self.owner._lost(self)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def write(self, frame: bytes) -> None:
        assert self.transport is not None, "written before connection_made"
        self.transport.writelines((_LEN.pack(len(frame)), frame))

    def buffered(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    def close(self) -> None:
        """Send nothing more: FIN after what is buffered; go on reading until the peer closes."""
        transport = self.transport
        if self.closed or transport is None:
            return
        self.closed = True
        if transport.is_closing():
            return
        if transport.can_write_eof():
            transport.write_eof()
        else:
            transport.close()

    def abort(self) -> None:
        self.closed = self.aborted = True
        if self.transport is not None:
            self.transport.abort()

    def abandon(self) -> None:
        """Made for a connect attempt that was given up: cut it, made yet or not. (uvloop closes
        the socket of a connect cancelled after connection_made without calling connection_lost.)"""
        self.abandoned = True
        self.owner._all.discard(self)
        self.abort()


class TcpTransport:
    kind = "tcp"

    def __init__(
        self, local: str, bind: Address, peers: dict[str, tuple[Any, ...]], on_frame: FrameHandler, on_drop: DropHandler
    ):
        self.local = local
        self.bind = bind
        self.peers = peers
        self.on_frame = on_frame
        self.on_drop = on_drop
        self.stats = TransportStats()
        self.address: Address | None = None
        self.conns: dict[str, _TcpConn] = {}  # the connection used to send to each peer
        self._all: set[_TcpConn] = set()
        self._queued: dict[str, list[bytes]] = {}
        self._queued_bytes: dict[str, int] = {}
        self._connecting: dict[str, asyncio.Task[None]] = {}
        self._server: asyncio.Server | None = None
        self._closing = False
        self._rng = random.Random()
        # Set while the protocol resends nothing (NAKACK2 without retransmission, the NAKACK2 design): a
        # frame for a peer is then buffered however much waits, never dropped. The workload
        # still blocks on writable(), so only control traffic and catch-ups grow the buffers.
        self.lossless = False

    async def start(self) -> Address:
        loop = asyncio.get_running_loop()
        sock = socket.socket(_family(self.bind.host), socket.SOCK_STREAM)
        try:
            # SO_REUSEADDR lets a restarted node take its port back from TIME_WAIT; it does not
            # allow two listeners on one port.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.bind.host, self.bind.port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise ConfigError("bind", f"cannot bind TCP {self.bind}: {exc.strerror or exc}") from None
        self._server = await loop.create_server(lambda: _TcpConn(self, None, False), sock=sock)
        host, port = sock.getsockname()[:2]
        self.address = Address(host, port)
        return self.address

    # ---- sending ------------------------------------------------------------------------------

    def send(self, peer: str, frame: bytes) -> None:
        stats = self.stats
        conn = self.conns.get(peer)
        if conn is not None and not conn.closed:
            if conn.buffered() > TCP_MAX_BUFFERED_BYTES and not self.lossless:
                stats.dropped_out += 1  # the peer does not read: UNICAST3 will resend later
                return
            stats.frames_out += 1
            stats.bytes_out += len(frame)
            conn.write(frame)
            return
        if peer not in self.peers or self._closing:
            stats.dropped_out += 1
            return
        queued = self._queued_bytes.get(peer, 0)
        if queued + len(frame) > TCP_QUEUE_MAX_BYTES and not self.lossless:
            stats.dropped_out += 1
        else:
            self._queued.setdefault(peer, []).append(frame)
            self._queued_bytes[peer] = queued + len(frame)
        if peer not in self._connecting:
            self._connecting[peer] = asyncio.get_running_loop().create_task(self._connect(peer))

    def writable(self, peer: str) -> bool:
        conn = self.conns.get(peer)
        if conn is not None and not conn.closed:
            return not conn.paused
        return self._queued_bytes.get(peer, 0) < TCP_QUEUE_MAX_BYTES // 2

    def connected(self) -> dict[str, bool]:
        return {peer: (peer in self.conns and not self.conns[peer].closed) for peer in self.peers}

    async def _dial(self, peer: str, host: str, port: int) -> _TcpConn:
        """One connect attempt. A connection it made but does not return (a timeout or a cancel
        that came as it completed) is cut here, so that every connection made is used or closed."""
        loop = asyncio.get_running_loop()
        made: list[_TcpConn] = []

        def make() -> _TcpConn:
            conn = _TcpConn(self, peer, True)
            made.append(conn)
            return conn

        try:
            _, conn = await asyncio.wait_for(loop.create_connection(make, host, port), timeout=CONNECT_TIMEOUT_S)
        except BaseException:
            for conn in made:
                conn.abandon()
            raise
        return conn

    async def _connect(self, peer: str) -> None:
        delay = BACKOFF_MIN_S
        host, port = self.peers[peer][:2]
        try:
            while not self._closing:
                current = self.conns.get(peer)
                if current is not None and not current.closed:
                    self._flush_queue(peer)  # an accepted connection was adopted meanwhile
                    return
                try:
                    conn = await self._dial(peer, host, port)
                except (TimeoutError, OSError) as exc:
                    self.stats.connect_failures += 1
                    log.debug(
                        "%s: connect to %s (%s:%s) failed: %s; retry in %.2fs", self.local, peer, host, port, exc, delay
                    )
                    await asyncio.sleep(delay * (0.5 + self._rng.random() / 2))
                    delay = min(delay * 2, BACKOFF_MAX_S)
                    continue
                current = self.conns.get(peer)
                if self._closing or current is not None and not current.closed:
                    # The transport closes, or the peer's connection was adopted while this one was
                    # made (the cancel came as the connect completed, which Python 3.11's wait_for
                    # swallows). Frames may already be on the adopted one: switching would make the
                    # peer adopt this one too and close its own. This one carries nothing: let it go.
                    conn.close()
                else:
                    self.stats.connects += 1
                    self._register(peer, conn)
                self._flush_queue(peer)
                return
        finally:
            if self._connecting.get(peer) is asyncio.current_task():
                del self._connecting[peer]

    def _flush_queue(self, peer: str) -> None:
        frames = self._queued.pop(peer, [])
        self._queued_bytes.pop(peer, None)
        for frame in frames:
            self.send(peer, frame)

    def _register(self, peer: str, conn: _TcpConn) -> None:
        current = self.conns.get(peer)
        if current is None or current.closed or current is conn:
            self.conns[peer] = conn
            return
        # Two live connections for one pair: keep the one the smaller name initiated.
        if conn.outgoing == current.outgoing:
            keep, other = conn, current  # the newer one (the peer reconnected)
        else:
            we_initiate = self.local < peer
            keep, other = (conn, current) if conn.outgoing == we_initiate else (current, conn)
        self.conns[peer] = keep
        if other.outgoing:
            other.close()

    # ---- receiving ----------------------------------------------------------------------------

    def _adopt(self, conn: _TcpConn, peer: str) -> None:
        conn.peer = peer
        self._register(peer, conn)
        if self.conns.get(peer) is conn:
            task = self._connecting.pop(peer, None)
            if task is not None:
                task.cancel()
            self._flush_queue(peer)

    def _bad_stream(self, conn: _TcpConn, reason: str) -> None:
        # The byte stream lost its framing: nothing after this point can be trusted.
        self.stats.stream_errors += 1
        self.on_drop(reason, conn.peer)
        conn.abort()

    def _retire(self, conn: _TcpConn) -> None:
        """Send no more to the peer on `conn` (the next frame reconnects)."""
        if conn.peer is not None and self.conns.get(conn.peer) is conn:
            del self.conns[conn.peer]
            self.stats.connections_lost += 1

    def _lost(self, conn: _TcpConn) -> None:
        self._all.discard(conn)
        self._retire(conn)

    def drop_connections(self, peer: str | None = None) -> int:
        """Abort connections (to one peer, or all): a fault for tests; returns how many."""
        victims = [c for c in list(self._all) if peer is None or c.peer == peer]
        for conn in victims:
            conn.abort()
        return len(victims)

    async def close(self) -> None:
        """Stop: every connection closed gracefully (our last frames, FIN, read until the peer
        closes) for at most CLOSE_WAIT_S, then cut. A connection made from now on is cut at once."""
        loop = asyncio.get_running_loop()
        self._closing = True
        for task in list(self._connecting.values()):
            task.cancel()
        server = self._server
        if server is not None:
            # Stop accepting, but close the server only after the accepts already under way made
            # their transports (a loop iteration or two): on Python 3.11's event loop, a transport
            # made for a server already closed fails (Server._attach asserts) and leaks its socket.
            for sock in server.sockets:
                loop.remove_reader(sock.fileno())
        for conn in list(self._all):
            conn.close()
        await asyncio.sleep(0)
        for _ in range(round(CLOSE_WAIT_S / CLOSE_POLL_S)):
            if not self._all:
                break
            await asyncio.sleep(CLOSE_POLL_S)
        for conn in list(self._all):
            conn.abort()
        if server is not None:
            await asyncio.sleep(0)
            server.close()
            try:
                await asyncio.wait_for(server.wait_closed(), 1.0)
            except TimeoutError:
                pass
            self._server = None
