"""JGRP-1873/1875: a stale ACK delayed past a resync purges messages the receiver never got.

The recipe from the JIRA: B has delivered up to 15 and acked it, but that ack is delayed; B's
window for A is closed and recreated at A's lowest unacked seqno (11); 12 is lost; the stale
ack(15) reaches A and purges 11-15; B asks for 12 forever.
"""

from splitbrain.harness.checks import run_checks
from splitbrain.node.faultlayer import FaultLayer, FaultRule
from splitbrain.node.layer import ViewChange
from tests.netlab import Net, is_type

CONFIG = {"conn_close_timeout": 1.0, "ack_min_interval": 0.0}


def jgrp1875(resync: str) -> Net:
    net = Net(config={**CONFIG, "resync": resync})
    net.send("A", "B", 10)
    net.run_until_quiet(1.0)  # 1-10 delivered and acked: HA=10
    # The ack for 11-15 leaves B but reaches A only 4 s later.
    net.stacks["A"].layer(FaultLayer).add_rule(
        FaultRule(direction="up", peer="B", types=frozenset({"ACK"}), action="delay", delay_s=4.0, count=1)
    )
    t0 = net.now
    net.send("A", "B", 5)
    net.run(0.05)
    assert net.delivered["B"][-1] == "A:0:15"
    # B stops hearing A and drops it from its view; its window for A closes after conn_close_timeout.
    net.blocked.add(("A", "B"))
    net.command("B", ViewChange(members=("B",), view_id=2))
    net.run(1.6)
    assert "A" not in net.u3("B").recv_table
    # The split heals; 12 is lost until after the stale ack has landed; A keeps sending.
    net.blocked.clear()
    net.drop = lambda m: is_type(m, "DATA", 12) and net.now < t0 + 5.0
    net.command("B", ViewChange(members=("A", "B"), view_id=3))
    net.send("A", "B", 5)  # 16-20
    net.run(8.0)
    return net


def results(net: Net) -> dict:
    return {r.name: r for r in run_checks(net.final_events())}


def test_first_seqno_reproduces_jgrp1875():
    """resync=first_seqno: the stale ack purges 11-15, B asks for 12 forever, 16-20 never arrive."""
    net = jgrp1875("first_seqno")
    checks = results(net)
    assert not checks["no_loss"].passed
    assert "A->B" in checks["no_loss"].explanation
    undelivered = checks["no_loss"].details
    assert "A:0:16" in str(undelivered) and "A:0:20" in str(undelivered)
    # The stale ack was applied (same conn-id) and purged what B had not got back.
    assert net.u3("A").send_table["B"].ha >= 15
    # Endless retransmission requests for 12 that A can no longer serve.
    late = [e for e in net.kinds("xmit_req_tx", "B") if e["t"] > net.now - 3.0]
    assert len(late) >= 5 and all(e["ranges"][0][0] == 12 for e in late)
    assert net.kinds("drop", "A", type="XMIT_REQ", seqno=12)
    assert not checks["windows_synced"].passed


def test_sync_fixes_jgrp1875():
    """resync=sync: the stale ack carries the old conn-id and is discarded; nothing is lost."""
    net = jgrp1875("sync")
    checks = results(net)
    assert all(r.passed for r in checks.values()), {n: r.explanation for n, r in checks.items()}
    assert net.delivered["B"][-10:] == [f"A:0:{i}" for i in range(11, 21)]
    stale = [e for e in net.kinds("drop", "A", type="ACK") if "stale conn_id" in e["reason"]]
    assert len(stale) == 1 and stale[0]["seqno"] == 15
    # 11-15 were delivered before the window closed and again after the resync: counted, legal.
    assert checks["no_duplicates"].details["redelivered_after_reset"] == 5


def test_timestamp_mode_on_jgrp1875():
    """resync=timestamp (what JGroups shipped): the stale ack has an older timestamp and is ignored."""
    net = jgrp1875("timestamp")
    checks = results(net)
    assert all(r.passed for r in checks.values()), {n: r.explanation for n, r in checks.items()}
    stale = [e for e in net.kinds("drop", "A", type="ACK") if "stale timestamp" in e["reason"]]
    assert len(stale) == 1 and stale[0]["seqno"] == 15
