"""Named deadlines and their dispatch (shared by the unicast layers), UNICAST3's timeouts and resync
strategies, with scripted time.

Times are chosen off the retransmit ticks (every xmit_interval 0.5 from a node's first input),
so a timeout that fired on the next tick instead of at its own time would show.
"""

import random

import pytest

from splitbrain.node.layer import Action, Log, SetConfig, SyncPeer, ViewChange
from splitbrain.node.timers import Deadlines, FiredTimers
from splitbrain.node.unicast.config import UnicastConfig
from splitbrain.node.unicast.protocol import Unicast
from splitbrain.node.unicast2.config import Unicast2Config
from splitbrain.node.unicast2.protocol import Unicast2
from splitbrain.node.unicast3 import RESYNC_MODES, Unicast3Config
from splitbrain.node.unicast3.entries import ConnState
from splitbrain.node.unicast3.protocol import Unicast3
from splitbrain.node.unicast3.resync import RESYNCS, FirstSeqnoResync, SyncResync, TimestampResync
from tests.netlab import Net, expected, is_type

# ---- the deadline table ----------------------------------------------------------------------


def test_deadlines_next_is_the_earliest_and_due_is_inclusive():
    """next() is the earliest armed deadline; lower() only moves one earlier; None cancels."""
    timers = Deadlines("a", "b")
    assert timers.earliest is None
    timers.set("b", 2.0)
    timers.set("a", 3.0)
    assert timers.earliest == 2.0
    timers.lower("a", 4.0)
    assert timers.get("a") == 3.0
    timers.lower("a", 1.0)
    assert timers.earliest == 1.0 and timers.due("a", 1.0) and not timers.due("b", 1.9)
    timers.set("a", None)
    assert timers.as_dict() == {"b": 2.0}


def test_deadlines_refuse_an_unknown_name():
    """Arming a deadline the layer never declared is a local error."""
    with pytest.raises(KeyError, match="nope"):
        Deadlines("xmit").set("nope", 1.0)


class _Ticks(FiredTimers):
    """A layer with two timeouts whose handlers record that they fired."""

    def __init__(self) -> None:
        self.timers = Deadlines("first", "second")

    def _first(self, now: float, out: list[Action]) -> None:
        self.timers.set("first", None)
        out.append(Log(event={"fired": "first", "at": now}))

    def _second(self, now: float, out: list[Action]) -> None:
        self.timers.set("second", now + 1.0)
        out.append(Log(event={"fired": "second", "at": now}))

    _FIRE = {"second": _second, "first": _first}  # not in firing order: the Deadlines' order rules


def test_fired_timers_fire_what_is_due_in_the_deadlines_order():
    """Both due: fired in the order the Deadlines were named, not _FIRE's; one not due stays."""
    layer = _Ticks()
    layer.timers.set("second", 1.0)
    layer.timers.set("first", 2.0)
    assert layer.next_deadline() == 1.0
    assert layer.on_timer(0.5) == []
    assert [a.event for a in layer.on_timer(1.0) if isinstance(a, Log)] == [{"fired": "second", "at": 1.0}]
    assert layer.next_deadline() == 2.0
    fired = [a.event["fired"] for a in layer.on_timer(2.5) if isinstance(a, Log) and isinstance(a.event, dict)]
    assert fired == ["first", "second"]
    assert layer.timers.as_dict() == {"second": 3.5}


@pytest.mark.parametrize(
    "layer",
    [
        Unicast("A", UnicastConfig()),
        Unicast2("A", Unicast2Config(), random.Random(1)),
        Unicast3("A", Unicast3Config(), random.Random(1)),
    ],
    ids=["unicast", "unicast2", "unicast3"],
)
def test_every_unicast_deadline_has_a_handler(layer):
    """Each named deadline of a unicast layer has its _FIRE handler (a missing one raised only once due)."""
    assert sorted(layer._FIRE) == sorted(layer.timers.order)


# ---- timeouts fire at their own time ---------------------------------------------------------


def test_conn_close_fires_at_its_exact_time():
    """A view drops B at t=0.83: A's send window closes (CLOSE sent) at 1.83, not at the 2.0 tick."""
    net = Net(config={"conn_close_timeout": 1.0})
    net.connect("A", "B")
    net.run(0.83 - net.now)
    net.command("A", ViewChange(members=("A",), view_id=2))
    assert net.u3("A").send_table["B"].state is ConnState.CLOSING
    assert net.u3("A").timers.get("conn_close") == 0.83 + 1.0
    net.run(1.82 - net.now)
    assert "B" in net.u3("A").send_table
    net.run(0.01)
    assert "B" not in net.u3("A").send_table
    [closed] = net.kinds("conn_state", "A", side="send", state="CLOSED")
    [close] = net.kinds("close_tx", "A")
    assert closed["t"] == close["t"] == 0.83 + 1.0
    assert net.u3("A").timers.get("conn_close") is None  # nothing left to close


def test_conn_expiry_fires_at_its_exact_time():
    """Idle for conn_expiry_timeout after the last send: OPEN -> CLOSING at exactly that time."""
    net = Net(config={"conn_expiry_timeout": 2.0, "conn_close_timeout": 0.0})
    net.run(0.37)
    net.send("A", "B", 3)
    net.run(0.93)
    net.send("A", "B", 1)  # activity postpones expiry: the first deadline finds nothing due
    last_send = net.now
    net.run(4.0)
    [expired] = net.kinds("conn_state", "A", side="send", state="CLOSING")
    assert expired["reason"] == "expired" and expired["t"] == last_send + 2.0
    assert net.delivered["B"] == expected("A", 4)


def test_sync_ok_wait_ends_at_exactly_sync_timeout():
    """A SYNC to a sender that never answers is given up sync_timeout after it started."""
    net = Net(config={"sync_timeout": 1.3})
    net.blocked.add(("B", "A"))
    net.run(0.21)
    net.command("B", SyncPeer(peer="A"))
    net.run(2.0)
    [timeout] = net.kinds("sync_timeout", "B")
    assert timeout["phase"] == "sync_ok" and timeout["t"] == 0.21 + 1.3
    # Until then the retransmit task (armed by B's first input, the command) resent SYNC at its
    # ticks; the old way, the timeout waited for the tick at 1.71.
    assert [e["t"] for e in net.kinds("sync_tx", "B", phase="sync")] == pytest.approx([0.21, 0.71, 1.21])
    assert not net.u3("B")._syncs and net.u3("B").timers.get("sync_timeout") is None


def test_sync_ack_wait_ends_at_exactly_sync_timeout():
    """Every SYNC-ACK is lost: the sender stops waiting sync_timeout after the SYNC it answered."""
    net = Net(config={"sync_timeout": 1.3})
    net.connect("A", "B")
    net.drop = lambda msg: is_type(msg, "SYNC_ACK")
    net.run(0.71 - net.now)
    net.command("B", SyncPeer(peer="A"))
    sync_rx = net.now + net.latency
    net.run(2.0)
    [timeout] = net.kinds("sync_timeout", "A")
    assert timeout["phase"] == "sync_ack" and timeout["t"] == sync_rx + 1.3
    assert not net.u3("A").send_table["B"].awaiting_sync_ack


def test_set_config_moves_armed_deadlines():
    """A shorter conn_close_timeout set at run time applies to a connection already CLOSING."""
    net = Net(config={"conn_close_timeout": 10.0})
    net.connect("A", "B")
    net.command("A", ViewChange(members=("A",), view_id=2))
    closing_at = net.now
    net.command("A", SetConfig(values={"conn_close_timeout": 0.6}))
    assert net.u3("A").timers.get("conn_close") == closing_at + 0.6
    net.run(1.0)
    assert "B" not in net.u3("A").send_table


def test_every_timer_is_named_and_next_deadline_is_the_earliest():
    """next_deadline() is the earliest of the named deadlines, and firing clears what is due."""
    net = Net(config={"conn_close_timeout": 1.0})
    net.connect("A", "B")
    net.command("A", ViewChange(members=("A",), view_id=2))
    u3 = net.u3("A")
    armed = u3.timers.as_dict()
    assert {"xmit", "conn_close"} <= set(armed) <= set(u3.timers.order)
    assert u3.next_deadline() == min(armed.values())
    now = u3.next_deadline()
    u3.on_timer(now)
    assert u3.next_deadline() > now


# ---- resync strategies -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, cls", [("sync", SyncResync), ("timestamp", TimestampResync), ("first_seqno", FirstSeqnoResync)]
)
def test_resync_strategy_is_chosen_by_config(mode, cls):
    """config.resync picks one strategy object when the layer is built."""
    u3 = Net(config={"resync": mode}).u3("A")
    assert type(u3.resync) is cls and u3.resync.mode == mode
    assert u3.resync.admin_sync == (mode == "sync")


def test_every_resync_mode_has_a_strategy():
    """The strategies cover exactly the modes the config accepts."""
    assert set(RESYNCS) == set(RESYNC_MODES)


@pytest.mark.parametrize("mode", RESYNC_MODES)
def test_only_timestamp_stamps_acks(mode):
    """ACKs carry a timestamp under resync timestamp only."""
    net = Net(config={"resync": mode})
    net.connect("A", "B")
    stamped = [e.get("timestamp") is not None for e in net.kinds("ack_tx", "B")]
    assert stamped and all(s == (mode == "timestamp") for s in stamped)


def test_switching_resync_at_run_time_builds_the_new_strategy():
    """SetConfig(resync=...) replaces the strategy; the connection keeps working."""
    net = Net(config={"resync": "sync"})
    net.connect("A", "B")
    net.command("B", SetConfig(values={"resync": "timestamp"}))
    assert isinstance(net.u3("B").resync, TimestampResync)
    net.send("A", "B", 3)
    net.run_until_quiet(2.0)
    assert net.delivered["B"] == expected("A", 4)


def test_next_stays_the_earliest_through_any_sequence_of_changes():
    """The cached earliest deadline equals min() of the armed ones after every set, lower, cancel."""
    import random

    rng = random.Random(7)
    timers = Deadlines("a", "b", "c")
    armed: dict[str, float] = {}
    for _ in range(2000):
        name = rng.choice("abc")
        op = rng.random()
        if op < 0.3:
            timers.set(name, None)
            armed.pop(name, None)
        elif op < 0.6:
            at = rng.uniform(0, 10)
            timers.lower(name, at)
            armed[name] = min(armed.get(name, at), at)
        else:
            at = rng.uniform(0, 10)
            timers.set(name, at)
            armed[name] = at
        assert timers.earliest == min(armed.values(), default=None)
        assert (name in timers.at) == (name in armed)
