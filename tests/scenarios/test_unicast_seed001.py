"""The original UNICAST (node/unicast/, `protocol: unicast`): the design before UNICAST2, rule by
rule on a scripted network (tests/netlab.py), and the UNICAST2 design's motivation exactly as the seed tells
it: after B alone drops A from its view, A's #25 is stored at B and never delivered, and B's
first six messages are discarded at A."""

from __future__ import annotations

import pytest

from splitbrain.harness.run import run_scenario
from splitbrain.harness.scenario import parse_scenario
from splitbrain.node.errors import SettingError
from splitbrain.node.layer import SyncPeer, ViewChange
from splitbrain.node.message import Message
from splitbrain.node.unicast import PROTO_ID, MsgType, U1Header, Unicast, UnicastConfig
from splitbrain.node.unicast.header import decode, encode
from splitbrain.node.views import pair_problem
from splitbrain.node.wire import WireError
from tests.netlab import Net, expected, from_sender, is_type, once


def pair() -> Net:
    return Net(protocol="unicast")


def layer(net: Net, name: str) -> Unicast:
    return net.stacks[name].layer(Unicast)


def view(net: Net, name: str, *members: str, view_id: int = 2) -> None:
    net.command(name, ViewChange(members=members, view_id=view_id))


def data(msg: Message, seqno: int | None = None) -> bool:
    return is_type(msg, "DATA", seqno, proto_id=PROTO_ID)


def test_seed001_motivation_b_stores_a25_and_never_delivers_it():
    """The UNICAST2 design: A's next seqno to B is #25 and B drops A from its view (A keeps B): B opens a new
    window that expects #1, stores #25 and everything after it, acks it (A purges it), and never
    delivers it; nothing is retransmitted after that."""
    net = pair()
    net.send("A", "B", 24)
    net.send("B", "A", 6)
    net.run_until_quiet(2.0)
    assert (layer(net, "A").send_table["B"].next_seqno, layer(net, "A").recv_table["B"].delivered) == (25, 6)
    view(net, "B", "B")
    assert "A" not in layer(net, "B").send_table and "A" not in layer(net, "B").recv_table
    net.send("A", "B", 5)  # seqnos 25..29
    net.run(5.0)
    window = layer(net, "B").recv_table["A"]
    assert (window.delivered, window.highest, sorted(window.msgs)) == (0, 29, [25, 26, 27, 28, 29])
    assert from_sender(net.delivered["B"], "A") == expected("A", 24)  # none of A:0:25..29
    assert [e["seqno"] for e in net.kinds("ack_tx", "B")][-5:] == [25, 26, 27, 28, 29]
    sender = layer(net, "A").send_table["B"]
    assert (sender.ha, sender.hs, sender.msgs) == (29, 29, {})  # purged: nobody will ever resend them
    assert net.kinds("retransmit", "A") == []
    [problem] = [pair_problem("A", "B", w.to_dict(), window_b.to_dict()) for w, window_b in _pair(net)]
    assert problem == "A send HA=29 HS=29, B recv delivered=0 received=29"


def _pair(net: Net):
    send = [w for w in layer(net, "A").windows() if w.side == "send" and w.peer == "B"]
    recv = [w for w in layer(net, "B").windows() if w.side == "recv" and w.peer == "A"]
    return zip(send, recv, strict=True)


def test_seed001_motivation_b_first_six_messages_are_discarded_at_a():
    """The UNICAST2 design, the reverse direction: B's new stream starts at #1, A expects #7, so B's first six
    messages are dropped at A as duplicates (and acked, so B purges them); #7 is delivered."""
    net = pair()
    net.send("A", "B", 24)
    net.send("B", "A", 6)
    net.run_until_quiet(2.0)
    view(net, "B", "B")
    net.send("B", "A", 7)  # B's app messages 7..13 go out as seqnos 1..7
    net.run_until_quiet(2.0)
    drops = net.kinds("drop", "A", type="DATA", reason="duplicate")
    assert [e["seqno"] for e in drops] == [1, 2, 3, 4, 5, 6]
    assert from_sender(net.delivered["A"], "B") == expected("B", 6) + ["B:0:13"]
    assert layer(net, "B").unacked("A") == 0  # every one of them acked
    assert layer(net, "A").recv_table["B"].delivered == 7


def test_the_same_split_seen_by_both_sides_is_harmless():
    """The UNICAST2 design #3 on the original: when both drop each other, both start again at #1 and nothing
    is lost (the bug needs the asymmetric views)."""
    net = pair()
    net.send("A", "B", 24)
    net.send("B", "A", 6)
    net.run_until_quiet(2.0)
    view(net, "A", "A")
    view(net, "B", "B")
    net.send("A", "B", 5)
    net.send("B", "A", 5)
    net.run_until_quiet(2.0)
    assert from_sender(net.delivered["B"], "A") == expected("A", 29)
    assert from_sender(net.delivered["A"], "B") == expected("B", 11)


@pytest.mark.parametrize("which", ["first", "last"])
def test_seed002_no_problem_with_first_or_last_message_lost(which):
    """The UNICAST3 design: "no problems with first or last message lost": the sender resends until acked."""
    net = pair()
    seqno = 1 if which == "first" else 10
    net.drop = once(lambda m: data(m, seqno))
    net.send("A", "B", 10)
    net.run_until_quiet(3.0)
    assert net.delivered["B"] == expected("A", 10)
    [resent] = net.kinds("retransmit", "A")
    assert (resent["seqno"], resent["reason"]) == (seqno, "unacked")


def test_an_ack_per_message_and_a_lost_ack_costs_a_resend_acked_again():
    """The UNICAST3 design: "lots of acks": one ACK per DATA; a lost ACK makes the sender resend, and the
    receiver drops the duplicate and acks it again."""
    net = pair()
    net.drop = once(lambda m: is_type(m, "ACK", 3, proto_id=PROTO_ID))
    net.send("A", "B", 5)
    net.run_until_quiet(3.0)
    assert [e["seqno"] for e in net.kinds("ack_tx", "B")] == [1, 2, 3, 4, 5, 3]
    assert [e["seqno"] for e in net.kinds("drop", "B", reason="duplicate")] == [3]
    assert [e["seqno"] for e in net.kinds("retransmit", "A")] == [3]
    assert net.delivered["B"] == expected("A", 5)
    # ack_rx carries the cumulative mark: 3's ACK was lost, so 4 and 5 left HA at 2 until 3 came.
    assert [e["seqno"] for e in net.kinds("ack_rx", "A")] == [1, 2, 2, 2, 5]


def test_reordered_messages_wait_for_the_gap_and_the_gap_comes_from_the_sender():
    """No XMIT-REQ: a receiver holds what comes early and the sender's resend fills the gap."""
    net = pair()
    net.drop = once(lambda m: data(m, 2))
    net.send("A", "B", 4)
    net.run(0.1)
    window = layer(net, "B").recv_table["A"]
    assert (window.delivered, sorted(window.msgs)) == (1, [3, 4])
    assert [w.missing for w in layer(net, "B").windows() if w.side == "recv"] == [1]
    net.run_until_quiet(3.0)
    assert net.delivered["B"] == expected("A", 4)
    assert net.kinds("xmit_req_tx") == []


def test_a_view_without_the_peer_drops_pending_messages_for_good():
    """A view without B removes A's entry with its unacked messages: they are never resent."""
    net = pair()
    net.blocked.add(("A", "B"))
    net.send("A", "B", 3)
    view(net, "A", "A")
    [closed] = net.kinds("conn_state", "A", side="send", state="CLOSED")
    assert closed["reason"] == "left_view"
    net.blocked.clear()
    net.run(3.0)
    assert net.kinds("retransmit", "A") == [] and net.delivered["B"] == []


def test_header_codec_settings_and_refusals():
    """The 9-byte header round-trips and bad ones are wire errors; settings name the bad key; the
    admin sync is refused (there is no resync)."""
    for hdr in (U1Header(MsgType.DATA, 1), U1Header(MsgType.ACK, (1 << 64) - 1)):
        assert decode(encode(hdr)) == hdr and len(encode(hdr)) == 9
    with pytest.raises(WireError):
        decode(b"\x07" + bytes(8))
    with pytest.raises(WireError):
        decode(bytes(5))
    assert UnicastConfig.from_dict({"xmit_interval": 1}).recovery_bound_s == 8.0
    for bad in ({"xmit_interval": 0}, {"resync": "sync"}, {"max_recv_window_seqnos": 0}):
        with pytest.raises(SettingError) as exc:
            UnicastConfig.from_dict(bad)
        assert exc.value.key == next(iter(bad))
    assert "no resync" in Unicast("A", UnicastConfig()).refusal(SyncPeer(peer="B"))


def test_a_plain_lossy_run_passes_every_check(tmp_path):
    """Loss, duplication and reordering on every link (no partition), 3 nodes: the simulator run
    passes fifo, no_duplicates, no_loss and windows_synced, and the sender did resend."""
    scenario = parse_scenario(
        {
            "name": "unicast-lossy",
            "protocol": "unicast",
            "nodes": ["A", "B", "C"],
            "workload": [
                {"from": "A", "to": "all", "rate": 100, "duration": 6},
                {"from": "B", "to": "A", "rate": 50, "duration": 6},
            ],
            "schedule": [
                {"at": 0.5, "loss": {"link": "*", "p": 0.2}},
                {"at": 0.5, "duplicate": {"link": "*", "p": 0.2}},
                {"at": 0.5, "reorder": {"link": "*", "p": 0.2}},
                {"at": 6.0, "heal": "all"},
            ],
            "duration": 6,
            "settle": 6,
            "checks": ["fifo", "no_duplicates", "no_loss", "windows_synced", "no_errors"],
            "seed": 11,
        }
    )
    outcome = run_scenario(scenario, backend="sim", out=tmp_path)
    assert outcome.verdict.passed, outcome.verdict.summary()
    events = outcome.result.all_events()
    assert sum(1 for e in events if e["kind"] == "retransmit") > 50
    assert sum(1 for e in events if e["kind"] == "drop" and e.get("reason") == "duplicate") > 50
    assert sum(1 for e in events if e["kind"] == "deliver") == 1500
