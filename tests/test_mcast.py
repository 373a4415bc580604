"""MCAST (seed 004) rule by rule with scripted time, then whole runs in the simulator."""

from __future__ import annotations

import random

import pytest

from harness.checks import run_checks
from harness.scenario import ScenarioError, parse_scenario
from node.layer import ViewChange
from node.mcast.config import McastConfig
from node.mcast.header import PROTO_ID, McastHeader, MsgType, decode, encode
from node.mcast.protocol import FixedBuffer, Mcast
from node.message import MCAST_DEST, Message, app_payload
from tests.netlab import Net

ALL = ("A", "B", "C")
FAST = {"xmit_interval": 0.1}


def mnet(config=None, names=ALL, view=True) -> Net:
    net = Net(names=names, config={**FAST, **(config or {})}, protocol="mcast")
    if view:
        for name in names:
            net.command(name, ViewChange(members=tuple(names), view_id=1))
    return net


def mc(net: Net, name: str) -> Mcast:
    return net.stacks[name].layer(Mcast)


def mcast(net: Net, src: str, count: int = 1, size: int = 20) -> None:
    net.send(src, MCAST_DEST, count, size)


def ids(src: str, n: int, start: int = 1) -> list[str]:
    return [f"{src}:0:{i}" for i in range(start, n + 1)]


def from_sender(delivered: list[str], src: str) -> list[str]:
    return [a for a in delivered if a.startswith(src + ":")]


def mtype(msg: Message, name: str, seqno: int | None = None) -> bool:
    hdr = msg.headers.get(PROTO_ID)
    return hdr is not None and hdr.type.name == name and (seqno is None or hdr.seqno == seqno)


def drop_once(pred):
    state = {"done": False}

    def drop(msg):
        if not state["done"] and pred(msg):
            state["done"] = True
            return True
        return False

    return drop


def checks(net: Net, bound: float = 2.0) -> dict:
    return {r.name: r for r in run_checks(net.final_events(), recovery_bound_s=bound)}


# ---- the ring buffer ----------------------------------------------------------------------------


def test_fixed_buffer_against_a_dict_model():
    """Random adds, in-order removals and purges on a FixedBuffer agree with a dict model and its invariants."""
    rng = random.Random(7)
    buf = FixedBuffer(8)
    model: dict[int, str] = {}
    low = high = 0
    for _ in range(3000):
        op = rng.random()
        if op < 0.6:
            seqno = rng.randint(max(0, low - 2), low + 10)
            added = buf.add(seqno, Message("A", "*", b"x" * seqno))
            expect = low < seqno < low + 8 and seqno not in model
            assert added == expect, (seqno, low)
            if expect:
                model[seqno] = "x"
                high = max(high, seqno)
        elif op < 0.9:
            got = buf.remove_next()
            if low + 1 in model:
                assert got is not None and len(got.payload) == low + 1
                del model[low + 1]
                low += 1
            else:
                assert got is None
        else:
            upto = rng.randint(low, high)
            buf.purge(upto)
            for s in [s for s in model if s <= upto]:
                del model[s]
            low = max(low, upto)
        assert (buf.low, buf.high, buf.size) == (low, high, len(model))
        assert set(buf.missing()) == {s for s in range(low + 1, high + 1) if s not in model}
        buf.check_invariants("model")


def test_header_round_trip_and_defaults():
    """Every MCAST header round-trips; defaults are NAKACK4's (capacity 16384, ack_threshold capacity/4)."""
    for h in (
        McastHeader(MsgType.MSG, 7),
        McastHeader(MsgType.MCAST_ACK, 2**40),
        McastHeader(MsgType.MCAST_XMIT_REQ, ranges=((1, 3), (9, 9))),
        McastHeader(MsgType.MCAST_HIGHEST_SEQNO, 5),
    ):
        assert decode(encode(h)) == h
    cfg = McastConfig.from_dict({})
    assert cfg.capacity == 16384 and cfg.acks_every == 4096 and cfg.xmit_interval == 1.0
    assert McastConfig.from_dict({"capacity": 100}).acks_every == 25


def test_bad_settings_name_their_key():
    """A bad MCAST setting is refused at its key (config.capacity, config.mutation, an unknown key)."""
    base = {"name": "n", "protocol": "mcast", "nodes": 3, "duration": 1}
    with pytest.raises(ScenarioError, match=r"config\.capacity"):
        parse_scenario({**base, "config": {"capacity": 1}})
    with pytest.raises(ScenarioError, match=r"config\.mutation"):
        parse_scenario({**base, "config": {"mutation": "nope"}})
    with pytest.raises(ScenarioError, match=r"config\.bogus"):
        parse_scenario({**base, "config": {"bogus": 1}})


# ---- the layer, scripted ----------------------------------------------------------------------


def test_every_member_delivers_every_multicast_once_in_sender_order():
    """A and B multicast 20 each to {A, B, C}: everyone (senders too) delivers all 40, per-sender FIFO, no XMIT-REQ."""
    net = mnet()
    for _ in range(4):
        mcast(net, "A", 5)
        mcast(net, "B", 5)
        net.run(0.01)
    net.run(1.0)
    for name in ALL:
        assert from_sender(net.delivered[name], "A") == ids("A", 20)
        assert from_sender(net.delivered[name], "B") == ids("B", 20)
    assert not net.kinds("xmit_req_tx") and not net.kinds("retransmit")
    assert all(r.passed for r in checks(net).values()), checks(net)


def test_a_lost_multicast_is_asked_for_and_resent():
    """MSG 5 from A is lost at B: B's next retransmit run asks A for 5, A resends, B delivers 1..10 in order."""
    net = mnet()
    net.drop = drop_once(lambda m: m.src == "A" and mtype(m, "MSG", 5) and m.dest == "B")
    mcast(net, "A", 10)
    net.run(0.5)
    assert net.delivered["B"] == ids("A", 10)
    req = net.kinds("xmit_req_tx", "B")
    assert req and req[0]["peer"] == "A" and req[0]["ranges"] == [[5, 5]] and req[0]["proto"] == "mcast"
    assert net.kinds("retransmit", "A", peer="B", seqno=5)


def test_a_lost_last_multicast_is_found_by_highest_seqno():
    """A's last MSG is lost at B: A's acks stop moving, it sends HIGHEST_SEQNO to B, B asks, delivers."""
    net = mnet()
    net.drop = drop_once(lambda m: mtype(m, "MSG", 5) and m.dest == "B")
    mcast(net, "A", 5)
    net.run(1.0)
    assert net.delivered["B"] == ids("A", 5)
    assert net.kinds("highest_seqno_tx", "A")
    net.run_until_quiet(2.0)


def test_acks_every_ack_threshold_deliveries_and_at_the_xmit_interval():
    """ack_threshold 4: 10 multicasts give acks for 4 and 8 at once, and 10 at the next retransmit run."""
    net = mnet({"capacity": 16, "ack_threshold": 4, "xmit_interval": 0.5})
    mcast(net, "A", 10)
    net.run(0.1)
    assert [e["seqno"] for e in net.kinds("ack_tx", "B")] == [4, 8]
    net.run(0.5)
    assert [e["seqno"] for e in net.kinds("ack_tx", "B")] == [4, 8, 10]
    assert mc(net, "A").send_window.low == 10 and mc(net, "A").send_window.size == 0


def test_sender_blocks_at_capacity_and_unblocks_when_acks_purge():
    """capacity 8, B cut off from A: A blocks at seqno 8 (S - low >= capacity), its sends wait;
    heal -> acks purge, A unblocks in order."""
    net = mnet({"capacity": 8, "ack_threshold": 2})
    net.blocked.add(("A", "B"))
    mcast(net, "A", 12)
    net.run(0.05)
    a = mc(net, "A")
    assert a.seqno == 7 and a.blocked(MCAST_DEST) and a.held() == 7 + 5
    assert [e["seqno"] for e in net.kinds("block", "A")] == [8]
    assert net.delivered["C"] == ids("A", 7)
    net.blocked.clear()
    net.run(1.0)
    assert net.kinds("unblock", "A") and not a.blocked(MCAST_DEST)
    for name in ALL:
        assert net.delivered[name] == ids("A", 12)
    net.run_until_quiet(2.0)
    assert all(r.passed for r in checks(net).values()), checks(net)


def test_a_view_without_the_dead_member_unblocks_the_sender():
    """A blocks on B (cut off); a view {A, C} drops B's ack-map entry: the minimum moves, A unblocks."""
    net = mnet({"capacity": 8})
    net.blocked.add(("A", "B"))
    mcast(net, "A", 10)
    net.run(0.5)
    assert mc(net, "A").blocked(MCAST_DEST)
    for name in ("A", "C"):
        net.command(name, ViewChange(members=("A", "C"), view_id=2))
    net.run(0.5)
    assert not mc(net, "A").blocked(MCAST_DEST) and net.kinds("unblock", "A")
    assert net.delivered["C"] == ids("A", 10)


def test_acks_from_non_members_are_ignored():
    """JGRP-2904: an ack from D (not in the view) is dropped and does not purge or unblock."""
    net = mnet({"capacity": 8})
    net.blocked.update({("A", "B"), ("A", "C")})
    mcast(net, "A", 5)
    net.stacks["A"].receive([Message("D", "A", b"", {PROTO_ID: McastHeader(MsgType.MCAST_ACK, 5)})], net.now)
    net._collect("A")
    assert mc(net, "A").send_window.low == 0 and "D" not in mc(net, "A").ack_map
    assert net.kinds("drop", "A", reason="ack from a non-member")


def test_receiver_drops_outside_the_window_and_duplicates():
    """B's window for A (capacity 8, low 0) drops seqno 8 (>= low + capacity) and a duplicate of 3."""
    net = mnet({"capacity": 8})
    b = net.stacks["B"]
    for seqno in (3, 8, 3):
        b.receive([Message("A", "B", app_payload("A", 0, seqno, 10), {PROTO_ID: McastHeader(MsgType.MSG, seqno)})], 0.0)
    net._collect("B")
    assert [e["reason"] for e in net.kinds("drop", "B")] == ["outside the window", "duplicate"]
    assert mc(net, "B").recv["A"].size == 1


def test_joiner_windows_start_at_the_digest_offsets():
    """D joins {A, B, C} after A sent 30: its window for A starts at the digest's 30; it delivers
    31.. only, and A's purge does not wait for 1..30."""
    net = mnet(names=("A", "B", "C", "D"), view=False)
    for name in ALL:
        net.command(name, ViewChange(members=ALL, view_id=1))
    mcast(net, "A", 30)
    net.run(0.5)
    view = ViewChange(members=(*ALL, "D"), view_id=2, digest=(("A", 30), ("B", 0), ("C", 0)))
    for name in (*ALL, "D"):
        net.command(name, view)
    assert mc(net, "D").recv["A"].low == 30
    mcast(net, "A", 10)
    net.run_until_quiet(2.0)
    assert net.delivered["D"] == ids("A", 40, start=31)
    assert net.delivered["B"] == ids("A", 40)
    assert mc(net, "A").send_window.low == 40


def test_atomic_send_makes_no_spurious_xmit_req_and_the_mutant_does():
    """Three senders, lossless: no XMIT-REQ at all; with mutation seqno_outside_lock receivers ask
    for messages that were never lost (seed 004, Misc)."""
    counts = {}
    for mutation in (None, "seqno_outside_lock"):
        net = mnet({"xmit_interval": 0.003, **({"mutation": mutation} if mutation else {})})
        for _ in range(200):
            for src in ALL:
                mcast(net, src, 1)
            net.run(0.001)
        net.run_until_quiet(2.0)
        for name in ALL:
            for src in ALL:
                assert from_sender(net.delivered[name], src) == ids(src, 200)
        counts[mutation] = len(net.kinds("xmit_req_tx"))
    assert counts[None] == 0
    assert counts["seqno_outside_lock"] > 0, counts
