"""Closing TCP connections loses no frame the peer believes delivered and leaks no socket
(the NAKACK2 design: without retransmission nothing below NAKACK2 may lose a message).

A connection is closed gracefully: what is buffered is written, then FIN, and it is read until the
peer closes its side, so the peer's frames in flight are still read and, since a socket closed
with unread data sends RST (which discards what the kernel had not yet sent), our own last frames
still arrive. Every connection a connect or an accept makes is used or closed, also when a
cancellation or the transport's close lands in the middle (Python 3.11's wait_for, uvloop)."""

from __future__ import annotations

import asyncio
import os
import select
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from splitbrain.node.runtime.testing import wait_until
from splitbrain.node.runtime.transport import Address, TcpTransport

HOST = "127.0.0.1"
_LEN = struct.Struct("!I")


def framed(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


def unframed(data: bytes) -> list[bytes]:
    frames, pos = [], 0
    while len(data) - pos >= 4:
        (length,) = _LEN.unpack_from(data, pos)
        if len(data) - pos - 4 < length:
            break
        frames.append(data[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return frames


def _transport(name: str, peers: dict[str, tuple[Any, ...]], received: list[bytes], peer: str = "A") -> TcpTransport:
    def on_frame(frame: bytes, _conn_peer: str | None) -> str | None:
        received.append(frame)
        return peer

    return TcpTransport(name, Address(HOST, 0), peers, on_frame, lambda reason, p: None)


def _read_to_the_end(sock: socket.socket, start: threading.Event, into: list[Any]) -> None:
    """A peer that reads nothing until `start`, then everything up to EOF or an error, then closes."""
    start.wait(30)
    sock.settimeout(30)
    chunks = []
    try:
        while chunk := sock.recv(1 << 20):
            chunks.append(chunk)
    except OSError as exc:
        into.append(exc)
    finally:
        sock.close()
    into.append(b"".join(chunks))


@pytest.mark.asyncio
async def test_our_last_frames_arrive_although_the_peer_sent_more_as_we_stopped():
    """B stops while its last frames to A (up to 500) are still in its kernel (A reads slowly) and a
    frame of A's has arrived that B has not read: B's FIN follows its frames and B reads A's frame,
    so A gets them all. (Closed at once, the socket would send RST, and A would get a few of them.)"""
    received: list[bytes] = []
    b = _transport("B", {"A": (HOST, 9)}, received)
    port = (await b.start()).port
    a = socket.socket()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # A's window fills at once
    a.connect((HOST, port))
    got: list[Any] = []
    start_reading = threading.Event()
    reader = threading.Thread(target=_read_to_the_end, args=(a, start_reading, got), daemon=True)
    try:
        a.sendall(framed(b"A hello"))
        await wait_until(lambda: b.connected()["A"], 10, what="B adopted A's connection")
        conn = b.conns["A"]
        sock = conn.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        # As many as B's kernel surely holds (net.core.wmem_max caps the buffer), at most 500.
        count = min(500, sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) // 4 // 1011)
        frames = [b"B%05d " % i + b"x" * 1000 for i in range(count)]
        for frame in frames:
            b.send("A", frame)
        await wait_until(lambda: conn.buffered() == 0, 10, what="B's frames all handed to its kernel")
        a.sendall(framed(b"A as B stops"))
        # Until it sits in B's socket, unread: the loop does not run, so B cannot read it first.
        assert select.select([sock], [], [], 10)[0]
        loop = asyncio.get_running_loop()
        real_close = conn.close

        def close_then_let_a_read() -> None:
            real_close()
            loop.call_soon(start_reading.set)  # after what the close scheduled (a full close: RST)

        conn.close = close_then_let_a_read  # type: ignore[method-assign]
        reader.start()
        await b.close()
        await wait_until(lambda: got, 30, what="A read to the end")
        assert len(frames) >= 50
        assert unframed(got[-1]) == frames and len(got) == 1, f"A got {len(unframed(got[-1]))} of {count}, {got[:-1]}"
        assert received == [b"A hello", b"A as B stops"]
    finally:
        start_reading.set()
        await b.close()
        if reader.is_alive():
            reader.join(30)
        a.close()


@pytest.mark.asyncio
async def test_a_connection_closed_while_running_is_read_to_its_end():
    """B's own connection to A loses to A's (the smaller name's) and B closes it; A still writes on
    it (it had not seen B's FIN yet): B reads those frames, and only then is the connection gone."""
    received: list[bytes] = []
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen(4)
    b = _transport("B", {"A": listener.getsockname()}, received)
    port = (await b.start()).port
    a_in = a_out = None
    try:
        b.send("A", b"B hello")  # B connects to A
        await wait_until(lambda: b.connected()["A"], 10, what="B's connection to A")
        outgoing = b.conns["A"]
        a_in, _ = listener.accept()
        a_out = socket.create_connection((HOST, port))
        a_out.sendall(framed(b"A hello"))  # A's connection: B adopts it and closes its own
        await wait_until(lambda: b.conns["A"] is not outgoing, 10, what="B switched to A's connection")
        assert outgoing.closed
        late = [b"A late %d" % i for i in range(50)]
        a_in.sendall(b"".join(framed(f) for f in late))
        await wait_until(lambda: len(received) == 1 + len(late), 10, what="A's late frames read by B")
        assert received == [b"A hello", *late]
        a_in.settimeout(10)
        assert unframed(a_in.recv(1 << 16)) == [b"B hello"] and a_in.recv(1) == b""  # then B's FIN
        a_in.close()
        await wait_until(lambda: outgoing not in b._all, 10, what="B's closed connection gone")
    finally:
        await b.close()
        for sock in (a_in, a_out, listener):
            if sock is not None:
                sock.close()


# ---- leaks: every connection made is used or closed ---------------------------------------------


def _tcp_sockets_on(ports: set[int]) -> list[tuple[int, int, str]]:
    """This process's open TCP sockets with a local or remote port in `ports` (from /proc)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            local, remote = (int(addr.rsplit(":", 1)[1], 16) for addr in cols[1:3])
            if cols[9] in inodes and (local in ports or remote in ports):
                found.append((local, remote, cols[3]))
    return found


async def _racing_connects_then_stop(offsets: int) -> tuple[list[TcpTransport], set[int]]:
    """Pairs that connect to each other (one way and both ways at once) and stop while their
    connects are under way: the stop lands 0..offsets-1 loop iterations after the first send."""
    transports, ports = [], set()
    for both in (False, True):
        for k in range(offsets):
            a = _transport("A", {}, [], peer="E")
            e = _transport("E", {}, [], peer="A")
            a_port, e_port = (await a.start()).port, (await e.start()).port
            a.peers, e.peers = {"E": (HOST, e_port)}, {"A": (HOST, a_port)}
            a.send("E", b"A hello")
            if both:
                e.send("A", b"E hello")
            for _ in range(k):
                await asyncio.sleep(0)
            await asyncio.gather(e.close(), a.close())
            transports += [a, e]
            ports |= {a_port, e_port}
    return transports, ports


def _loop_factories() -> list[Any]:
    factories = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop
    except ImportError:  # an optional dependency (the node's "fast" extra)
        return factories
    return [*factories, pytest.param(uvloop.new_event_loop, id="uvloop")]


@pytest.mark.parametrize("new_loop", _loop_factories())
def test_racing_connects_and_stops_leave_no_connection_open(new_loop: Callable[[], asyncio.AbstractEventLoop]):
    """32 pairs connect to each other and stop at every point of their connects: afterwards no
    transport holds a connection and no socket on their ports is open (on the daemon's uvloop a
    connect cancelled after connection_made closed its socket without connection_lost; on asyncio
    a connection accepted as the server closed leaked its socket)."""

    async def run() -> None:
        transports, ports = await _racing_connects_then_stop(8)
        try:
            await wait_until(
                lambda: not _tcp_sockets_on(ports) and not any(t._all for t in transports),
                10,
                what="no socket open on the pairs' ports and no connection held by a transport",
            )
        except TimeoutError:
            held = sum(len(t._all) for t in transports)
            pytest.fail(f"{held} connections held by stopped transports; open sockets: {_tcp_sockets_on(ports)}")

    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(run())
