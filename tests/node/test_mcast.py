"""MCAST (the MCAST design) rule by rule with scripted time, then whole runs in the simulator."""

from __future__ import annotations

import random
from functools import partial

import pytest

from splitbrain.harness.checks import run_checks
from splitbrain.harness.scenario import ScenarioError, parse_scenario
from splitbrain.harness.sim.simulator import Simulation
from splitbrain.node.layer import ViewChange
from splitbrain.node.mcast.config import McastConfig
from splitbrain.node.mcast.header import PROTO_ID, McastHeader, MsgType, decode, encode
from splitbrain.node.mcast.protocol import DEPARTED_GRACE_RUNS, FixedBuffer, Mcast
from splitbrain.node.message import MCAST_DEST, Message, app_payload
from tests.netlab import Net, from_sender, is_type
from tests.netlab import checks_by_name as checks
from tests.netlab import expected as ids
from tests.netlab import once as drop_once

ALL = ("A", "B", "C")
mtype = partial(is_type, proto_id=PROTO_ID)
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
        McastHeader(MsgType.MSG, 7, incarnation=3, low=2),
        McastHeader(MsgType.MCAST_ACK, 2**40),
        McastHeader(MsgType.MCAST_XMIT_REQ, ranges=((1, 3), (9, 9))),
        McastHeader(MsgType.MCAST_HIGHEST_SEQNO, 5, low=4),
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
    """A blocks on B (cut off); a view {A, C} drops B's ack-map entry: once B's grace period is
    over (DEPARTED_GRACE_RUNS retransmit runs, for a B that might be back soon) the minimum moves
    and A unblocks; not before."""
    net = mnet({"capacity": 8})
    net.blocked.add(("A", "B"))
    mcast(net, "A", 10)
    net.run(0.5)
    assert mc(net, "A").blocked(MCAST_DEST)
    for name in ("A", "C"):
        net.command(name, ViewChange(members=("A", "C"), view_id=2))
    grace = DEPARTED_GRACE_RUNS * FAST["xmit_interval"]
    net.run(grace / 2)
    assert mc(net, "A").blocked(MCAST_DEST)
    net.run(grace / 2 + 0.5)
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


def test_a_retransmission_asked_for_by_two_members_is_two_unicasts():
    """B and C ask A for seqno 2 in one batch: A answers each with a copy of its own headers dict,
    so the IP-multicast runtime (which sends copies sharing headers and payload to the group) keeps
    them unicasts, as it keeps every retransmission."""
    net = mnet()
    net.blocked.update({("A", "B"), ("A", "C")})
    mcast(net, "A", 3)
    req = McastHeader(MsgType.MCAST_XMIT_REQ, ranges=((2, 2),))
    a = net.stacks["A"]
    a.receive([Message("B", "A", b"", {PROTO_ID: req}), Message("C", "A", b"", {PROTO_ID: req})], net.now)
    out, _app, _events = a.take()
    answers = [m for m in out if mtype(m, "MSG")]
    assert sorted(m.dest for m in answers) == ["B", "C"]
    assert answers[0].payload is answers[1].payload and answers[0].headers is not answers[1].headers
    assert all(m.headers[PROTO_ID].seqno == 2 for m in answers)


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
    for messages that were never lost (the MCAST design, Misc)."""
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


# ---- whole runs in the simulator --------------------------------------------------------------


def _run(scenario, every: float = 0.25):
    """Run step by step, sampling each node's held messages; returns (result, {node: [(t, held)]})."""
    sim = Simulation(scenario)
    sim.start()
    for stream in scenario.streams:
        sim.add_stream(stream)
    steps = dict(enumerate(scenario.schedule))
    samples: dict[str, list[tuple[float, int]]] = {n: [] for n in scenario.nodes}
    times = {round(k * every, 6) for k in range(1, int(scenario.end_time / every) + 1)}
    times |= {step.at for step in scenario.schedule} | {scenario.end_time}
    for t in sorted(times):
        sim.advance(t)
        for step in steps.values():
            if step.at == t:
                sim.apply_step(step, steps)
        for name, node in sim.nodes.items():
            if node.stack is not None:
                samples[name].append((t, node.stack.layer(Mcast).held()))
    return sim.finish(), samples


def _verdict(result, scenario, names=("fifo", "no_duplicates", "no_loss", "windows_synced")) -> dict:
    return {r.name: r for r in run_checks(result.all_events(), names, recovery_bound_s=scenario.recovery_bound)}


def _sent(result, name: str) -> list[str]:
    return [e["app"] for e in result.events[name] if e["kind"] == "send" and e["proto"] == "mcast"]


@pytest.mark.parametrize("nodes", [3, 5])
def test_all_members_multicasting_under_loss_duplication_and_reordering(nodes):
    """3 and 5 members all multicast 100/s for 10 s under 20 % loss, duplication and reordering on every
    link: every member delivers every multicast exactly once, in per-sender order; windows end in sync."""
    duration = 10.0
    scenario = parse_scenario(
        {
            "name": f"mcast-chaos-{nodes}",
            "protocol": "mcast",
            "transport": "udp",
            "nodes": nodes,
            "config": {"xmit_interval": 0.2, "capacity": 512},
            "workload": [{"from": "all", "to": "all", "rate": 100, "duration": duration}],
            "schedule": [
                {"at": 0.5, "loss": {"link": "*", "p": 0.2}},
                {"at": 0.5, "duplicate": {"link": "*", "p": 0.2}},
                {"at": 0.5, "reorder": {"link": "*", "p": 0.2}},
                {"at": duration, "heal": "all"},
            ],
            "duration": duration,
            "settle": 6,
            "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced"],
            "seed": 3,
        }
    )
    result, _ = _run(scenario)
    sent = {name: _sent(result, name) for name in scenario.nodes}
    assert all(len(ids_) == 1000 for ids_ in sent.values())
    for events in result.events.values():
        got = [e["app"] for e in events if e["kind"] == "deliver" and e["proto"] == "mcast"]
        for src in scenario.nodes:
            assert [a for a in got if a.startswith(src + ":")] == sent[src]
    verdict = _verdict(result, scenario)
    assert all(r.passed for r in verdict.values()), [r.explanation for r in verdict.values() if not r.passed]
    assert verdict["no_loss"].judged == nodes * (nodes - 1) * 1000  # the loopback deliveries are not owed
    kinds = {e["kind"] for evs in result.events.values() for e in evs}
    assert "error" not in kinds and {"xmit_req_tx", "retransmit"} <= kinds


def _partitioned(membership: str, capacity: int = 200, heal: float | None = 6.0, duration: float = 10.0):
    schedule: list[dict] = [{"at": 1.5, "partition": [["A", "B"], ["C"]]}]
    if heal is not None:
        schedule.append({"at": heal, "heal": "all"})
    return parse_scenario(
        {
            "name": f"mcast-flow-{membership}",
            "protocol": "mcast",
            "membership": membership,
            "transport": "udp",
            "nodes": 3,
            "config": {"xmit_interval": 0.2, "capacity": capacity},
            "workload": [
                {"from": "A", "to": "all", "rate": 200, "duration": duration - 1, "start": 1.0},
                {"from": "B", "to": "all", "rate": 200, "duration": duration - 1, "start": 1.0},
            ],
            "schedule": schedule,
            "duration": duration,
            "settle": 6,
            "seed": 5,
        }
    )


def test_flow_control_blocks_at_capacity_and_unblocks_at_the_heal():
    """Static views, C cut off at 1.5 s for 4.5 s: A and B block once capacity - 1 multicasts are unacked,
    hold no more than that, and unblock when C is back and has caught up; nothing is lost."""
    scenario = _partitioned("static")
    result, samples = _run(scenario)
    for name in ("A", "B"):
        blocks = [e for e in result.events[name] if e["kind"] == "block"]
        unblocks = [e for e in result.events[name] if e["kind"] == "unblock"]
        assert blocks and unblocks and 1.5 < blocks[0]["t"] < 3.0 and unblocks[-1]["t"] > 6.0
        assert blocks[0]["seqno"] - blocks[0]["low"] == 200  # S - low >= capacity
        # Memory stays at the window: its own capacity - 1 unacked plus what waits of the other
        # sender's and the one blocked send.
        assert max(h for _, h in samples[name]) <= 2 * 200
    assert max(h for _, h in samples["C"]) <= 2 * 200
    assert result.stats["msgs_blocked"] > 0
    verdict = _verdict(result, scenario)
    assert all(r.passed for r in verdict.values()), [r.explanation for r in verdict.values() if not r.passed]
    for src in ("A", "B"):
        got = [e["app"] for e in result.events["C"] if e["kind"] == "deliver" and e.get("peer") == src and "app" in e]
        assert got == _sent(result, src)


def test_flow_control_unblocks_when_the_view_drops_the_cut_off_member():
    """membership gms, C cut off for good at 1.5 s: A and B block, then unblock when GMS's view drops C
    (fd_timeout later) and C's grace period is over (DEPARTED_GRACE_RUNS retransmit runs), and keep
    multicasting to each other."""
    scenario = _partitioned("gms", heal=None)
    grace = DEPARTED_GRACE_RUNS * McastConfig.from_dict(scenario.config).xmit_interval
    result, _ = _run(scenario)
    view_without_c = min(
        e["t"]
        for e in result.events["A"]
        if e["kind"] == "view" and e.get("members") == ["A", "B"] and e["proto"] == "mcast" and e["t"] > 1.5
    )
    for name in ("A", "B"):
        blocks = [e["t"] for e in result.events[name] if e["kind"] == "block"]
        unblocks = [e["t"] for e in result.events[name] if e["kind"] == "unblock"]
        assert blocks and blocks[0] < view_without_c, (blocks, view_without_c)
        assert unblocks and 0 <= unblocks[0] - view_without_c < grace + 0.5, (unblocks, view_without_c)
    a_sent = _sent(result, "A")
    assert len(a_sent) > 1300  # it went on after the grace: ~200/s for the rest of the run
    got_b = [e["app"] for e in result.events["B"] if e["kind"] == "deliver" and e.get("peer") == "A" and "app" in e]
    assert got_b == a_sent
    # windows_synced is left out: C stays cut off, so UNICAST3's GMS windows towards it stay open.
    verdict = _verdict(result, scenario, ("fifo", "no_duplicates", "no_loss"))
    assert all(r.passed for r in verdict.values()), [r.explanation for r in verdict.values() if not r.passed]


@pytest.mark.parametrize("mutation", [None, "seqno_outside_lock"])
def test_sim_concurrent_senders_on_a_lossless_network(mutation):
    """Two streams per member (concurrent senders) on a lossless network with delay: no XMIT-REQ at all;
    the seqno_outside_lock mutant loses nothing yet makes receivers ask for never-lost messages."""
    config: dict = {"xmit_interval": 0.05, "capacity": 1024}
    if mutation:
        config["mutation"] = mutation
    scenario = parse_scenario(
        {
            "name": "mcast-lossless",
            "protocol": "mcast",
            "transport": "udp",
            "nodes": 3,
            "config": config,
            "workload": [
                {"from": "all", "to": "all", "rate": 300, "duration": 3},
                {"from": "all", "to": "all", "rate": 300, "duration": 3},
            ],
            "schedule": [{"at": 0.0, "delay": {"link": "*", "ms": 2}}],
            "duration": 3,
            "settle": 2,
            "seed": 9,
        }
    )
    result, _ = _run(scenario)
    assert result.stats["frames_lost"] == 0
    verdict = _verdict(result, scenario)
    assert all(r.passed for r in verdict.values()), [r.explanation for r in verdict.values() if not r.passed]
    requests = sum(1 for evs in result.events.values() for e in evs if e["kind"] == "xmit_req_tx")
    if mutation is None:
        assert requests == 0
    else:
        assert requests > 10, requests


def test_settings_shared_with_unicast3_keep_apart():
    """ack_threshold and xmit_interval are MCAST's; UNICAST3's take the unicast3_ prefix, and as_dict round-trips."""
    cfg = McastConfig.from_dict({"ack_threshold": 7, "unicast3_ack_threshold": 3, "unicast3_xmit_interval": 0.3})
    assert cfg.ack_threshold == 7 and cfg.unicast3.ack_threshold == 3 and cfg.unicast3.xmit_interval == 0.3
    assert McastConfig.from_dict(cfg.as_dict()) == cfg
    assert cfg.as_dict()["ack_threshold"] == 7 and cfg.as_dict()["unicast3_ack_threshold"] == 3


@pytest.mark.parametrize("seed", range(6))
def test_small_windows_under_chaos_keep_invariants_and_deliver_everything(seed):
    """capacity 16 (senders block often, receivers drop beyond the window) under 30 % loss, duplication
    and reordering, 3 members all multicasting: invariants hold after every step (the simulator checks
    them), everything sent is delivered once in order, and every sender ends unblocked."""
    scenario = parse_scenario(
        {
            "name": "mcast-small-window",
            "protocol": "mcast",
            "transport": "udp",
            "nodes": 3,
            "config": {"xmit_interval": 0.05, "capacity": 16},
            "workload": [{"from": "all", "to": "all", "rate": 400, "duration": 3}],
            "schedule": [
                {"at": 0.2, "loss": {"link": "*", "p": 0.3}},
                {"at": 0.2, "duplicate": {"link": "*", "p": 0.3}},
                {"at": 0.2, "reorder": {"link": "*", "p": 0.3}},
                {"at": 3.0, "heal": "all"},
            ],
            "duration": 3,
            "settle": 5,
            "seed": seed,
        }
    )
    result, _ = _run(scenario)
    verdict = _verdict(result, scenario)
    assert all(r.passed for r in verdict.values()), [r.explanation for r in verdict.values() if not r.passed]
    assert verdict["no_loss"].judged > 0
    for name, events in result.events.items():
        kinds = [e["kind"] for e in events if e["kind"] in ("block", "unblock")]
        assert kinds.count("block") == kinds.count("unblock") and kinds.count("block") > 0, name
    assert result.stats["msgs_blocked"] > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_member_killed_and_restarted_under_loss_catches_up_and_unblocks_nobody(seed):
    """Static view, 20 % loss, A and C multicast; C is killed at 2 s and restarted at 3 s: its new life
    starts its windows where the senders still hold messages (MSG carries the sender's low), the others
    reset their window for C's new life (MSG carries the incarnation); everything owed is delivered and
    no sender stays blocked on C's old acks."""
    scenario = parse_scenario(
        {
            "name": "mcast-restart",
            "protocol": "mcast",
            "transport": "udp",
            "nodes": 3,
            "config": {"xmit_interval": 0.2, "capacity": 512},
            "workload": [
                {"from": "A", "to": "all", "rate": 100, "duration": 8},
                {"from": "C", "to": "all", "rate": 100, "duration": 8},
            ],
            "schedule": [
                {"at": 0.5, "loss": {"link": "*", "p": 0.2}},
                {"at": 2.0, "kill": "C"},
                {"at": 3.0, "restart": "C"},
                {"at": 7.5, "heal": 0},
            ],
            "duration": 8,
            "settle": 4,
            "seed": seed,
        }
    )
    result, _ = _run(scenario)
    verdict = _verdict(result, scenario)
    assert all(r.passed for r in verdict.values()), [r.explanation for r in verdict.values() if not r.passed]
    assert verdict["no_loss"].judged > 2400  # of 2 x 800 multicasts to 2 others each (loopbacks not owed)
    resets = [e for evs in result.events.values() for e in evs if e.get("reason") == "new_window:restarted"]
    assert sorted(e["node"] for e in resets) == ["A", "B"]
    for name, events in result.events.items():
        kinds = [e["kind"] for e in events if e["kind"] in ("block", "unblock")]
        assert kinds.count("block") == kinds.count("unblock"), name


def test_window_fill_is_logged_at_retransmit_runs_only_when_the_send_window_changed():
    """A multicasts 10 and B, C ack: window_fill events (low acked, high sent, count waiting) at
    A's retransmit runs trace the fill down to 0; once nothing changes, no more of them."""
    net = mnet()
    mcast(net, "A", 10)
    net.run_until_quiet(2.0)
    net.run(1.0)
    fills = [(e["low"], e["high"], e["count"]) for e in net.kinds("window_fill", "A")]
    assert fills and fills[-1] == (10, 10, 0)
    assert len(fills) == len(set(fills))  # one per change, never the same state twice in a row
    before = len(net.kinds("window_fill"))
    net.run(2.0)  # 20 retransmit runs per node, nothing changes
    assert len(net.kinds("window_fill")) == before
