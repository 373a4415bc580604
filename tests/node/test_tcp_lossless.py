"""The NAKACK2 design: without retransmission nothing below NAKACK2 may drop a message. The TCP transport
drops frames for a peer that does not read (or is not connected yet) only while the protocol
resends; a node running NAKACK2 with xmit_interval <= 0 makes its transport buffer instead, and
follows xmit_interval when it changes at run time."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from splitbrain.node.runtime import transport as tr
from splitbrain.node.runtime.testing import NodeGroup, pair_configs, wait_until
from splitbrain.node.runtime.transport import Address, TcpTransport


class _StuckConn:
    """An open connection whose peer reads nothing: its write buffer is already over the limit."""

    closed = False
    paused = True

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def buffered(self) -> int:
        return tr.TCP_MAX_BUFFERED_BYTES + 1

    def write(self, frame: bytes) -> None:
        self.written.append(frame)


def _transport() -> TcpTransport:
    return TcpTransport("A", Address("127.0.0.1", 0), {"B": ("127.0.0.1", 9)}, lambda f, p: None, lambda r, p: None)


@pytest.mark.parametrize("lossless", [False, True])
def test_a_peer_that_reads_nothing_costs_frames_only_while_the_protocol_resends(lossless):
    t = _transport()
    t.lossless = lossless
    conn = _StuckConn()
    t.conns["B"] = conn  # type: ignore[assignment]
    for i in range(5):
        t.send("B", b"frame %d" % i)
    if lossless:
        assert (t.stats.dropped_out, len(conn.written)) == (0, 5)
    else:
        assert (t.stats.dropped_out, len(conn.written)) == (5, 0)


@pytest.mark.asyncio
@pytest.mark.parametrize("lossless", [False, True])
async def test_frames_waiting_for_a_connection_are_kept_while_lossless(lossless, monkeypatch):
    monkeypatch.setattr(tr, "TCP_QUEUE_MAX_BYTES", 1000)
    t = _transport()  # B's port 9 (discard) is closed here: the frames wait for a connection
    t.lossless = lossless
    try:
        for _ in range(10):
            t.send("B", b"x" * 200)
        queued = sum(len(f) for f in t._queued.get("B", []))
        if lossless:
            assert (t.stats.dropped_out, queued) == (0, 2000)
        else:
            assert (t.stats.dropped_out, queued) == (5, 1000)
    finally:
        await t.close()


@pytest.mark.asyncio
async def test_a_nakack2_node_over_tcp_is_lossless_exactly_while_it_does_not_retransmit(tmp_path):
    configs = pair_configs(tmp_path, "tcp", protocol_config={"xmit_interval": 0}, protocol="nakack2")
    async with NodeGroup(configs) as (a, _b):
        assert a.transport.lossless is True
        a.set_config({"xmit_interval": 0.5})
        assert a.transport.lossless is False
        a.set_config({"xmit_interval": 0})
        assert a.transport.lossless is True
    configs = pair_configs(tmp_path / "u3", "tcp", protocol="unicast3")
    async with NodeGroup(configs) as (a, _b):
        assert a.transport.lossless is False


@pytest.mark.asyncio
async def test_a_connect_that_completes_after_the_peer_connection_was_adopted_loses_nothing(monkeypatch):
    """A and E connect to each other at the same moment. A adopts E's connection on its first
    frame and flushes what waited for E onto it, while its own connect completes in the same loop
    iteration: Python 3.11's asyncio.wait_for then returns the connection instead of raising the
    cancellation. A must go on sending on the adopted connection: were it to switch to its own, E
    would adopt that one as well and close its outgoing connection unread, losing A's frames."""
    frames = [b"A%05d " % i + b"x" * 1000 for i in range(3000)]  # many reads' worth
    received: list[bytes] = []
    all_arrived = asyncio.Event()

    def e_got(frame: bytes, _peer: str | None) -> str | None:
        received.append(frame)
        if len(received) == len(frames) + 1:
            all_arrived.set()
        return "A"

    def a_got(frame: bytes, _peer: str | None) -> str | None:
        return "E" if frame == b"E hello" else None  # "E noise" is rejected: not adopted on it

    a = TcpTransport("A", Address("127.0.0.1", 0), {}, a_got, lambda r, p: None)
    e = TcpTransport("E", Address("127.0.0.1", 0), {}, e_got, lambda r, p: None)
    a_port, e_port = (await a.start()).port, (await e.start()).port
    a.peers, e.peers = {"E": ("127.0.0.1", e_port)}, {"A": ("127.0.0.1", a_port)}
    loop = asyncio.get_running_loop()
    real_connect = loop.create_connection

    async def connect_as_e_speaks(factory: Any, host: str, port: int) -> Any:
        made = await real_connect(factory, host, port)
        if port == e_port:  # A's connect is done: E's connection is up, its first frame leaves now
            e.send("A", b"E noise")
            await wait_until(lambda: e.connected()["A"], interval=0, what="E connected to A")
            e.send("A", b"E hello")
        return made

    monkeypatch.setattr(loop, "create_connection", connect_as_e_speaks)
    try:
        for frame in frames:
            a.send("E", frame)  # they wait: A is connecting
        await wait_until(lambda: not a._connecting and a.connected()["E"], timeout=10, interval=0, what="A on E")
        a.send("E", b"A after the race")
        with contextlib.suppress(TimeoutError):  # the count below says what went missing
            await asyncio.wait_for(all_arrived.wait(), 10)
        assert (len(received), received == [*frames, b"A after the race"]) == (len(frames) + 1, True)
    finally:
        await a.close()
        await e.close()
