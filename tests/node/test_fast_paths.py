"""The fast paths keep behaviour: per-message events only when someone reads them,
layers that pass through routed around, and the daemon without an event log skips the dicts."""

from __future__ import annotations

import random
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitbrain.harness.scenario import load_scenario
from splitbrain.harness.sim import Simulation
from splitbrain.harness.sim.codec import ObjectCodec
from splitbrain.harness.sim.simulator import IdentityCodec
from splitbrain.node.compose import build_stack
from splitbrain.node.faultlayer import FaultLayer, FaultRule
from splitbrain.node.layer import ViewChange
from splitbrain.node.message import Message, app_id_of, app_payload, workload_message

ROOT = Path(__file__).resolve().parents[2]


def pair(data_events: bool = True):
    stacks = {}
    for name, seed in (("A", 1), ("B", 2)):
        stack = build_stack(name, "unicast3", {"ack_min_interval": 0}, random.Random(seed), 1)
        for layer in stack.layers:
            layer.data_events = data_events
        stack.command(ViewChange(members=("A", "B"), view_id=1), 0.0)
        stack.take()
        stacks[name] = stack
    return stacks["A"], stacks["B"]


def transfer(a, b, n: int, known_app: bool = False):
    """A sends n messages to B; frames go back and forth until both are quiet (bounded). With
    known_app, each message carries its app id and B's copies keep it, as in the simulator."""
    for i in range(1, n + 1):
        msg = workload_message("A", "B", 0, i, 50)
        if not known_app:
            msg.known_app = None
        a.send(msg, 0.01 * i)
    delivered: list[Message] = []
    events: list[dict] = []
    now = 1.0
    for _ in range(20):
        moved = False
        for src, dst in ((a, b), (b, a)):
            out, app, evs = src.take()
            if src is b:
                delivered.extend(app)
            events.extend(evs)
            if out:
                moved = True
                dst.receive([Message(m.src, m.dest, m.payload, dict(m.headers), m.known_app) for m in out], now)
        now += 0.01
        if not moved:
            break
    return delivered, events


def test_data_events_off_delivers_the_same_without_send_and_deliver_events():
    """With data_events False a pair delivers the same messages; only send/deliver events go."""
    on = transfer(*pair(True), 5)
    off = transfer(*pair(False), 5)
    assert [m.app for m in off[0]] == [m.app for m in on[0]] == [f"A:0:{i}" for i in range(1, 6)]
    kinds_on = [ev["kind"] for ev in on[1]]
    kinds_off = [ev["kind"] for ev in off[1]]
    assert kinds_on.count("send") == kinds_on.count("deliver") == 5
    assert "send" not in kinds_off and "deliver" not in kinds_off
    assert [k for k in kinds_on if k not in ("send", "deliver")] == kinds_off
    assert "ack_rx" in kinds_off and "conn_state" in kinds_off


def test_a_fault_layer_with_rules_is_not_routed_around():
    """A rule added after the stack was built is applied on the receive path (no stale fast path)."""
    a, b = pair()
    b.layer(FaultLayer).add_rule(FaultRule(direction="up", peer="A", types=frozenset({"DATA"}), count=2))
    delivered, events = transfer(a, b, 4)
    # 1 and 2 dropped by the rule; the resync resends 1, and 2 waits for an XMIT-REQ, so 3 and 4
    # are held. Without the rule all four arrive.
    assert sum(1 for ev in events if ev["kind"] == "drop" and ev["node"] == "B") >= 2
    assert [m.app for m in delivered] == ["A:0:1"]
    assert [m.app for m in transfer(*pair(), 4)[0]] == [f"A:0:{i}" for i in range(1, 5)]
    b.layer(FaultLayer).clear()
    assert b.layer(FaultLayer).passing


def test_the_fault_layer_applies_its_rules_until_the_last_one_is_removed():
    """A rule added after another was removed is applied, removing one of two rules leaves the
    other applied, and removing the last one routes messages around the fault layer again."""
    drop_data = FaultRule(direction="up", peer="A", types=frozenset({"DATA"}))
    other = FaultRule(direction="up", peer="C")

    def run(change) -> list[str | None]:
        a, b = pair()
        change(b.layer(FaultLayer))
        return [m.app for m in transfer(a, b, 3)[0]]

    def readded(faults: FaultLayer) -> None:
        faults.remove_rule(faults.add_rule(other))
        faults.add_rule(drop_data)

    def one_of_two_removed(faults: FaultLayer) -> None:
        faults.add_rule(drop_data)
        faults.remove_rule(faults.add_rule(other))

    def all_removed(faults: FaultLayer) -> None:
        faults.remove_rule(faults.add_rule(drop_data))
        assert faults.passing

    assert run(readded) == []
    assert run(one_of_two_removed) == []
    assert run(all_removed) == [f"A:0:{i}" for i in range(1, 4)]


def test_nakack2_batches_deliver_like_single_multicasts():
    """NAKACK2 receiving a frame's multicasts as one batch (one Up, one deliver record) delivers and
    logs exactly what it does receiving them one at a time, with a gap and a duplicate in the batch."""
    from splitbrain.node.message import MCAST_DEST

    members = ("A", "B", "C")
    stacks = []
    for name in ("A", "B", "B"):
        stack = build_stack(name, "nakack2", {}, random.Random(members.index(name)), 1)
        stack.command(ViewChange(members=members, view_id=1), 0.0)
        stack.take()
        stacks.append(stack)
    sender, batched, single = stacks
    sender.send_batch([Message("A", MCAST_DEST, app_payload("A", 0, i, 20)) for i in range(1, 9)], 0.5)
    to_b = [m for m in sender.take()[0] if m.dest == "B"]
    arrive = to_b[:3] + to_b[4:] + [to_b[1], to_b[3]]  # 4 late (a gap), 2 twice
    batched.receive(arrive, 1.0)
    got_batched = batched.take()
    for m in arrive:
        single.receive([m], 1.0)
    got_single = single.take()
    assert [m.app for m in got_batched[1]] == [m.app for m in got_single[1]] == [f"A:0:{i}" for i in range(1, 9)]
    assert got_batched[2] == got_single[2]
    assert [(ev["kind"], ev.get("seqno")) for ev in got_batched[2] if ev["kind"] == "deliver"] == [
        ("deliver", i) for i in range(1, 9)
    ]


def test_nakack2_send_batch_equals_sends_one_by_one():
    """A batch of multicasts (and a mixed batch, and one under a fault rule) sent with send_batch
    gives the same events, loopback deliveries, frames and state as send() per message."""
    from splitbrain.node.message import MCAST_DEST

    members = ("A", "B", "C")

    def fresh(rule: bool):
        stack = build_stack("A", "nakack2", {}, random.Random(3), 1)
        stack.command(ViewChange(members=members, view_id=1), 0.0)
        stack.take()
        if rule:
            stack.layer(FaultLayer).add_rule(FaultRule(direction="down", peer="C", count=2))
        return stack

    def batch(kind: str) -> list[Message]:
        dests = [MCAST_DEST] * 6 if kind != "mixed" else [MCAST_DEST, "B", MCAST_DEST, MCAST_DEST, "C", MCAST_DEST]
        return [Message("A", d, app_payload("A", 0, i, 30)) for i, d in enumerate(dests, 1)]

    for kind, rule in (("mcasts", False), ("mixed", False), ("mcasts", True)):
        one, many = fresh(rule), fresh(rule)
        for msg in batch(kind):
            one.send(msg, 1.0)
        many.send_batch(batch(kind), 1.0)
        (net1, app1, ev1), (net2, app2, ev2) = one.take(), many.take()
        assert net1 == net2 and app1 == app2 and ev1 == ev2, kind
        assert [m.app for m in app2] == [m.app for m in batch(kind) if m.dest == MCAST_DEST]
        assert one.layers[1].snapshot() == many.layers[1].snapshot()


def test_unicast3_holds_and_delivers_a_batch_like_single_messages():
    """DATA arriving early, twice and beyond the window, in one frame or one per frame: the same
    deliveries in seqno order and the same deliver and drop events."""

    def receiver_after_first(window: int):
        a, b = (
            build_stack(name, "unicast3", {"max_recv_window_seqnos": window}, random.Random(seed), 1)
            for name, seed in (("A", 1), ("B", 2))
        )
        for stack in (a, b):
            stack.command(ViewChange(members=("A", "B"), view_id=1), 0.0)
            stack.take()
        delivered, _ = transfer(a, b, 1)  # the connection is open, seqno 1 delivered
        assert [m.app for m in delivered] == ["A:0:1"]
        for i in range(2, 8):
            a.send(Message("A", "B", app_payload("A", 0, i, 50)), 2.0)
        sent = {m.headers[3].seqno: m for m in a.take()[0]}
        return b, sent

    order = [3, 5, 3, 7, 4, 2]  # 3 held, 5 held, 3 again, 7 beyond a window of 4, 4 held, 2 completes
    b_batch, sent = receiver_after_first(4)
    b_batch.receive([sent[s].copy() for s in order], 3.0)
    b_single, sent = receiver_after_first(4)
    for s in order:
        b_single.receive([sent[s].copy()], 3.0)
    got = []
    for stack in (b_batch, b_single):
        _, app, events = stack.take()
        kept = [(ev["kind"], ev.get("seqno"), ev.get("reason")) for ev in events if ev["kind"] in ("deliver", "drop")]
        got.append(([m.app for m in app], kept))
    assert got[0] == got[1]
    assert got[0][0] == [f"A:0:{i}" for i in range(2, 6)]
    assert got[0][1] == [
        ("drop", 3, "duplicate"),
        ("drop", 7, "beyond the receive window"),
        ("deliver", 2, None),
        ("deliver", 3, None),
        ("deliver", 4, None),
        ("deliver", 5, None),
    ]


def _exact_deadline(layer) -> float | None:
    """A layer's next deadline computed from its own state, without its deadline clock."""
    timers = getattr(layer, "timers", None)
    if timers is not None:
        return min(timers.at.values(), default=None)
    if isinstance(layer, FaultLayer):
        return min((held.due for held in layer._held), default=None)
    return layer.next_deadline()


@pytest.mark.parametrize(
    "path",
    [
        "scenarios/jgrp-1875-sync.yaml",  # an in-process delay rule: the fault layer holds messages
        "scenarios/gms-coordinator-restart.yaml",
        "scenarios/mcast-flow-control.yaml",
        "scenarios/nakack2-xmit-switch.yaml",  # NAKACK2's xmit task stopped and started at run time
        "scenarios/lossy-link.yaml",
    ],
)
def test_deadline_clocks_give_every_layers_exact_deadline(monkeypatch, path):
    """The simulator reads deadlines from the layers' clocks (Layer.deadline_clock): after every
    input the timer it arms and Stack.next_deadline() are the earliest deadline of all layers."""
    after_input = Simulation._after_input
    checked = []

    def checking(self, node, t):
        after_input(self, node, t)
        exact = [d for d in map(_exact_deadline, node.stack.layers) if d is not None]
        expected = min(exact, default=None)
        assert node.stack.next_deadline() == expected
        assert node.timer_at == expected
        checked.append(len(node.stack.deadline_clocks))

    monkeypatch.setattr(Simulation, "_after_input", checking)
    Simulation(load_scenario(ROOT / path)).run()
    assert checked and min(checked) >= 1


def _app_id_by_slices(payload: bytes) -> str | None:
    """app_id_of as it was written first (slices and one decode): the reference."""
    if payload[:2] != b"SB" or len(payload) < 3:
        return None
    end = 3 + payload[2]
    if len(payload) < end:
        return None
    try:
        return payload[3:end].decode()
    except UnicodeDecodeError:
        return None


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=12),
        st.builds(lambda head, body: b"SB" + head + body, st.binary(max_size=2), st.binary(max_size=40)),
        st.builds(lambda app, size: app_payload("N", 1, app, size), st.integers(0, 10**12), st.integers(0, 64)),
    )
)
def test_app_id_of_reads_what_the_slicing_reference_reads(payload):
    """app_id_of (the magic compared byte by byte) agrees with the slicing reference on any bytes."""
    assert app_id_of(payload) == _app_id_by_slices(payload)


def _app_payload_by_formatting(sender: str, stream: int, n: int, size: int = 0) -> bytes:
    """app_payload as it was written first (one bytes formatting): the reference."""
    app = f"{sender}:{stream}:{n}".encode()
    if len(app) > 255:
        raise ValueError(f"app id too long: {len(app)} bytes")
    head = b"SB%c%s" % (len(app), app)
    pad = size - len(head)
    return head + bytes(pad) if pad > 0 else head


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.integers(0, 10**6), st.integers(0, 10**15), st.integers(-5, 400))
def test_app_payload_builds_what_the_formatting_reference_builds(sender, stream, n, size):
    """app_payload (a ready-made head per length) gives the reference's bytes, or its error."""
    try:
        expected: bytes | None = _app_payload_by_formatting(sender, stream, n, size)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError):
            app_payload(sender, stream, n, size)
    else:
        assert app_payload(sender, stream, n, size) == expected
        assert app_id_of(expected) == f"{sender}:{stream}:{n}"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.integers(0, 10**6), st.integers(0, 10**15), st.integers(-5, 400))
def test_workload_message_is_an_app_payload_message_that_knows_its_app_id(sender, stream, n, size):
    """The simulator's workload message: app_payload's bytes, the app id read back from them."""
    try:
        expected: bytes | None = app_payload(sender, stream, n, size)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError):
            workload_message(sender, "B", stream, n, size)
    else:
        msg = workload_message(sender, "B", stream, n, size)
        assert msg == Message(sender, "B", expected)
        assert msg.known_app == app_id_of(expected) == msg.app


def test_copies_of_a_message_keep_its_known_app():
    """Copies (copy, with_header, both simulator codecs) keep the app id a message was built with."""
    msg = workload_message("A", "B", 2, 7, 40)
    msg.headers[3] = "hdr"
    payload, app = msg.payload, msg.known_app
    received = [*ObjectCodec.decode_frame(("A", [msg]))[1], *ObjectCodec.decode_frame(("A", [msg, msg]))[1]]
    copies = [msg.copy(), msg.with_header(4, "other"), *received, *IdentityCodec.decode_frame(("A", (msg,)))[1]]
    # The simulator's received copies: every slot of Message, the header dict shared.
    for copy in received:
        assert copy is not msg and copy == msg and copy.headers is msg.headers
        assert all(getattr(copy, slot) is getattr(msg, slot) for slot in Message.__slots__)
    assert [m.known_app for m in copies] == [app] * len(copies)
    assert [m.app for m in copies] == ["A:2:7"] * len(copies)
    assert Message("A", "B", payload).known_app is None and Message("A", "B", payload).app == "A:2:7"


def test_messages_that_carry_their_app_id_log_what_their_payloads_say():
    """A pair logs the same events and delivers the same messages whether or not messages carry
    their app id (the simulator's do; frames a real transport decodes do not)."""
    with_ids = transfer(*pair(), 6, known_app=True)
    without = transfer(*pair(), 6, known_app=False)
    assert with_ids[1] == without[1]
    apps = [f"A:0:{i}" for i in range(1, 7)]
    for kind in ("send", "deliver"):
        assert [ev["app"] for ev in with_ids[1] if ev["kind"] == kind] == apps
    assert [m.known_app for m in with_ids[0]] == apps
    assert [m.known_app for m in without[0]] == [None] * 6


class _ReadOnlyHeadersCodec(ObjectCodec):
    """ObjectCodec whose received messages have read-only headers: a layer writing to a received
    message's header dict (which ObjectCodec shares with the sender's window) raises."""

    @staticmethod
    def decode_frame(data: tuple) -> tuple[str, list[Message]]:
        src, msgs = ObjectCodec.decode_frame(data)
        for msg in msgs:
            msg.headers = MappingProxyType(msg.headers)  # type: ignore[assignment]
        return src, msgs


@pytest.mark.parametrize(
    "path",
    [
        "scenarios/loss-20.yaml",
        "scenarios/gms-two-way-split.yaml",
        "scenarios/one-way-split-resync.yaml",
        "scenarios/nakack2-loss.yaml",
        "scenarios/bugs/nakack2-become-server-queue.yaml",
        "scenarios/mcast-loss.yaml",
        "scenarios/bugs/jgrp-1875-timestamp.yaml",
        "scenarios/bugs/unicast2-asymmetric-split.yaml",
        "scenarios/bugs/unicast-asymmetric-split.yaml",
    ],
)
def test_no_layer_changes_the_headers_of_a_message_it_received(path):
    """Every protocol's scenario runs the same with read-only received headers: the simulator may
    share a sent message's header dict with its receivers (harness/sim/codec.py)."""
    with pytest.raises(TypeError):
        _ReadOnlyHeadersCodec.decode_frame(("A", [Message("A", "B", b"", {3: 1})]))[1][0].headers[3] = 2
    scenario = load_scenario(ROOT / path)
    shared = Simulation(scenario).run()
    read_only = Simulation(scenario, codec=_ReadOnlyHeadersCodec()).run()
    assert read_only.events == shared.events
    assert not [ev for evs in read_only.events.values() for ev in evs if ev["kind"] == "error"]
