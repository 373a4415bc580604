"""Seed 003: without retransmission nothing below NAKACK2 may drop a message. The TCP transport
drops frames for a peer that does not read (or is not connected yet) only while the protocol
resends; a node running NAKACK2 with xmit_interval <= 0 makes its transport buffer instead, and
follows xmit_interval when it changes at run time."""

from __future__ import annotations

import pytest

from node.runtime import transport as tr
from node.runtime.testing import NodeGroup, pair_configs
from node.runtime.transport import Address, TcpTransport


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
