"""NAKACK2 (the NAKACK2 design) rule by rule with scripted time, then whole runs in the simulator."""

from __future__ import annotations

import random
from functools import partial

import pytest

from splitbrain.harness.checks import run_checks
from splitbrain.harness.scenario import ScenarioError, parse_scenario
from splitbrain.harness.sim.simulator import Simulation, simulate
from splitbrain.node import wire
from splitbrain.node.compose import build_stack
from splitbrain.node.layer import BecomeServer, SetConfig, ViewChange
from splitbrain.node.message import MCAST_DEST, Message, app_payload
from splitbrain.node.nakack2.config import Nakack2Config
from splitbrain.node.nakack2.header import PROTO_ID, MsgType, N2Header, decode, encode
from splitbrain.node.nakack2.protocol import Nakack2
from splitbrain.node.unicast3.protocol import Unicast3
from tests.netlab import Net, from_sender, is_type
from tests.netlab import checks_by_name as checks
from tests.netlab import expected as ids
from tests.netlab import once as drop_once

ALL = ("A", "B", "C")
n2_type = partial(is_type, proto_id=PROTO_ID)
# STABLE every 0.5 s here (JGroups: about 50 s), so that purging shows within a short test.
FAST = {"xmit_interval": 0.1, "stable_interval": 0.5, "resend_last_seqno_max_times": 3}


def mnet(config=None, names=ALL, view=True) -> Net:
    net = Net(names=names, config={**FAST, **(config or {})}, protocol="nakack2")
    if view:
        for name in names:
            net.command(name, ViewChange(members=tuple(names), view_id=1))
    return net


def n2(net: Net, name: str) -> Nakack2:
    return net.stacks[name].layer(Nakack2)


def mcast(net: Net, src: str, count: int = 1, size: int = 20) -> None:
    net.send(src, MCAST_DEST, count, size)


# ---- the layer, scripted ----------------------------------------------------------------------


def test_every_member_delivers_every_multicast_once_in_sender_order():
    """A and B multicast 20 each to {A, B, C}: everyone (senders too) delivers all 40, per-sender FIFO."""
    net = mnet()
    for _ in range(4):
        mcast(net, "A", 5)
        mcast(net, "B", 5)
        net.run(0.01)
    net.run(1.5)
    for name in ALL:
        assert from_sender(net.delivered[name], "A") == ids("A", 20)
        assert from_sender(net.delivered[name], "B") == ids("B", 20)
    assert not net.kinds("xmit_req_tx") and not net.kinds("retransmit")
    assert all(r.passed for r in checks(net).values()), checks(net)


def test_a_lost_multicast_is_asked_for_and_resent():
    """MSG 5 from A is lost at B: B's retransmit task sends an XMIT-REQ, A resends, B delivers 1..10 in order."""
    net = mnet()
    net.drop = drop_once(lambda m: m.src == "A" and n2_type(m, "MSG", 5) and m.dest == "B")
    mcast(net, "A", 10)
    net.run(1.0)
    assert net.delivered["B"] == ids("A", 10)
    req = net.kinds("xmit_req_tx", "B")
    assert req and req[0]["peer"] == "A" and req[0]["ranges"] == [[5, 5]] and req[0]["proto"] == "nakack2"
    assert net.kinds("retransmit", "A", peer="B", seqno=5)


def test_a_persisting_gap_is_asked_of_another_member():
    """C cannot reach A (C->A cut) and lost A's MSG 3: after the runs that asked A, C asks B, which answers."""
    net = mnet()
    net.blocked.add(("C", "A"))
    net.drop = drop_once(lambda m: m.src == "A" and n2_type(m, "MSG", 3) and m.dest == "C")
    mcast(net, "A", 5)
    net.run(1.0)
    assert net.delivered["C"] == ids("A", 5)
    rsp = net.kinds("retransmit", "B", peer="C", seqno=3)
    assert rsp and rsp[0]["origin"] == "A"


def test_last_multicast_lost_is_found_by_the_last_seqno_sender():
    """A's last MSG is lost at B and STABLE is far away: A's HIGHEST_SEQNO tells B it exists, B asks, delivers."""
    net = mnet({"stable_interval": 100.0})
    net.drop = drop_once(lambda m: n2_type(m, "MSG", 5) and m.dest == "B")
    mcast(net, "A", 5)
    net.run(1.0)
    assert net.delivered["B"] == ids("A", 5)
    assert net.kinds("highest_seqno_tx", "A") and net.kinds("xmit_req_tx", "B")


def test_last_multicast_lost_is_found_by_stable_too():
    """The last-seqno-sender is off: B learns of A's last MSG from C's STABLE digest and asks for it."""
    net = mnet({"resend_last_seqno_max_times": 0})
    net.drop = drop_once(lambda m: n2_type(m, "MSG", 5) and m.dest == "B")
    mcast(net, "A", 5)
    net.run(2.0)
    assert net.delivered["B"] == ids("A", 5)
    assert not net.kinds("highest_seqno_tx")


def test_stable_purges_what_every_member_delivered():
    """After STABLE rounds every table is empty: all members delivered everything, so nothing is kept."""
    net = mnet()
    for _ in range(10):
        for name in ALL:
            mcast(net, name, 10)
        net.run(0.05)
    assert max(n2(net, n).retransmit_table_size() for n in ALL) > 0
    net.run(2.0)
    assert [n2(net, n).retransmit_table_size() for n in ALL] == [0, 0, 0]
    assert net.kinds("stable_tx") and net.kinds("stable_rx")


def test_a_member_that_never_reports_holds_back_purging():
    """C's STABLE digests never reach anyone: A keeps all its messages (C may still ask), so C can be served."""
    net = mnet()
    net.drop = lambda m: m.src == "C" and n2_type(m, "STABLE")
    mcast(net, "A", 10)
    net.run(2.0)
    assert len(n2(net, "A").tables["A"].msgs) == 10


def test_unicasts_go_through_unicast3():
    """In a NAKACK2 stack a unicast is UNICAST3's: delivered once, in order, logged with proto unicast3."""
    net = mnet()
    net.send("A", "B", 5)
    net.run(1.0)
    assert net.delivered["B"] == ids("A", 5)
    assert {e["proto"] for e in net.kinds("deliver", "B")} == {"unicast3"}


def test_without_retransmission_nothing_is_asked_or_resent():
    """xmit_interval 0 on a lossless network: all delivered in order; no XMIT-REQ, retransmission or HIGHEST_SEQNO."""
    net = mnet({"xmit_interval": 0})
    for _ in range(5):
        for name in ALL:
            mcast(net, name, 10)
        net.run(0.05)
    net.run(2.0)
    for name in ALL:
        for src in ALL:
            assert from_sender(net.delivered[name], src) == ids(src, 50)
    assert not (net.kinds("xmit_req_tx") or net.kinds("retransmit") or net.kinds("highest_seqno_tx"))
    assert n2(net, "A").timers.get("xmit") is None
    assert [n2(net, n).retransmit_table_size() for n in ALL] == [0, 0, 0]  # STABLE still purges


@pytest.mark.parametrize("xmit_interval", [0.1, 0])
def test_last_message_dropped(xmit_interval):
    """LastMessageDroppedTest: a drop below NAKACK2 of A's last multicast at B. Repaired with
    retransmission; without it the gap is never filled and no_loss says so (the NAKACK2 design)."""
    net = mnet({"xmit_interval": xmit_interval})
    net.drop = drop_once(lambda m: n2_type(m, "MSG", 3) and m.dest == "B")
    mcast(net, "A", 3)
    net.run(3.0)
    verdict = checks(net)
    if xmit_interval:
        assert net.delivered["B"] == ids("A", 3)
        assert verdict["no_loss"].passed
    else:
        assert net.delivered["B"] == ids("A", 2)
        assert n2(net, "B").tables["A"].delivered == 2
        assert not verdict["no_loss"].passed and "A->B" in verdict["no_loss"].details["lost"]
        assert verdict["no_loss"].details["lost"]["A->B"]["first"] == ["A:0:3"]


def _join_c(config: dict) -> Net:
    """The NAKACK2 design's become_server_queue case: B has multicast 100 to {A, B}; C joins with the digest
    {A: 0, B: 100} and, before it becomes a server, B multicasts 70 more (101..170)."""
    net = mnet(config, view=False)
    for name in ("A", "B"):
        net.command(name, ViewChange(members=("A", "B"), view_id=1))
    mcast(net, "B", 100)
    net.run(0.5)
    view = ViewChange(members=ALL, view_id=2, coord="A", digest=(("A", 0), ("B", 100)))
    for name in ALL:
        net.command(name, view)
    assert not n2(net, "C").is_server
    mcast(net, "B", 70)
    net.run(0.05)
    net.command("C", BecomeServer())
    return net


def test_become_server_queue_bounded_without_retransmission_gets_stuck():
    """Queue bounded at 50 (the seed's fix switched off), retransmission off: C drops 101..120,
    replays 121..170 behind a gap that never closes; its table for B only grows as B sends on;
    no_loss reports what C never delivers."""
    net = _join_c({"xmit_interval": 0, "allow_unsafe": True, "become_server_queue_unbounded_without_xmit": False})
    drops = [e for e in net.kinds("drop", "C") if "become_server_queue" in e.get("reason", "")]
    assert [e["seqno"] for e in drops] == list(range(101, 121))
    net.run(1.0)
    sizes = [len(n2(net, "C").tables["B"].msgs)]
    for _ in range(3):
        mcast(net, "B", 20)
        net.run(1.0)
        sizes.append(len(n2(net, "C").tables["B"].msgs))
    assert net.delivered["C"] == []
    assert sizes == [50, 70, 90, 110]  # the window for B at C only grows
    assert n2(net, "C").busy() == ["gap from B: delivered 100, highest 230"]
    lost = checks(net)["no_loss"]
    assert not lost.passed and lost.details["lost"]["B->C"]["count"] == 130


def test_become_server_queue_unbounded_without_retransmission_delivers_all():
    """The seed's fix: with xmit_interval <= 0 the queue is unbounded, and C delivers 101..170."""
    net = _join_c({"xmit_interval": 0, "allow_unsafe": True})
    net.run(1.0)
    assert net.delivered["C"] == [f"B:0:{n}" for n in range(101, 171)]
    assert not [e for e in net.kinds("drop", "C") if "become_server_queue" in e.get("reason", "")]
    assert checks(net)["no_loss"].passed


def test_become_server_queue_bounded_with_retransmission_is_repaired():
    """Queue bounded at 50 with retransmission on: the 20 dropped are asked for and delivered."""
    net = _join_c({"become_server_queue_size": 50})
    net.run(2.0)
    assert net.delivered["C"] == [f"B:0:{n}" for n in range(101, 171)]
    assert checks(net)["no_loss"].passed


def test_xmit_interval_switches_the_task_and_the_queue_bound_at_run_time():
    """SetConfig xmit_interval 0.5 -> 0 -> 0.5: the retransmit task stops and starts again, and a
    gap made while it was off is repaired once it is back."""
    net = mnet({"xmit_interval": 0.5})
    layer = n2(net, "B")
    assert layer.timers.get("xmit") is not None
    for name in ALL:
        net.command(name, SetConfig(values={"xmit_interval": 0}))
    assert layer.timers.get("xmit") is None and not layer.config.retransmission
    net.drop = drop_once(lambda m: n2_type(m, "MSG", 2) and m.dest == "B")
    mcast(net, "A", 5)
    net.run(2.0)
    assert net.delivered["B"] == ids("A", 1) and not net.kinds("xmit_req_tx")
    for name in ALL:
        net.command(name, SetConfig(values={"xmit_interval": 0.5}))
    net.run(2.0)
    assert net.delivered["B"] == ids("A", 5)
    assert net.kinds("config_change", "B")
    # UNICAST3 kept its own retransmit period: xmit_interval is NAKACK2's.
    assert net.stacks["B"].layer(Unicast3).config.xmit_interval == 0.5


def test_header_round_trip_and_hostile_bytes():
    """Every NAKACK2 header type encodes and decodes to itself; truncated or padded bodies are WireErrors."""
    headers = [
        N2Header(MsgType.MSG, 7),
        N2Header(MsgType.HIGHEST_SEQNO, 2**40),
        N2Header(MsgType.XMIT_RSP, 9, orig="A"),
        N2Header(MsgType.NAK_XMIT_REQ, orig="B", ranges=((1, 3), (7, 7))),
        N2Header(MsgType.STABLE, digest=(("A", 3), ("B", 0))),
    ]
    for hdr in headers:
        body = encode(hdr)
        assert decode(body) == hdr
        for bad in (body[:-1], body + b"\0"):
            with pytest.raises(wire.WireError):
                decode(bad)
    msg = Message("A", "B", app_payload("A", 0, 1), {PROTO_ID: headers[3]})
    assert wire.decode_frame(wire.encode_frame("A", [msg]))[1] == [msg]


def test_hostile_seqno_costs_no_memory():
    """A MSG with seqno 2^62 is not kept (beyond the receive window) and the layer's invariants hold."""
    net = mnet()
    net.stacks["B"].receive([Message("A", "B", b"x", {PROTO_ID: N2Header(MsgType.MSG, 2**62)})], net.now)
    net.stacks["B"].check_invariants()
    assert n2(net, "B").retransmit_table_size() == 0


def test_invariants_catch_a_seqno_outside_the_window_after_earlier_checks():
    """check_invariants, which rechecks only what was added since its last call, still fails on a
    seqno kept outside the window: added after checks that passed, or left below a purge."""
    net = mnet()
    for _ in range(3):
        mcast(net, "A", 5)
        net.run(0.05)
    layer = n2(net, "B")
    layer.check_invariants()
    table = layer.tables["A"]
    assert table.msgs and table.low == 0
    msg = next(iter(table.msgs.values()))
    table.msgs[table.delivered + layer.config.max_recv_window_seqnos + 1] = msg  # above the window
    with pytest.raises(AssertionError, match="outside the window"):
        layer.check_invariants()
    del table.msgs[table.delivered + layer.config.max_recv_window_seqnos + 1]
    layer.check_invariants()
    table.msgs[table.low] = msg  # at the purge point: a purged seqno still kept
    with pytest.raises(AssertionError, match="outside the window"):
        layer.check_invariants()
    del table.msgs[table.low]
    layer.check_invariants()
    table.low = 1  # a purge that moved low but left seqno 1 in the table
    with pytest.raises(AssertionError, match="outside the window"):
        layer.check_invariants()


def test_settings_split_between_nakack2_and_unicast3():
    """One flat config: NAKACK2's keys stay, the rest go to UNICAST3; unknown keys name themselves."""
    cfg = Nakack2Config.from_dict({"xmit_interval": 0, "ack_min_interval": 0.2, "unicast3_xmit_interval": 0.3})
    assert cfg.xmit_interval == 0 and cfg.unicast3.ack_min_interval == 0.2 and cfg.unicast3.xmit_interval == 0.3
    assert Nakack2Config.from_dict(cfg.as_dict()) == cfg
    with pytest.raises(ValueError, match="^bogus:"):
        Nakack2Config.from_dict({"bogus": 1})
    stack = build_stack("A", "nakack2", {}, random.Random(1))
    assert [layer.proto for layer in stack.layers] == ["faults", "nakack2", "unicast3"]


# ---- refusals ---------------------------------------------------------------------------------


def _scenario(transport="tcp", config=None, schedule=()):
    return {
        "name": "n",
        "protocol": "nakack2",
        "transport": transport,
        "nodes": 3,
        "config": config or {},
        "workload": [{"from": "all", "to": "all", "rate": 50, "duration": 2}],
        "schedule": list(schedule),
        "duration": 2,
        "settle": 2,
    }


def test_no_retransmission_refused_over_udp_and_with_in_process_drops():
    """xmit_interval <= 0 over UDP or with a drop step is refused at config.xmit_interval, unless allow_unsafe."""
    with pytest.raises(ScenarioError, match=r"config\.xmit_interval.*transport: tcp"):
        parse_scenario(_scenario("udp", {"xmit_interval": 0}))
    drop = {"at": 1.0, "drop": {"at": "B", "from": "A", "type": "MSG", "count": 1}}
    with pytest.raises(ScenarioError, match=r"config\.xmit_interval.*in-process drops"):
        parse_scenario(_scenario("tcp", {"xmit_interval": 0}, [drop]))
    parse_scenario(_scenario("tcp", {"xmit_interval": 0}))
    parse_scenario(_scenario("udp", {"xmit_interval": 0, "allow_unsafe": True}, [drop]))
    parse_scenario(_scenario("udp", {"xmit_interval": 1}, [drop]))


def test_config_step_changes_settings_at_run_time_and_is_checked():
    """A schedule `config` step round-trips; a bad value or an unsafe one names schedule[i].config.set.<key>."""
    steps = [{"at": 1.0, "config": {"at": "B", "set": {"xmit_interval": 0}}}]
    sc = parse_scenario(_scenario("tcp", {"xmit_interval": 0.5}, steps))
    assert sc.schedule[0].describe() == "#0 config at B xmit_interval=0"
    assert parse_scenario(sc.to_dict()).schedule == sc.schedule
    with pytest.raises(ScenarioError, match=r"schedule\[0\]\.config\.set\.xmit_interval: 0 \(no retransmission\)"):
        parse_scenario(_scenario("udp", {"xmit_interval": 0.5}, steps))
    bad = [{"at": 1.0, "config": {"at": "B", "set": {"stable_interval": 0}}}]
    with pytest.raises(ScenarioError, match=r"schedule\[0\]\.config\.set\.stable_interval: must be > 0"):
        parse_scenario(_scenario("tcp", {}, bad))


def test_to_all_is_one_multicast_stream_per_sender():
    """`from: all, to: all` under NAKACK2: one stream per member, to the view; it round-trips as `to: all`."""
    sc = parse_scenario(_scenario())
    assert [(s.src, s.dest) for s in sc.streams] == [("A", "*"), ("B", "*"), ("C", "*")]
    assert parse_scenario(sc.to_dict()).streams == sc.streams


# ---- whole runs in the simulator --------------------------------------------------------------


def _chaos(nodes: int, stable_interval: float = 1.0, seed: int = 3, duration: float = 10.0):
    return parse_scenario(
        {
            "name": f"nakack2-chaos-{nodes}",
            "protocol": "nakack2",
            "transport": "udp",
            "nodes": nodes,
            # STABLE every second (JGroups: about 50 s) so that purging shows in a 10 s run.
            "config": {"xmit_interval": 0.2, "stable_interval": stable_interval, "resend_last_seqno_max_times": 3},
            "workload": [{"from": "all", "to": "all", "rate": 100, "duration": duration}],
            "schedule": [
                {"at": 0.5, "loss": {"link": "*", "p": 0.2}},
                {"at": 0.5, "duplicate": {"link": "*", "p": 0.2}},
                {"at": 0.5, "reorder": {"link": "*", "p": 0.2}},
                {"at": duration, "heal": "all"},
            ],
            "duration": duration,
            "settle": 6,
            "seed": seed,
        }
    )


def _run_sampling(scenario, every: float = 0.5):
    """Run step by step, sampling each node's retransmit table size; returns (result, samples)."""
    sim = Simulation(scenario)
    sim.start()
    for stream in scenario.streams:
        sim.add_stream(stream)
    steps = {step.index: step for step in scenario.schedule}
    pending = sorted(scenario.schedule, key=lambda step: step.at)
    samples: list[tuple[float, int]] = []
    t = 0.0
    while t < scenario.end_time:
        t = min(scenario.end_time, t + every)
        while pending and pending[0].at <= t:
            step = pending.pop(0)
            sim.advance(step.at)
            sim.apply_step(step, steps)
        sim.advance(t)
        sizes = [node.live_stack.layer(Nakack2).retransmit_table_size() for node in sim.nodes.values()]
        samples.append((t, max(sizes)))
    return sim.finish(), samples


@pytest.mark.parametrize("nodes", [3, 5])
def test_all_members_multicasting_under_loss_duplication_and_reordering(nodes):
    """3 and 5 members all multicast 100/s for 10 s under 20 % loss, duplication and reordering on
    every link: every member delivers every multicast exactly once in per-sender order, and STABLE
    keeps the retransmit table bounded (it ends empty)."""
    scenario = _chaos(nodes)
    result, samples = _run_sampling(scenario)
    sent = {}
    for name, events in result.events.items():
        sent[name] = [e["app"] for e in events if e["kind"] == "send" and e["proto"] == "nakack2"]
        assert len(sent[name]) == 1000
    for events in result.events.values():
        got = [e["app"] for e in events if e["kind"] == "deliver" and e["proto"] == "nakack2"]
        for src in scenario.nodes:
            assert [a for a in got if a.startswith(src + ":")] == sent[src]
    verdict = run_checks(result.all_events(), recovery_bound_s=scenario.recovery_bound)
    assert all(r.passed for r in verdict), [r.explanation for r in verdict if not r.passed]
    assert all(e["kind"] != "error" for evs in result.events.values() for e in evs)
    # The chaos was there: multicasts were lost and asked for again.
    kinds = [e["kind"] for evs in result.events.values() for e in evs if e["proto"] == "nakack2"]
    assert kinds.count("xmit_req_tx") > 10 and kinds.count("retransmit") > 10
    # Bounded: at most a few STABLE rounds' worth of messages (100/s per sender), never the total.
    peak = max(size for _, size in samples)
    total = 1000 * nodes
    assert peak < total / 2, samples
    assert samples[-1][1] == 0


def test_without_stable_the_retransmit_table_grows_with_everything_sent():
    """The same run with STABLE effectively off (every 1000 s): each table ends holding every message."""
    scenario = _chaos(3, stable_interval=1000.0, duration=4.0)
    _, samples = _run_sampling(scenario)
    assert samples[-1][1] == 3 * 400
    sizes = [s for t, s in samples if t <= 4.0]
    assert sizes == sorted(sizes)


def test_sim_without_retransmission_over_a_reliable_network():
    """xmit_interval 0 on TCP (delay and jitter, no loss): everything delivered in order, no XMIT-REQ ever."""
    sc = parse_scenario(
        {
            **_scenario("tcp", {"xmit_interval": 0, "stable_interval": 1.0}),
            "workload": [{"from": "all", "to": "all", "rate": 200, "duration": 5}],
            "schedule": [{"at": 0.5, "delay": {"link": "*", "ms": 30, "jitter_ms": 10}}],
            "duration": 5,
        }
    )
    result = simulate(sc)
    kinds = {e["kind"] for evs in result.events.values() for e in evs}
    assert not kinds & {"xmit_req_tx", "retransmit", "highest_seqno_tx"}
    verdict = run_checks(result.all_events(), recovery_bound_s=sc.recovery_bound)
    assert all(r.passed for r in verdict), [r.explanation for r in verdict if not r.passed]
    assert verdict[2].judged == 3 * 2 * 1000  # each multicast owed to the 2 others (loopback not owed)


@pytest.mark.parametrize("xmit_interval", [0.2, 0])
def test_sim_last_message_dropped(xmit_interval):
    """LastMessageDropped as a scenario: B's fault layer drops A's last multicast (seqno 100).
    Repaired with retransmission; without it (allow_unsafe) no_loss fails on A->B, as the NAKACK2 design says."""
    sc = parse_scenario(
        _scenario(
            "tcp",
            {"xmit_interval": xmit_interval, "stable_interval": 1.0, "allow_unsafe": True},
            [{"at": 0.0, "drop": {"at": "B", "from": "A", "type": "MSG", "seqnos": [100, 100]}}],
        )
    )
    result = simulate(sc)
    verdict = {r.name: r for r in run_checks(result.all_events(), recovery_bound_s=sc.recovery_bound)}
    if xmit_interval:
        assert verdict["no_loss"].passed, verdict["no_loss"].explanation
    else:
        assert not verdict["no_loss"].passed
        assert verdict["no_loss"].details["lost"] == {
            "A->B": {"count": 1, "first": ["A:0:100"], "last_deliver_t": pytest.approx(1.98, abs=0.05)}
        }
        assert verdict["fifo"].passed and verdict["no_duplicates"].passed


def test_sim_xmit_interval_switched_off_and_on_under_load_loses_nothing():
    """Over a reliable network, all multicasting 200/s: xmit_interval 0.5 -> 0 at 2 s -> 0.5 at 4 s
    at every node; nothing lost, nothing twice, and no XMIT-REQ while it was off."""
    sc = parse_scenario(
        {
            **_scenario("tcp", {"xmit_interval": 0.5, "stable_interval": 1.0}),
            "workload": [{"from": "all", "to": "all", "rate": 200, "duration": 6}],
            "schedule": [{"at": 0.5, "delay": {"link": "*", "ms": 5, "jitter_ms": 2}}],
            "duration": 6,
        }
    )
    sim = Simulation(sc)
    sim.start()
    for stream in sc.streams:
        sim.add_stream(stream)
    for step in sc.schedule:
        sim.advance(step.at)
        sim.apply_step(step, sc.schedule)
    for at, value in ((2.0, 0), (4.0, 0.5)):
        sim.advance(at)
        for name in sc.nodes:
            sim.set_config(name, {"xmit_interval": value})
    sim.advance(sc.end_time)
    result = sim.finish()
    verdict = run_checks(result.all_events(), recovery_bound_s=sc.recovery_bound)
    assert all(r.passed for r in verdict), [r.explanation for r in verdict if not r.passed]
    assert verdict[2].judged == 3 * 2 * 1200  # each multicast owed to the 2 others (loopback not owed)
    assert len([e for evs in result.events.values() for e in evs if e["kind"] == "config_change"]) == 6
