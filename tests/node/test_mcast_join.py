"""MCAST joins with GMS's digests (the MCAST design): a joiner's windows start at the join
digest, it keeps no window for what arrives before its first view, its own multicasts wait for that
view, and a member that installs the join view after purging past the digest's entry for itself
lets the joiner skip what went to the old view only. Scripted first, then whole simulator runs."""

from __future__ import annotations

import pytest

from splitbrain.harness.checks import run_checks
from splitbrain.harness.scenario import parse_scenario
from splitbrain.harness.sim.simulator import Simulation
from splitbrain.node.layer import Bootstrap, ViewChange
from splitbrain.node.mcast.protocol import Mcast
from splitbrain.node.message import MCAST_DEST
from tests.netlab import Net, from_sender
from tests.netlab import expected as ids

ALL = ("A", "B", "C")
CHECKS = ["fifo", "no_duplicates", "no_loss", "views_agree"]


def mc(net: Net, name: str) -> Mcast:
    return net.stacks[name].layer(Mcast)


def view(net: Net, names, members, view_id: int, digest=()) -> None:
    for name in names:
        net.command(name, ViewChange(members=tuple(members), view_id=view_id, reason="join", digest=tuple(digest)))


def test_a_joiner_keeps_no_window_before_its_first_view_and_holds_its_sends():
    """D (Bootstrap, no view yet) gets A's multicasts 31.. because A already lists it: dropped, no
    window made; D's own multicast waits. The join view (digest A:30) makes the window at 30, D's
    held multicast goes out, and A's resends fill 31.. once D asks."""
    net = Net(names=(*ALL, "D"), config={"xmit_interval": 0.1}, protocol="mcast")
    view(net, ALL, ALL, 1)
    net.send("A", MCAST_DEST, 30)
    net.run(0.5)
    net.command("D", Bootstrap(peers=ALL))
    view(net, ALL, (*ALL, "D"), 2, digest=(("A", 30), ("B", 0), ("C", 0)))
    net.send("A", MCAST_DEST, 5)  # A's 31..35 reach D before its view
    net.send("D", MCAST_DEST, 1)
    net.run(0.05)
    assert mc(net, "D").recv == {} and net.delivered["D"] == []
    assert [e["seqno"] for e in net.kinds("drop", "D", reason="joining: no view yet")] == [31, 32, 33, 34, 35]
    assert not net.kinds("send", "D")
    view(net, ["D"], (*ALL, "D"), 2, digest=(("A", 30), ("B", 0), ("C", 0)))
    assert {s: w.low for s, w in mc(net, "D").recv.items()} == {"A": 30, "B": 0, "C": 0}
    assert net.kinds("send", "D")[0]["members"] == [*ALL, "D"]
    net.send("A", MCAST_DEST, 5)  # 36..40: D learns A's highest and asks for 31..35
    net.run_until_quiet(2.0)
    assert from_sender(net.delivered["D"], "A") == ids("A", 40, start=31)
    assert all(from_sender(net.delivered[n], "D") == ["D:0:1"] for n in ALL)
    assert mc(net, "A").send_window.low == 40


def test_a_member_that_purged_past_its_digest_entry_lets_the_joiner_skip_it():
    """The coordinator's digest says B:5, but B multicast 6..20 to {A, B} and A acked them (purged)
    before B installed the view with C: B's ack-map entry for C starts at its low (20), and C's
    window, made at 5, skips to 20 on B's next MSG and delivers 21.., never asking for 6..20."""
    net = Net(names=ALL, config={"xmit_interval": 0.1}, protocol="mcast")
    view(net, ("A", "B"), ("A", "B"), 1)
    net.send("B", MCAST_DEST, 20)
    net.run_until_quiet(2.0)
    assert mc(net, "B").send_window.low == 20
    net.command("C", Bootstrap(peers=("A", "B")))
    view(net, ("A", "B", "C"), ALL, 2, digest=(("A", 0), ("B", 5)))
    assert mc(net, "B").ack_map["C"] == 20 and mc(net, "C").recv["B"].low == 5
    net.send("B", MCAST_DEST, 3)
    net.run_until_quiet(2.0)
    assert from_sender(net.delivered["C"], "B") == ids("B", 23, start=21)
    assert [e["seqno"] for e in net.kinds("drop", "C", reason="skipped: purged before this member joined")] == [20]
    assert not net.kinds("xmit_req_tx", "C")


# ---- whole runs ---------------------------------------------------------------------------------


def _join_run(protocol: str, seed: int, loss: float = 0.1):
    """D is down from the start and joins at 3 s while A, B, C multicast 100/s each under loss on
    every link; D multicasts 50/s from its restart on. fd_timeout 5 s: no false suspicion under
    this loss, so the run is about the join (a suspicion and its merge are tested elsewhere)."""
    config = {"xmit_interval": 0.2, "fd_timeout": 5.0}
    if protocol == "mcast":
        config["capacity"] = 256
    if protocol == "nakack2":
        config["stable_interval"] = 1.0
    data = {
        "name": f"{protocol}-join",
        "protocol": protocol,
        "membership": "gms",
        "transport": "udp",
        "nodes": ["A", "B", "C", "D"],
        "config": config,
        "workload": [{"from": n, "to": "all", "rate": 100, "duration": 8} for n in ALL]
        + [{"from": "D", "to": "all", "rate": 50, "duration": 5, "start": 3.0}],
        "schedule": [
            {"at": 0.0, "kill": "D"},
            {"at": 0.5, "loss": {"link": "*", "p": loss}},
            {"at": 3.0, "restart": "D"},
            {"at": 8.0, "heal": "all"},
        ],
        "duration": 8,
        "settle": 6,
        "checks": CHECKS,
        "seed": seed,
    }
    scenario = parse_scenario(data)
    return scenario, Simulation(scenario, seed).run().all_events()


def _joins_after(events, node: str, t: float) -> dict:
    return next(e for e in events if e["node"] == node and e["kind"] == "view" and e["proto"] == "gms" and e["t"] >= t)


@pytest.mark.parametrize("protocol", ["mcast", "nakack2"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_joiner_delivers_every_multicast_sent_after_it_joined_under_loss(protocol, seed):
    """D joins a group of three that keeps multicasting under 10 % loss: its join view carries a
    digest entry per sender; from each sender it delivers consecutive seqnos from just above that
    entry (exactly above it from the coordinator, whose entry is its own last seqno) to the last
    one; every multicast a sender sent once its view listed D reaches D, once; D's own multicasts
    reach everyone; every check passes."""
    scenario, events = _join_run(protocol, seed)
    results = run_checks(events, CHECKS, recovery_bound_s=scenario.recovery_bound)
    assert all(r.passed for r in results), [r.explanation for r in results if not r.passed]
    join = _joins_after(events, "D", 3.0)
    assert join["reason"] == "join"
    digest = {item.rsplit(":", 1)[0]: int(item.rsplit(":", 1)[1]) for item in join["digest"]}
    assert set(digest) == set(ALL)
    delivered_at_d = {}
    for e in events:
        if e["node"] == "D" and e["kind"] == "deliver" and e["proto"] == protocol and e["peer"] != "D":
            delivered_at_d.setdefault(e["peer"], []).append(e["seqno"])
    for sender in ALL:
        got = delivered_at_d[sender]
        assert got == list(range(got[0], got[-1] + 1)), f"{sender}->D not consecutive"
        assert got[0] >= digest[sender] + 1
        if sender == join["coord"]:
            assert got[0] == digest[sender] + 1
        # The sender's multicasts once its own view listed D: all delivered at D, once.
        d_in_view = min(
            e["t"]
            for e in events
            if e["node"] == sender and e["kind"] == "view" and e["proto"] == protocol and "D" in e["members"]
        )
        owed = [
            e["app"]
            for e in events
            if e["node"] == sender and e["kind"] == "send" and e["t"] >= d_in_view and "app" in e
        ]
        got_apps = [
            e["app"]
            for e in events
            if e["node"] == "D" and e["kind"] == "deliver" and e.get("peer") == sender and "app" in e
        ]
        assert owed and set(owed) <= set(got_apps) and len(got_apps) == len(set(got_apps))
    d_sends = [e for e in events if e["node"] == "D" and e["kind"] == "send" and e["proto"] == protocol]
    d_sent = [e["app"] for e in d_sends]
    assert d_sent and all(e["t"] >= join["t"] for e in d_sends)  # held until the join view
    for node in ALL:
        got = [
            e["app"]
            for e in events
            if e["node"] == node and e["kind"] == "deliver" and e.get("peer") == "D" and "app" in e
        ]
        assert got == d_sent


@pytest.mark.parametrize("protocol", ["mcast", "nakack2"])
def test_a_restarted_joiner_installs_no_view_meant_for_its_previous_life(protocol):
    """D joins at 1 s; its acks to the coordinator A are cut from 1.5 s, so C's join at 1.7 s leaves
    A retransmitting that VIEW to D; D is killed at 2.2 s and restarted at 2.5 s, multicasting from
    its restart on. D's new life drops the old life's VIEW: its first view is its own join view,
    with a digest, its held multicasts go to that view and reach every member, and every check
    passes (installed, the stale view would have released them to a view of its old life)."""
    config = {"xmit_interval": 0.2, "fd_timeout": 5.0}
    scenario = parse_scenario(
        {
            "name": f"{protocol}-stale-view",
            "protocol": protocol,
            "membership": "gms",
            "nodes": ["A", "B", "C", "D"],
            "config": config,
            "workload": [
                {"from": "A", "to": "all", "rate": 50, "duration": 6},
                {"from": "D", "to": "all", "rate": 50, "duration": 3, "start": 2.5},
            ],
            "schedule": [
                {"at": 0.0, "kill": "C"},
                {"at": 0.0, "kill": "D"},
                {"at": 1.0, "restart": "D"},
                {"at": 1.5, "partition": {"from": "D", "to": "A"}},
                {"at": 1.7, "restart": "C"},
                {"at": 2.2, "kill": "D"},
                {"at": 2.3, "heal": 3},
                {"at": 2.5, "restart": "D"},
            ],
            "duration": 6,
            "settle": 6,
            "checks": CHECKS,
        }
    )
    events = Simulation(scenario, 1).run().all_events()
    results = run_checks(events, CHECKS, recovery_bound_s=scenario.recovery_bound)
    assert all(r.passed for r in results), [r.explanation for r in results if not r.passed]
    life = [e for e in events if e["node"] == "D" and e["t"] >= 2.5]
    assert [e["reason"] for e in life if e["kind"] == "drop" and e["proto"] == "gms"] == [
        "joining: a view for an earlier incarnation"
    ]
    first = next(e for e in life if e["kind"] == "view" and e["proto"] == "gms")
    assert first["reason"] == "join" and first["members"] == ["A", "B", "C", "D"] and first["digest"]
    d_sends = [e for e in life if e["kind"] == "send" and e["proto"] == protocol]
    assert d_sends and all(e["members"] == ["A", "B", "C", "D"] for e in d_sends)
    for node in ("A", "B", "C"):
        got = [
            e["app"]
            for e in events
            if e["node"] == node and e["kind"] == "deliver" and e["proto"] == protocol and e.get("peer") == "D"
        ]
        assert got == [e["app"] for e in d_sends], node


@pytest.mark.parametrize("protocol", ["mcast", "nakack2"])
def test_a_restarted_member_multicasts_only_once_every_member_installed_its_join_view(protocol):
    """D is killed at 1.5 s and restarted at 1.8 s, before anyone suspects it: its coordinator A
    installs a view without D's old life and one with the new. A->C is cut 1.7-2.4 s, so C gets
    those views late; D multicasts from 2.0 s. A sends D its JOIN_RSP only once C acknowledged the
    join view, so D's first multicasts never reach a C that still lists D's old life (C would take
    them into that life's table, then start a new one at the join view and deliver them again).
    C's view comes about 1 s after the heal (UNICAST3 resends A's highest), so A waits up to 3 s."""
    config = {"xmit_interval": 0.2, "fd_timeout": 5.0, "view_ack_collection_timeout": 3.0}
    scenario = parse_scenario(
        {
            "name": f"{protocol}-rejoin-late-view",
            "protocol": protocol,
            "membership": "gms",
            "nodes": ["A", "B", "C", "D"],
            "config": config,
            "workload": [
                {"from": "A", "to": "all", "rate": 50, "duration": 5},
                {"from": "D", "to": "all", "rate": 50, "duration": 3, "start": 2.0},
            ],
            "schedule": [
                {"at": 1.5, "kill": "D"},
                {"at": 1.7, "partition": {"from": "A", "to": "C"}},
                {"at": 1.8, "restart": "D"},
                {"at": 2.4, "heal": 1},
            ],
            "duration": 5,
            "settle": 6,
            "checks": CHECKS,
        }
    )
    events = Simulation(scenario, 1).run().all_events()
    results = run_checks(events, CHECKS, recovery_bound_s=scenario.recovery_bound)
    assert all(r.passed for r in results), [r.explanation for r in results if not r.passed]
    rejoin = [e for e in events if e["node"] == "C" and e["kind"] == "view" and e["proto"] == "gms" and e["t"] > 1.8]
    assert [e["reason"] for e in rejoin][:2] == ["leave", "join"] and rejoin[1]["t"] > 2.4
    rsp = next(e for e in events if e["node"] == "A" and e["kind"] == "join_rsp_tx" and e["t"] > 1.8)
    assert rsp["t"] >= rejoin[1]["t"]
    d_sends = [e["app"] for e in events if e["node"] == "D" and e["kind"] == "send" and e["proto"] == protocol]
    assert d_sends
    for node in ("A", "B", "C"):
        got = [
            e["app"]
            for e in events
            if e["node"] == node and e["kind"] == "deliver" and e["proto"] == protocol and e.get("peer") == "D"
        ]
        assert got == d_sends, node
