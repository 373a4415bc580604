"""NAKACK2 under GMS (the NAKACK2 design): join and merge digests asked of the multicast layer
through the stack, BecomeServer after the first view, joiners that hold their sends and queue what
arrives, senders that catch a joiner up past the digest; then whole runs in the simulator."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from splitbrain.harness.checks import run_checks
from splitbrain.harness.scenario import load_scenario, parse_scenario
from splitbrain.harness.sim.simulator import Simulation
from splitbrain.node.compose import build_stack
from splitbrain.node.gms.gms import Gms
from splitbrain.node.layer import BecomeServer, Bootstrap, GetDigest, Layer, Query, ViewChange
from splitbrain.node.message import MCAST_DEST, Message, app_payload
from splitbrain.node.nakack2.config import Nakack2Config
from splitbrain.node.nakack2.header import PROTO_ID, MsgType, N2Header
from splitbrain.node.nakack2.protocol import Nakack2
from splitbrain.node.stack import Stack

BUGS = Path(__file__).resolve().parents[2] / "scenarios" / "bugs"


def layer(name: str = "B", **config) -> Nakack2:
    return Nakack2(
        name, Nakack2Config.from_dict({"xmit_interval": 0, "allow_unsafe": True, **config}), random.Random(1)
    )


def mcast_msg(src: str, n: int) -> Message:
    return Message(src, MCAST_DEST, app_payload(src, 0, n, 20))


def data_from(src: str, seqno: int, dest: str = "C") -> Message:
    """A MSG from `src` numbered `seqno`, as its NAKACK2 would send it to `dest`."""
    sender = layer(src)
    sender.command(ViewChange(members=("A", "B", "C"), view_id=1), 0.0)
    sender.seqno = seqno - 1
    out = sender.down(mcast_msg(src, seqno), 0.0)
    return next(a.msg for a in out if type(a).__name__ == "Down" and a.msg.dest == dest)


def downs(actions) -> list[Message]:
    return [a.msg for a in actions if type(a).__name__ == "Down"]


# ---- the query through the stack ---------------------------------------------------------------


class Asker(Layer):
    proto = "asker"


class Answerer(Layer):
    proto = "answerer"

    def __init__(self, value):
        self.value = value

    def answer(self, query: Query):
        return self.value if isinstance(query, GetDigest) else None


def test_the_stack_routes_a_query_to_the_other_layers_and_the_first_answer_wins():
    """GetDigest asked by one layer: the others answer top first, None means 'not mine'; a layer
    outside any stack gets None."""
    asker = Asker()
    assert asker.ask(GetDigest()) is None
    Stack("A", [Answerer((("B", 2),)), Answerer(None), asker, Answerer((("B", 9),))])
    assert asker.ask(GetDigest()) == (("B", 9),)
    lone = Asker()
    Stack("A", [lone, Answerer(None)])
    assert lone.ask(GetDigest()) is None


def test_nakack2_answers_the_highest_seqno_it_knows_per_sender_and_a_unicast_stack_nothing():
    """NAKACK2's digest: its own last seqno, each other sender's highest received; GMS over
    UNICAST3 alone gets no digest."""
    stack = build_stack("A", "nakack2", {"xmit_interval": 0, "allow_unsafe": True}, random.Random(1), membership="gms")
    gms = stack.layer(Gms)
    n2 = stack.layer(Nakack2)
    n2.command(ViewChange(members=("A", "B", "C"), view_id=1), 0.0)
    n2.down(mcast_msg("A", 1), 0.0)
    n2.down(mcast_msg("A", 2), 0.0)
    n2.up([data_from("B", 1, "A"), data_from("B", 3, "A")], 0.0)
    assert gms.ask(GetDigest()) == (("A", 2), ("B", 3))
    assert gms._digest(("A", "C")) == (("A", 2),)
    u3 = build_stack("A", "unicast3", {}, random.Random(1), membership="gms")
    assert u3.layer(Gms).ask(GetDigest()) is None and u3.layer(Gms)._digest(("A",)) == ()


# ---- the joiner ----------------------------------------------------------------------------------


def test_a_joiner_holds_its_sends_and_queues_receipts_until_become_server():
    """After Bootstrap, C's multicasts are held (no seqno spent) and B's are queued; the join view
    starts C's table for B at the digest (B:4), BecomeServer replays 5 and 6, then sends C's held
    multicast as seqno 1 to the view."""
    c = layer("C")
    c.command(Bootstrap(peers=("A", "B", "C")), 0.0)
    assert c.down(mcast_msg("C", 1), 0.1) == [] and c.seqno == 0
    assert c.up([data_from("B", 5), data_from("B", 6)], 0.2) == []
    c.command(ViewChange(members=("A", "B", "C"), view_id=3, reason="join", digest=(("A", 0), ("B", 4))), 0.3)
    assert not c.is_server and c.tables["B"].delivered == 4
    out = c.command(BecomeServer(), 0.3)
    delivered = [m.app for a in out if type(a).__name__ == "Up" for m in a.msgs]
    assert delivered == ["B:0:5", "B:0:6", "C:0:1"]
    sent = downs(out)
    assert sorted(m.dest for m in sent) == ["A", "B"] and {m.headers[PROTO_ID].seqno for m in sent} == {1}
    assert c.is_server and not c.held and not c.queue


def test_a_joiner_takes_no_stable_digest_before_its_first_view():
    """A restarted D, joining, gets A's STABLE digest gossiped in the old view, whose entry D:114
    counted D's earlier incarnation: kept, it would purge D's new multicasts 1-114 before A (whose
    new table for D starts at 0) got them. A joiner keeps none; after its join view, digests count."""
    c = layer("C")
    c.command(Bootstrap(peers=("A", "B", "C")), 0.0)
    c.command(ViewChange(members=("A", "B", "C"), view_id=5, reason="join", digest=(("A", 10), ("B", 10))), 0.1)
    c.command(BecomeServer(), 0.1)
    fresh = layer("D")
    fresh.command(Bootstrap(peers=("A", "B", "C", "D")), 0.0)
    stale = Message("A", "D", b"", {PROTO_ID: N2Header(MsgType.STABLE, digest=(("A", 10), ("D", 114)))})
    fresh.up([stale], 0.3)
    assert fresh.digests == {}  # the joiner kept nothing of a view it is not in
    stable = Message("A", "C", b"", {PROTO_ID: N2Header(MsgType.STABLE, digest=(("C", 2),))})
    c.up([stable], 0.4)
    assert c.digests["A"] == {"C": 2}  # a member of C's view: counted


def test_gms_announces_become_server_once_after_the_first_view():
    """A GMS stack: NAKACK2 is a client from Bootstrap until the first view GMS installs (here a
    singleton), then a server; later views announce nothing more."""
    stack = build_stack("A", "nakack2", {}, random.Random(1), membership="gms")
    stack.command(Bootstrap(peers=("A",)), 0.0)
    assert not stack.layer(Nakack2).is_server
    stack.on_timer(0.0)
    _, _, events = stack.take()
    assert [e["kind"] for e in events if e["kind"] in ("view", "become_server")] == ["view", "view", "become_server"]
    assert stack.layer(Nakack2).is_server and stack.layer(Gms).served


# ---- existing members ---------------------------------------------------------------------------


def test_a_sender_catches_a_joiner_up_on_what_it_sent_after_the_digest():
    """B sent 5 to {A, B}; the coordinator's digest says B:3 (4 and 5 were in flight to it): when
    B installs the view with C it sends C 4 and 5 as retransmissions (reason catch_up)."""
    b = layer("B")
    b.command(ViewChange(members=("A", "B"), view_id=1), 0.0)
    for n in range(1, 6):
        b.down(mcast_msg("B", n), 0.0)
    out = b.command(ViewChange(members=("A", "B", "C"), view_id=2, reason="join", digest=(("A", 0), ("B", 3))), 1.0)
    sent = downs(out)
    assert [(m.dest, m.headers[PROTO_ID].type, m.headers[PROTO_ID].seqno) for m in sent] == [
        ("C", MsgType.XMIT_RSP, 4),
        ("C", MsgType.XMIT_RSP, 5),
    ]
    assert [e.event["reason"] for e in out if type(e).__name__ == "Log" and e.event["kind"] == "retransmit"] == [
        "catch_up",
        "catch_up",
    ]


def test_a_merge_digest_skips_what_went_to_a_view_without_this_member_and_leavers_lose_their_table():
    """C delivered B's 1-2 and holds 6; the merge digest says B:5: C skips 3-5 and delivers 6. A
    view without B drops C's table for B; B coming back starts from the next digest."""
    c = layer("C")
    c.command(ViewChange(members=("A", "B", "C"), view_id=1), 0.0)
    c.up([data_from("B", 1), data_from("B", 2), data_from("B", 6)], 0.0)
    assert c.tables["B"].delivered == 2
    out = c.command(ViewChange(members=("A", "B", "C"), view_id=5, reason="merge", digest=(("B", 5),)), 1.0)
    assert [m.app for a in out if type(a).__name__ == "Up" for m in a.msgs] == ["B:0:6"]
    assert c.tables["B"].delivered == 6
    c.command(ViewChange(members=("A", "C"), view_id=6, reason="suspect"), 2.0)
    assert "B" not in c.tables
    c.command(ViewChange(members=("A", "C", "B"), view_id=7, reason="join", digest=(("A", 0), ("B", 0))), 3.0)
    assert c.tables["B"].delivered == 0


# ---- whole runs ---------------------------------------------------------------------------------


def _events(path_or_data, seed=None):
    sc = load_scenario(path_or_data) if isinstance(path_or_data, Path) else parse_scenario(path_or_data)
    return Simulation(sc, sc.seed if seed is None else seed).run().all_events()


def _of(events, node, kind):
    return [e for e in events if e["node"] == node and e["kind"] == kind]


def test_seed_003_become_server_queue_at_scenario_level():
    """C joins {A, B} while B multicasts; its JOIN_RSP is held 800 ms. Bounded (50, no
    retransmission): C queues 70, drops the 20 oldest, replays 50 onto a table at the digest and
    delivers nothing more of B: no_loss names B->C and the ids. Unbounded: all 70 replayed, all pass."""
    bounded = _events(BUGS / "nakack2-become-server-queue-bounded.yaml")
    view = next(e for e in _of(bounded, "C", "view") if e["proto"] == "gms")
    assert view["reason"] == "join" and view["digest"] == ["A:0", "B:100"]
    assert [e["count"] for e in _of(bounded, "C", "become_server")] == [50]
    full = [e for e in _of(bounded, "C", "drop") if "become_server_queue" in e.get("reason", "")]
    assert [e["seqno"] for e in full] == list(range(101, 121))
    no_loss = {r.name: r for r in run_checks(bounded, recovery_bound_s=2.0)}["no_loss"]
    assert not no_loss.passed
    assert no_loss.details["lost"]["B->C"]["count"] == 70
    assert no_loss.details["lost"]["B->C"]["first"][:2] == ["B:0:101", "B:0:102"]
    fixed = _events(BUGS / "nakack2-become-server-queue.yaml")
    assert [e["count"] for e in _of(fixed, "C", "become_server")] == [70]
    assert [e["app"] for e in _of(fixed, "C", "deliver") if "app" in e] == [f"B:0:{n}" for n in range(101, 171)]
    assert all(r.passed for r in run_checks(fixed, recovery_bound_s=2.0))


def _gms(schedule, workload, config=None, nodes=("A", "B", "C"), transport="tcp"):
    return {
        "name": "nakack2-gms",
        "protocol": "nakack2",
        "membership": "gms",
        "transport": transport,
        "nodes": list(nodes),
        "config": {"stable_interval": 1.0, **(config or {"xmit_interval": 0})},
        "workload": workload,
        "schedule": schedule,
        "duration": 12,
        "settle": 6,
        "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced", "views_agree"],
        "seed": 5,
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_member_multicasting_while_the_coordinator_is_killed_and_rejoins(seed):
    """All multicast, no retransmission over TCP; A (coordinator) killed at 3, restarted at 7: its
    new incarnation joins with a digest, the others' tables for it start afresh; every check passes."""
    data = _gms(
        [{"at": 3.0, "kill": "A"}, {"at": 7.0, "restart": "A"}],
        [{"from": "all", "to": "all", "rate": 50, "duration": 12}],
    )
    events = _events(data, seed)
    results = run_checks(events, data["checks"], recovery_bound_s=2.0)
    assert all(r.passed for r in results), [r.explanation for r in results if not r.passed]
    joins = [e for e in _of(events, "A", "view") if e["proto"] == "gms" and e["t"] > 7.0]
    assert joins[0]["reason"] == "join" and joins[0]["digest"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_multicasting_through_a_two_way_split_and_the_merge(seed):
    """5 members over UDP with retransmission, three multicasting; [A, B] | [C, D, E] for 6 s, then
    the merge view (with the combined digest): every check passes."""
    data = _gms(
        [{"at": 2.0, "partition": [["A", "B"], ["C", "D", "E"]]}, {"at": 8.0, "heal": "all"}],
        [{"from": n, "to": "all", "rate": 40, "duration": 12} for n in ("A", "B", "D")],
        config={"xmit_interval": 0.5},
        nodes=("A", "B", "C", "D", "E"),
        transport="udp",
    )
    events = _events(data, seed)
    results = run_checks(
        events, data["checks"], recovery_bound_s=Nakack2Config(xmit_interval=0.5, stable_interval=1.0).recovery_bound_s
    )
    assert all(r.passed for r in results), [r.explanation for r in results if not r.passed]
    merged = [e for e in events if e["kind"] == "view" and e.get("reason") == "merge"]
    assert merged and all(e["digest"] for e in merged)


def test_unicast_stacks_keep_empty_digests():
    """GMS over UNICAST3 (gms-coordinator-restart): no view carries a digest, no become_server."""
    events = _events(Path(__file__).resolve().parents[2] / "scenarios" / "gms-coordinator-restart.yaml")
    assert [e for e in events if e["kind"] == "view"] and not [e for e in events if "digest" in e]
    assert not [e for e in events if e["kind"] == "become_server"]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_member_restarted_faster_than_fd_timeout_rejoins_as_a_new_incarnation(seed):
    """C, multicasting, is killed at 3.0 and back at 3.5 (fd_timeout 2 s: still in the view). Its
    JOIN_REQ carries incarnation 1, so the coordinator installs a view without C (reason leave),
    then one with it (join, no entry for C in the digest): the others' tables for C start afresh
    and C's new seqnos 1, 2... are delivered, not dropped as duplicates of the old incarnation's."""
    data = _gms(
        [{"at": 3.0, "kill": "C"}, {"at": 3.5, "restart": "C"}],
        [{"from": "all", "to": "all", "rate": 50, "duration": 8}],
    )
    data["duration"], data["settle"] = 8, 5
    events = _events(data, seed)
    results = run_checks(events, data["checks"], recovery_bound_s=2.0)
    assert all(r.passed for r in results), [r.explanation for r in results if not r.passed]
    views = [(e["reason"], e["members"]) for e in _of(events, "A", "view") if e["proto"] == "gms" and e["t"] > 3.0]
    assert views[:2] == [("leave", ["A", "B"]), ("join", ["A", "B", "C"])]
    join = next(e for e in _of(events, "A", "view") if e["proto"] == "gms" and e["t"] > 3.0 and e["reason"] == "join")
    assert not [d for d in join["digest"] if d.startswith("C:")]
    dups = [e for e in events if e["kind"] == "drop" and e.get("reason") == "duplicate" and e.get("peer") == "C"]
    assert not [e for e in dups if e["proto"] == "nakack2"]


def test_a_repeated_join_req_of_the_same_incarnation_changes_no_view():
    """The coordinator answers a second JOIN_REQ from the incarnation it already added with the
    current view; a JOIN_REQ with another incarnation makes the leave and join views."""
    from splitbrain.node.gms.config import GmsConfig
    from splitbrain.node.gms.header import GmsHeader, GmsType

    gms = Gms("A", GmsConfig())
    gms._install(0.0, ("A",), 1, "singleton")
    gms._on_join_req("C", GmsHeader(GmsType.JOIN_REQ, merge_id=0), 1.0)
    assert gms.members == ("A", "C") and gms.view_id == 2
    gms._on_join_req("C", GmsHeader(GmsType.JOIN_REQ, merge_id=0), 1.5)
    assert gms.view_id == 2
    out = gms._on_join_req("C", GmsHeader(GmsType.JOIN_REQ, merge_id=1), 2.0)
    reasons = [a.event["reason"] for a in out if type(a).__name__ == "Log" and a.event["kind"] == "view"]
    assert reasons == ["leave", "join"] and gms.view_id == 4 and gms.members == ("A", "C")
