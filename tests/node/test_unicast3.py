"""UNICAST3 (the UNICAST3 design) rule by rule, with scripted time and chosen losses."""

import pytest

from splitbrain.harness.checks import run_checks
from splitbrain.node.entries import ConnStateError
from splitbrain.node.layer import SyncPeer, ViewChange
from splitbrain.node.unicast3 import PROTO_ID, MsgType, U3Header, Unicast3Config
from splitbrain.node.unicast3.entries import ConnState, next_state
from tests.netlab import Net, expected, is_type, once


def test_steady_stream_in_order_exactly_once():
    """Steady state: 200 messages arrive in order, once, and the sender ends fully acked."""
    net = Net()
    for _ in range(20):
        net.send("A", "B", 10)
        net.run(0.01)
    net.run_until_quiet(2.0)
    assert net.delivered["B"] == expected("A", 200)
    entry = net.u3("A").send_table["B"]
    assert entry.ha == entry.hs == 200 and not entry.msgs
    assert all(r.passed for r in run_checks(net.final_events())), run_checks(net.final_events())


def test_first_message_lost_is_delivered():
    """The first DATA (first=true) is lost: the receiver syncs and still delivers 1..5 in order."""
    net = Net()
    net.drop = once(lambda m: is_type(m, "DATA", 1))
    net.send("A", "B", 1)
    net.run(0.01)
    net.send("A", "B", 4)
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 5)


@pytest.mark.parametrize("resync", ["sync", "timestamp", "first_seqno"])
def test_first_message_lost_every_resync_mode(resync):
    """The first DATA is lost under each resync mode: all three recover every message."""
    net = Net(config={"resync": resync})
    net.drop = once(lambda m: is_type(m, "DATA", 1))
    net.send("A", "B", 5)
    net.run_until_quiet(10.0)
    assert net.delivered["B"] == expected("A", 5)


def test_last_message_lost_is_resent_as_highest_sent():
    """The last DATA is lost: after two retransmit runs with HA<HS unchanged the sender resends HS."""
    net = Net()
    net.connect("A", "B")  # the connection's SYNC is done: A has sent 1, B acked it
    t0 = net.now
    net.drop = once(lambda m: is_type(m, "DATA", 5))
    net.send("A", "B", 4)
    t = net.run_until_quiet(3.0)
    assert net.delivered["B"] == expected("A", 5)
    resent = net.kinds("retransmit", "A", reason="highest_sent")
    assert [e["seqno"] for e in resent] == [5]
    # A run records (HA,HS), the next sees it unchanged: within three runs of the loss, whatever
    # the phase of the retransmit task.
    assert resent[0]["t"] - t0 <= 1.55 and t - t0 < 1.7


def test_lost_message_in_middle_of_batch_is_requested():
    """One message in the middle of a batch is lost: an XMIT-REQ fetches it, order is kept."""
    net = Net()
    net.drop = once(lambda m: is_type(m, "DATA", 5))
    net.send("A", "B", 10)
    net.run_until_quiet(3.0)
    assert net.delivered["B"] == expected("A", 10)
    reqs = net.kinds("xmit_req_tx", "B")
    assert reqs and reqs[0]["ranges"] == [[5, 5]]


def test_xmit_req_only_for_gaps_seen_on_previous_run():
    """A gap is asked for only when the previous retransmit run already saw it (JGroups refinement)."""
    net = Net()
    net.drop = lambda m: is_type(m, "DATA", 3)  # 3 never arrives while the filter is on
    net.send("A", "B", 5)
    net.run(0.55)  # first run at 0.5 sees the gap
    assert not net.kinds("xmit_req_tx", "B")
    net.run(0.5)  # second run asks
    assert net.kinds("xmit_req_tx", "B")[0]["ranges"] == [[3, 3]]
    net.drop = None
    net.run_until_quiet(2.0)
    assert net.delivered["B"] == expected("A", 5)


def test_xmit_req_is_bounded():
    """An XMIT-REQ asks for at most max_xmit_req_seqnos seqnos."""
    net = Net(config={"max_xmit_req_seqnos": 10})
    net.drop = lambda m: is_type(m, "DATA") and 2 <= m.headers[3].seqno <= 50
    net.send("A", "B", 51)
    net.run(1.1)
    req = net.kinds("xmit_req_tx", "B")[0]
    assert req["count"] == 10 and req["ranges"] == [[2, 11]]
    net.drop = None
    net.run_until_quiet(10.0)
    assert net.delivered["B"] == expected("A", 51)


def test_lost_ack_recovered_by_resend_and_reack():
    """The only ACK is lost: the sender resends HS, the duplicate is re-acked, the window drains."""
    net = Net()
    net.drop = once(lambda m: is_type(m, "ACK"))
    net.send("A", "B", 3)
    net.run_until_quiet(3.0)
    assert net.delivered["B"] == expected("A", 3)
    assert net.kinds("drop", "B", reason="duplicate")
    assert len(net.kinds("ack_tx", "B")) == 2


def test_acks_are_merged_within_min_interval_and_latest_is_sent():
    """Acks within ack_min_interval merge; the latest goes out when the interval ends, none lost."""
    net = Net(config={"ack_min_interval": 0.2, "xmit_interval": 5.0})
    net.connect("A", "B")
    net.run(0.5)
    t0, before = net.now, len(net.kinds("ack_tx", "B"))
    for _ in range(10):
        net.send("A", "B", 1)
        net.run(0.01)
    net.run(0.3)
    acks = net.kinds("ack_tx", "B")[before:]
    # One immediate ack (the interval had elapsed) and one merged ack 0.2 s later for the rest.
    assert [a["seqno"] for a in acks] == [2, 11]
    assert acks[1]["t"] - t0 == pytest.approx(0.2, abs=0.002)
    assert net.u3("A").send_table["B"].ha == 11


def test_ack_threshold_acks_a_large_batch_at_once():
    """A batch of ack_threshold messages is acked at once even inside the min interval."""
    net = Net(config={"ack_min_interval": 1.0, "ack_threshold": 20})
    net.send("A", "B", 1)
    net.run(0.01)
    net.send("A", "B", 25)
    net.run(0.01)
    acks = net.kinds("ack_tx", "B")
    assert [a["seqno"] for a in acks] == [1, 26]


def test_batch_inserts_first_message_first():
    """A batch whose first=true message is not at its head still creates the window from it."""
    net = Net(config={"resync": "first_seqno"})
    stack_a = net.stacks["A"]
    from splitbrain.node.message import Message, app_payload

    for n in (1, 2, 3):
        stack_a.send(Message("A", "B", app_payload("A", 0, n)), 0.0)
    msgs, _, _ = stack_a.take()
    net.stacks["B"].receive([msgs[1], msgs[2], msgs[0]], 0.001)
    _, to_app, events = net.stacks["B"].take()
    assert [m.app for m in to_app] == expected("A", 3)
    assert not [e for e in events if e["kind"] == "drop"]


def test_conn_ids_differ_across_restart():
    """A node restarted on the same address never reuses a conn-id of its previous life."""
    net = Net(seed=7)
    net.send("A", "B", 1)
    first = net.u3("A").send_table["B"].conn_id
    for _ in range(5):
        net.start("A")
        net.send("A", "B", 1)
        assert net.u3("A").send_table["B"].conn_id != first


def test_sender_restart_resyncs_receiver():
    """The sender restarts (new conn-id, seqnos from 1): the receiver takes the new connection."""
    net = Net()
    net.send("A", "B", 5)
    net.run_until_quiet(2.0)
    net.start("A")
    net._n[("A", "B")] = 100  # new app ids for the new life
    net.send("A", "B", 5)
    net.run_until_quiet(5.0)
    assert net.delivered["B"][-5:] == [f"A:0:{i}" for i in range(101, 106)]
    assert net.u3("B").recv_table["A"].conn_id == net.u3("A").send_table["B"].conn_id


# ---- connection states and reaping ---------------------------------------------------------


def test_connection_reaping_open_closing_closed_and_close():
    """Idle: OPEN -> CLOSING after conn_expiry_timeout, CLOSED after conn_close_timeout, CLOSE sent."""
    net = Net(config={"conn_expiry_timeout": 2.0, "conn_close_timeout": 1.0})
    net.send("A", "B", 3)
    net.run(2.6)
    assert net.u3("A").send_table["B"].state is ConnState.CLOSING
    net.run(1.5)
    assert "B" not in net.u3("A").send_table
    assert net.kinds("close_tx", "A") and net.kinds("close_rx", "B")
    states = [(e["side"], e["state"], e["reason"]) for e in net.kinds("conn_state", "A")]
    assert states == [
        ("send", "OPEN", "created"),
        ("send", "OPEN", "sync: new conn_id"),
        ("send", "CLOSING", "expired"),
        ("send", "CLOSED", "close_timeout"),
    ]
    # B's receive window was removed by the CLOSE (or its own reaping), never left dangling.
    assert "A" not in net.u3("B").recv_table


def test_send_on_closing_reopens():
    """Sending on a CLOSING connection sets it back to OPEN with the same conn-id."""
    net = Net(config={"conn_expiry_timeout": 1.0, "conn_close_timeout": 5.0})
    net.send("A", "B", 1)
    net.run(1.6)
    entry = net.u3("A").send_table["B"]
    assert entry.state is ConnState.CLOSING
    conn = entry.conn_id
    net.send("A", "B", 1)
    assert entry.state is ConnState.OPEN and entry.conn_id == conn
    net.run_until_quiet(2.0)
    assert net.delivered["B"] == expected("A", 2)


def test_unacked_messages_are_flushed_while_closing():
    """A connection closed by a view keeps retransmitting its unacked messages until they land."""
    net = Net(config={"conn_close_timeout": 4.0})
    net.blocked.add(("A", "B"))
    net.send("A", "B", 3)
    net.command("A", ViewChange(members=("A",), view_id=2))
    assert net.u3("A").send_table["B"].state is ConnState.CLOSING
    net.run(0.4)
    net.blocked.clear()
    net.run(2.0)
    assert net.delivered["B"] == expected("A", 3)
    net.run(0.6)  # the last ack waits out ack_min_interval
    assert net.u3("A").send_table["B"].ha == 3
    net.run(1.5)
    assert "B" not in net.u3("A").send_table  # closed after the flush, at conn_close_timeout


def test_transition_table_rejects_unlisted_pairs():
    """An unlisted (state, cause) pair is a protocol error, never a silent fall-through."""
    assert next_state(ConnState.OPEN, "expired") is ConnState.CLOSING
    with pytest.raises(ConnStateError):
        next_state(ConnState.CLOSED, "send")


# ---- SYNC (the SYNC design) -----------------------------------------------------------------------


def test_sync_after_receiver_loses_its_window():
    """B restarts (no window for A): SYNC / SYNC-OK / SYNC-ACK, then B gets A's unacked messages."""
    net = Net()
    net.connect("A", "B")
    net.blocked.add(("B", "A"))  # A never hears B's acks: messages stay unacked
    net.send("A", "B", 4)
    net.run(0.1)
    net.start("B")  # B forgets everything
    net.blocked.clear()
    net.send("A", "B", 2)
    net.run_until_quiet(5.0)
    phases = [(e["node"], e["phase"]) for e in net.kinds("sync_tx")]
    assert phases[3:6] == [("B", "sync"), ("A", "sync_ok"), ("B", "sync_ack")]
    assert net.delivered["B"] == expected("A", 7, start=2)  # B's new life gets everything unacked
    a, b = net.u3("A").send_table["B"], net.u3("B").recv_table["A"]
    assert a.conn_id == b.conn_id and b.delivered == a.hs == a.ha == 7


def test_sent_events_carry_their_bytes():
    """Every message a node sends is logged with its size: DATA and retransmissions with their
    payload, control messages with their UNICAST3 header (what the pipeline's overhead sums)."""
    from splitbrain.node.unicast3.header import MsgType, U3Header, encode

    net = Net()
    net.blocked.add(("B", "A"))  # no acks: A retransmits
    net.send("A", "B", 5, size=30)
    net.run(1.2)
    net.start("B")  # B forgets A's window: SYNC exchange
    net.blocked.clear()
    net.run_until_quiet(5.0)
    assert {e["bytes"] for e in net.kinds("send") + net.kinds("retransmit")} == {30}
    assert net.kinds("retransmit")
    ack = net.kinds("ack_tx")[0]
    header = U3Header(MsgType.ACK, ack["seqno"], ack["conn_id"])
    assert ack["bytes"] == len(encode(header)) > 0
    phases = {e["phase"]: e["bytes"] for e in net.kinds("sync_tx")}
    assert set(phases) == {"sync", "sync_ok", "sync_ack"} and all(b > 0 for b in phases.values())


@pytest.mark.parametrize("lost", ["SYNC", "SYNC_OK", "SYNC_ACK"])
def test_sync_messages_are_resent_when_lost(lost):
    """Each of SYNC, SYNC-OK, SYNC-ACK lost once: the retransmit task resends it and sync completes."""
    net = Net()
    net.blocked.add(("B", "A"))
    net.send("A", "B", 3)
    net.run(0.1)
    net.start("B")
    net.blocked.clear()
    net.drop = once(lambda m: is_type(m, lost))
    net.send("A", "B", 1)
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 4)
    assert net.u3("A").send_table["B"].conn_id == net.u3("B").recv_table["A"].conn_id


def test_stale_ack_during_sync_is_discarded():
    """ACKs from B are ignored between SYNC and SYNC-ACK, and old-conn-id ACKs forever after."""
    net = Net(config={"ack_min_interval": 0.0})
    net.send("A", "B", 3)
    net.run_until_quiet(1.0)
    net.drop = lambda m: is_type(m, "SYNC_ACK")  # keep A in the awaiting state
    net.command("B", SyncPeer(peer="A"))
    net.run(0.05)
    assert net.u3("A").send_table["B"].awaiting_sync_ack
    net.send("A", "B", 2)
    net.run(0.05)
    assert net.kinds("drop", "A", type="ACK", reason="awaiting SYNC-ACK") or any(
        "stale conn_id" in e["reason"] for e in net.kinds("drop", "A", type="ACK")
    )
    net.drop = None
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 5)


def test_admin_sync_on_live_window_redelivers_nothing():
    """sync(peer) on a healthy connection re-keys the conn-id and delivers nothing twice."""
    net = Net()
    net.send("A", "B", 5)
    net.run_until_quiet(1.0)
    old = net.u3("B").recv_table["A"].conn_id
    net.command("B", SyncPeer(peer="A"))
    net.send("A", "B", 5)
    net.run_until_quiet(3.0)
    assert net.delivered["B"] == expected("A", 10)
    assert net.u3("B").recv_table["A"].conn_id != old
    assert net.u3("B").recv_table["A"].conn_id == net.u3("A").send_table["B"].conn_id


def test_sync_gives_up_after_timeout():
    """A SYNC to a sender that never answers stops after sync_timeout."""
    net = Net(config={"sync_timeout": 2.0})
    net.blocked.add(("B", "A"))
    net.command("B", SyncPeer(peer="A"))
    net.run(3.0)
    assert net.kinds("sync_timeout", "B")
    assert not net.u3("B")._syncs
    assert 3 <= len(net.kinds("sync_tx", "B", phase="sync")) <= 6


def test_admin_sync_needs_sync_mode():
    """sync(peer) is refused (a local error) under resync modes that have no SYNC."""
    net = Net(config={"resync": "timestamp"})
    with pytest.raises(ValueError, match="resync: sync"):
        net.command("B", SyncPeer(peer="A"))


# ---- config ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, field",
    [
        ({"xmit_interval": 0}, "xmit_interval"),
        ({"resync": "magic"}, "resync"),
        ({"ack_threshold": "x"}, "ack_threshold"),
        ({"conn_close_timeout": -1}, "conn_close_timeout"),
        ({"bogus": 1}, "bogus"),
        ({"mutation": "nope"}, "mutation"),
    ],
)
def test_bad_config_names_the_key(values, field):
    """A bad UNICAST3 setting raises an error that names the key."""
    with pytest.raises(ValueError, match=field):
        Unicast3Config.from_dict(values)


def test_config_defaults_match_jgroups():
    """Defaults follow JGroups: xmit_interval 0.5 s, ack_threshold 100, expiry 2 min, close 4 min."""
    cfg = Unicast3Config()
    assert (
        cfg.xmit_interval,
        cfg.ack_threshold,
        cfg.conn_expiry_timeout,
        cfg.conn_close_timeout,
        cfg.sync_min_interval,
        cfg.resync,
    ) == (0.5, 100, 120.0, 240.0, 2.0, "sync")


def test_conn_close_timeout_zero_never_removes_a_closing_entry():
    """conn_close_timeout 0 means "never remove" (as in JGroups): a CLOSING entry stays, and a send reopens it."""
    net = Net(config={"conn_expiry_timeout": 1.0, "conn_close_timeout": 0.0})
    net.send("A", "B", 3)
    net.run(10.0)
    assert net.u3("A").send_table["B"].state is ConnState.CLOSING
    assert not net.kinds("close_tx", "A")
    net.send("A", "B", 2)
    net.run_until_quiet(3.0)
    assert net.u3("A").send_table["B"].state is ConnState.OPEN
    assert net.delivered["B"] == expected("A", 5)


# ---- hostile input (found by the protocol fuzzer, tests/node/test_protocol_fuzz.py) ----------------


def _plant_ha_above_hs(net):
    entry = net.u3("A").send_table["B"]
    entry.ha = entry.next_seqno + 5


def _plant_extra_stored(net):
    entry = net.u3("A").send_table["B"]
    entry.msgs[entry.next_seqno + 100] = None


def _plant_delivered_above_highest(net):
    entry = net.u3("B").recv_table["A"]
    entry.highest = entry.delivered - 1


def _plant_deliverable_held(net):
    entry = net.u3("B").recv_table["A"]
    entry.msgs[entry.delivered + 1] = None


def _plant_too_many_held(net):
    entry = net.u3("B").recv_table["A"]
    entry.msgs[entry.delivered + 2] = None


BROKEN_SEND = [(_plant_ha_above_hs, "HA .* > HS"), (_plant_extra_stored, "stored, HA")]
BROKEN_RECV = [
    (_plant_delivered_above_highest, "delivered .*, highest"),
    (_plant_deliverable_held, "deliverable message held"),
    (_plant_too_many_held, "too many held"),
]


def _established():
    net = Net(names=("A", "B", "C"))
    net.connect("A", "B")
    net.connect("A", "C")
    net.send("A", "B", 5)
    net.run_until_quiet(2.0)
    return net


@pytest.mark.parametrize("plant, message", BROKEN_SEND, ids=lambda p: getattr(p, "__name__", ""))
def test_invariants_catch_a_broken_send_window_after_earlier_checks(plant, message):
    """check_invariants, which rechecks only the peers touched since its last call, still fails
    on a send window broken after checks that passed, at the next DATA sent to that peer."""
    net = _established()
    plant(net)
    with pytest.raises(AssertionError, match=message):
        net.send("A", "B", 1)


@pytest.mark.parametrize("plant, message", BROKEN_SEND, ids=lambda p: getattr(p, "__name__", ""))
@pytest.mark.parametrize("mtype", [MsgType.ACK, MsgType.XMIT_REQ])
def test_invariants_catch_a_broken_send_window_at_the_next_ack_or_xmit_req(plant, message, mtype):
    """An ACK or XMIT-REQ from the receiver (which touch only that peer's send window) is enough
    for the check to look at it again."""
    net = _established()
    plant(net)
    conn_id = net.u3("A").send_table["B"].conn_id
    with pytest.raises(AssertionError, match=message):
        net.inject("B", "A", U3Header(mtype, 0 if mtype is MsgType.XMIT_REQ else 1, conn_id))


@pytest.mark.parametrize("plant, message", BROKEN_RECV, ids=lambda p: getattr(p, "__name__", ""))
def test_invariants_catch_a_broken_recv_window_after_earlier_checks(plant, message):
    """The same for a receive window: caught at the next DATA from that peer (a duplicate here,
    which changes nothing)."""
    net = _established()
    plant(net)
    conn_id = net.u3("B").recv_table["A"].conn_id
    with pytest.raises(AssertionError, match=message):
        net.inject("A", "B", U3Header(MsgType.DATA, 1, conn_id))


@pytest.mark.parametrize("plant, message", BROKEN_SEND + BROKEN_RECV, ids=lambda p: getattr(p, "__name__", ""))
def test_invariants_catch_a_broken_window_of_an_untouched_peer_at_the_next_timer(plant, message):
    """A window broken while only other peers' DATA comes and goes is caught at the next input
    that is not DATA (here the retransmit timer): those inputs recheck every entry."""
    net = _established()
    plant(net)
    with pytest.raises(AssertionError, match=message):
        net.send("A", "C", 1)  # DATA between A and C: A's and C's checks see the A-C windows
        net.run(1.0)


HUGE = 1 << 62
U64 = (1 << 64) - 1


def test_data_with_a_huge_seqno_holds_nothing_and_is_counted():
    """DATA with seqno 2^62 on a live connection: dropped beyond the receive window, nothing kept."""
    net = Net(config={"max_recv_window_seqnos": 8})
    net.connect("A", "B")
    conn_id = net.u3("B").recv_table["A"].conn_id
    dropped = net.u3("B").counters.get("dropped_DATA", 0)
    net.inject("A", "B", U3Header(MsgType.DATA, HUGE, conn_id))
    (window,) = [w for w in net.u3("B").windows() if w.side == "recv"]
    assert window.pending == 0 and window.high == HUGE and window.missing == HUGE - 1
    assert net.kinds("drop", "B", seqno=HUGE, reason="beyond the receive window")
    assert net.u3("B").counters["dropped_DATA"] == dropped + 1
    net.run(1.1)  # the gap is asked for, max_xmit_req_seqnos at a time
    assert net.kinds("xmit_req_tx", "B")[-1]["count"] == 8192


def test_sender_far_ahead_of_a_small_receive_window_is_caught_up():
    """Only DATA 1 and 30 arrive, the window holds 8: 30 is dropped, 2..30 come by XMIT-REQ."""
    net = Net(config={"max_recv_window_seqnos": 8})
    net.drop = lambda m: is_type(m, "DATA") and 2 <= m.headers[PROTO_ID].seqno <= 29 and net.now < 0.5
    net.send("A", "B", 30)
    net.run(0.1)
    assert net.kinds("drop", "B", seqno=30, reason="beyond the receive window")
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 30)


def test_xmit_req_for_every_seqno_costs_one_event_per_part_outside_the_window():
    """XMIT-REQ 0..2^64-1: the 3 unacked messages are resent; the rest is 2 drop events, no loop."""
    net = Net()
    net.connect("A", "B")
    net.blocked.add(("A", "B"))
    net.send("A", "B", 3)
    entry = net.u3("A").send_table["B"]
    before = len(net.events)
    net.inject("B", "A", U3Header(MsgType.XMIT_REQ, conn_id=entry.conn_id, ranges=((0, U64),)))
    events = net.events[before:]
    assert [e["seqno"] for e in events if e["kind"] == "retransmit"] == [2, 3, 4]
    drops = [e for e in events if e["kind"] == "drop"]
    assert [d["ranges"] for d in drops] == [[[0, 1]], [[5, U64]]]
    assert net.u3("A").counters["dropped_XMIT_REQ"] == 2


@pytest.mark.parametrize("seqno, conn_id", [(0, 7), (1, 0)])
def test_first_data_with_seqno_or_conn_id_zero_opens_no_window(seqno, conn_id):
    """resync=timestamp: a first=true DATA with seqno 0 (a window at -1) or conn-id 0 is rejected."""
    net = Net(config={"resync": "timestamp"})
    net.inject("A", "B", U3Header(MsgType.DATA, seqno, conn_id, first=True))
    assert "A" not in net.u3("B").recv_table
    assert net.kinds("drop", "B", reason="seqno or conn_id is zero")
    assert net.u3("B").counters["dropped_DATA"] == 1


def test_sync_ok_with_low_zero_opens_no_window():
    """A SYNC-OK with low 0 (a window at -1, whose ACK cannot be encoded) is dropped; the sync goes on."""
    net = Net()
    net.inject("A", "B", U3Header(MsgType.DATA, 5, 99))
    nonce = net.u3("B")._syncs["A"].nonce
    net.inject("A", "B", U3Header(MsgType.SYNC_OK, 0, 99, nonce=nonce))
    assert "A" not in net.u3("B").recv_table and "A" in net.u3("B")._syncs
    assert net.kinds("drop", "B", type="SYNC_OK", reason="low is zero")
