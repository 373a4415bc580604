"""The four SYNC bugs (the SYNC design), each replayed exactly with scripted time and chosen
losses. Each test failed on the protocol before its fix (numbers in the docstrings) and asserts
what the application sees: every message delivered once, in order, and windows back in step."""

from __future__ import annotations

import pytest

from splitbrain.harness.checks import run_checks
from splitbrain.node.layer import SyncPeer, ViewChange
from splitbrain.node.message import Message
from splitbrain.node.unicast3 import PROTO_ID
from tests.netlab import Net, expected, is_type

CHECKS = ["fifo", "no_duplicates", "no_loss", "windows_synced"]


class Capture:
    """A drop filter for Net: holds back (drops and keeps) the messages `pred` picks, at most `limit`."""

    def __init__(self, pred, limit: int = 1):
        self.pred, self.limit, self.held = pred, limit, []

    def __call__(self, msg: Message) -> bool:
        if len(self.held) < self.limit and self.pred(msg):
            self.held.append(msg)
            return True
        return False


def inject(net: Net, node: str, msg: Message) -> None:
    """A held-back message arrives late, at `node`, now."""
    net.stacks[node].receive([msg], net.now)
    net._collect(node)


def verdict(net: Net) -> dict:
    return {r.name: r for r in run_checks(net.final_events(), CHECKS)}


def assert_in_step(net: Net, src: str = "A", dest: str = "B") -> None:
    a, b = net.u3(src).send_table[dest], net.u3(dest).recv_table[src]
    assert (a.conn_id, a.ha, a.hs) == (b.conn_id, b.delivered, b.delivered)
    failed = {n: r.explanation for n, r in verdict(net).items() if not r.passed}
    assert not failed, failed


def test_a_second_sync_while_the_sync_ack_is_lost_redelivers_nothing():
    """Bug A: B syncs, its SYNC-ACK is lost, A sends 60 messages (their ACKs ignored while A waits),
    B syncs again. Before the fix A took no new conn-id but B rebuilt its window at A's HA and
    retired the live conn-id: 60 messages delivered twice, then a permanent stall."""
    net = Net(config={"conn_close_timeout": 1.0})
    net.connect("A", "B")
    net.drop = Capture(lambda m: is_type(m, "SYNC_ACK"))
    net.command("B", SyncPeer(peer="A"))
    net.run(0.05)
    net.send("A", "B", 60)
    net.run(0.1)
    net.command("B", SyncPeer(peer="A"))
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 61)
    assert_in_step(net)
    # The stall came later: B drops A from its view, reaps its window, A sends again.
    net.command("B", ViewChange(members=("B",), view_id=2))
    net.run(1.6)
    assert "A" not in net.u3("B").recv_table
    net.command("B", ViewChange(members=("A", "B"), view_id=3))
    net.send("A", "B", 5)
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 66)
    assert_in_step(net)


def _stale_first(resync: str) -> Net:
    """A's very first DATA (first=true) is held back; the connection goes on; B drops A from its view
    and reaps its window; then the old first message arrives."""
    net = Net(config={"resync": resync, "conn_close_timeout": 1.0, "xmit_interval": 0.2})
    first = Capture(lambda m: is_type(m, "DATA", 1) and m.headers[PROTO_ID].first)
    net.drop = first
    net.send("A", "B", 20)
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 20)
    net.command("B", ViewChange(members=("B",), view_id=2))
    net.run(1.6)
    assert "A" not in net.u3("B").recv_table
    net.command("B", ViewChange(members=("A", "B"), view_id=3))
    inject(net, "B", first.held[0])
    net.run(3.0)
    return net


def test_a_stale_first_message_starts_a_sync_instead_of_a_window():
    """Bug B, resync sync: the stale first=true DATA makes B SYNC (no window means SYNC). Before the
    fix it opened a window at the old conn-id: A:0:1 delivered twice, then XMIT-REQs every run for
    seqnos A had purged long ago."""
    net = _stale_first("sync")
    assert net.delivered["B"] == expected("A", 20)
    assert not [e for e in net.kinds("xmit_req_tx", "B") if e["t"] > net.now - 1.0]
    net.send("A", "B", 3)
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 23)
    assert_in_step(net)


@pytest.mark.parametrize("resync", ["timestamp", "first_seqno"])
def test_a_stale_first_message_still_breaks_the_older_designs(resync):
    """Bug B in timestamp and first_seqno: those designs take first=true as a new connection by
    definition, so the stale message opens a window at the old conn-id, A:0:1 comes twice and B
    asks forever for seqnos A purged (JGRP-1873). Kept reproducible, as the designs JGroups shipped."""
    net = _stale_first(resync)
    assert net.delivered["B"] == expected("A", 20) + ["A:0:1"]
    net.send("A", "B", 1)  # seqno 21 shows B the gap 2..20, which A purged long ago
    net.run(3.0)
    asked = [e for e in net.kinds("xmit_req_tx", "B") if e["t"] > net.now - 1.0]
    assert asked, "B should still be asking for seqnos A purged"
    assert not verdict(net)["no_duplicates"].passed


def test_a_delayed_sync_ok_of_an_earlier_sync_is_dropped():
    """Bug C: the SYNC-OK of B's first sync is held back; B syncs again; the old SYNC-OK arrives
    while the second sync waits. Before the fix B took it as the answer and set its window back to
    the first sync's low: 40 messages delivered twice."""
    net = Net()
    net.connect("A", "B")
    old_ok = Capture(lambda m: is_type(m, "SYNC_OK"))
    net.drop = old_ok
    net.command("B", SyncPeer(peer="A"))
    net.run_until_quiet(5.0)  # B's SYNC resend gets a second answer, which goes through
    net.send("A", "B", 40)
    net.run_until_quiet(5.0)
    net.drop = Capture(lambda m: is_type(m, "SYNC_OK"))  # the second sync's answer is late too
    net.command("B", SyncPeer(peer="A"))
    net.run(0.05)
    before = net.u3("B").recv_table["A"].delivered
    inject(net, "B", old_ok.held[0])
    # Not an answer to the sync in progress: at most a repeat of that old sync's SYNC-ACK.
    assert net.u3("B").recv_table["A"].delivered == before == 41
    assert "A" in net.u3("B")._syncs
    net.run_until_quiet(5.0)
    assert net.delivered["B"] == expected("A", 41)
    assert_in_step(net)


def test_a_delayed_sync_does_not_rekey_a_healthy_connection():
    """Bug D: the first SYNC of an admin sync is held back and arrives long after that sync was done.
    Before the fix A took a new conn-id for it and the connection went through a needless resync
    cycle; now A drops it as stale."""
    net = Net()
    net.connect("A", "B")
    first_sync = Capture(lambda m: is_type(m, "SYNC"))
    net.drop = first_sync
    net.command("B", SyncPeer(peer="A"))
    net.run_until_quiet(5.0)  # B's SYNC resend gets through
    net.send("A", "B", 5)
    net.run_until_quiet(5.0)
    conn = net.u3("A").send_table["B"].conn_id
    rekeys = len(net.kinds("conn_state", "A", reason="sync: new conn_id"))
    inject(net, "A", first_sync.held[0])
    net.send("A", "B", 5)
    net.run_until_quiet(5.0)
    assert net.u3("A").send_table["B"].conn_id == conn
    assert len(net.kinds("conn_state", "A", reason="sync: new conn_id")) == rekeys
    assert [e["reason"] for e in net.kinds("drop", "A") if e.get("type") == "SYNC"][-1].startswith("stale SYNC")
    assert net.delivered["B"] == expected("A", 11)
    assert_in_step(net)
