"""NAKACK2's fast paths against the exact slow paths: a batch of multicasts sent at once (one
record for its send and loopback events), a run of in-order MSGs received at once, and the
copies of a multicast encoded once per flush."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from splitbrain.node.compose import build_stack
from splitbrain.node.events import EVENT_VERSION, DataEvents, unpack_events
from splitbrain.node.layer import Down, DownBatch, Log, Up, ViewChange
from splitbrain.node.message import MCAST_DEST, Message, app_id_of, app_payload
from splitbrain.node.nakack2.config import Nakack2Config
from splitbrain.node.nakack2.header import PROTO_ID, MsgType, N2Header
from splitbrain.node.nakack2.protocol import Nakack2
from splitbrain.node.unicast3.protocol import Unicast3
from splitbrain.node.wire import decode_frame, split_into_frames

ALL = ("A", "B", "C")


def _member(name: str, config: dict[str, Any] | None = None) -> Nakack2:
    layer = Nakack2(name, Nakack2Config(**(config or {})), random.Random(1))
    layer.command(ViewChange(members=ALL, view_id=1), 0.0)
    return layer


def _plain(actions: list[Any]) -> list[Any]:
    """Actions as comparable values: events as dicts, messages as their fields."""
    out: list[Any] = []
    for a in actions:
        if type(a) is Log:
            out.append(("log", unpack_events([a.event])))
        elif type(a) in (Up, DownBatch):
            out.append((type(a).__name__, [(m.src, m.dest, m.payload, dict(m.headers)) for m in a.msgs]))
        elif type(a) is Down:
            out.append(("Down", (a.msg.src, a.msg.dest, a.msg.payload, dict(a.msg.headers))))
        else:
            out.append(a)
    return out


def _old_own_events(t: float, node: str, members: list[str], first: int, msgs: list[Message]) -> list[dict]:
    """The two event dicts per multicast NAKACK2 built before its send record."""
    out = []
    for seqno, msg in enumerate(msgs, first):
        for kind in ("send", "deliver"):
            ev: dict[str, Any] = {"v": EVENT_VERSION, "t": t, "node": node, "proto": "nakack2", "kind": kind}
            if kind == "send":
                ev["members"] = members
            else:
                ev["peer"] = node
            ev["seqno"] = seqno
            ev["bytes"] = len(msg.payload)
            app = app_id_of(msg.payload)
            if app is not None:
                ev["app"] = app
            out.append(ev)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=8), st.booleans())
def test_a_batch_of_multicasts_equals_sending_them_one_by_one(batches, data_events):
    """Stack.send_batch of multicasts (one send record per batch) has the effect of send() per
    message: the same frames, deliveries and event dicts as NAKACK2 built them before; with no
    event log reading them (data_events off) no send or deliver event at all, the rest the same."""
    stacks = [build_stack("A", "nakack2", {}, random.Random(9)) for _ in range(2)]
    for s in stacks:
        s.command(ViewChange(members=ALL, view_id=1), 0.0)
        s.take()
        for layer in s.layers:
            layer.data_events = data_events
    n = 0
    expected: list[dict] = []
    for i, (count, app) in enumerate(batches):
        t = 1.0 + i
        payloads = [app_payload("A", 0, n + k, 30) if app else bytes(range(k + 1)) for k in range(1, count + 1)]
        for m in (Message("A", MCAST_DEST, p) for p in payloads):
            stacks[0].send(m, t)
        batch = [Message("A", MCAST_DEST, p) for p in payloads]
        stacks[1].send_batch(batch, t)
        expected += _old_own_events(t, "A", list(ALL), n + 1, batch)
        n += count
    (net0, app0, ev0), (net1, app1, ev1) = stacks[0].take(), stacks[1].take()
    assert net0 == net1 and app0 == app1 and ev0 == ev1
    assert stacks[0].layer(Nakack2).snapshot() == stacks[1].layer(Nakack2).snapshot()
    data = [e for e in ev1 if e["kind"] in ("send", "deliver")]
    assert data == (expected if data_events else [])
    if data_events:
        assert all(e["members"] is ev1[0]["members"] for e in data if e["kind"] == "send")


# A receiver's inputs: messages from A and C in any order, duplicated, in batches from one source,
# with XMIT_RSPs, STABLEs, HIGHEST_SEQNOs and unicasts among them.
def _msg(src: str, kind: str, seqno: int) -> Message:
    payload = app_payload(src, 0, seqno, 20)
    if kind == "msg":
        return Message(src, "B", payload, {PROTO_ID: N2Header(MsgType.MSG, seqno)})
    if kind == "rsp":  # A's multicast resent by C
        return Message(src, "B", payload, {PROTO_ID: N2Header(MsgType.XMIT_RSP, seqno, orig="A")})
    if kind == "stable":
        return Message(src, "B", b"", {PROTO_ID: N2Header(MsgType.STABLE, digest=(("A", seqno), ("B", 0)))})
    if kind == "highest":
        return Message(src, "B", b"", {PROTO_ID: N2Header(MsgType.HIGHEST_SEQNO, seqno)})
    return Message(src, "B", payload)  # a unicast for the layers above


inputs = st.lists(
    st.tuples(
        st.sampled_from(["A", "C"]),
        st.lists(
            # seqno = the sender's next one + this offset: small gaps, filled soon, and old seqnos
            st.tuples(st.sampled_from(["msg"] * 6 + ["rsp", "stable", "highest", "unicast"]), st.integers(-4, 2)),
            min_size=1,
            max_size=12,
        ),
        st.booleans(),  # an in-order run first: the next seqnos of that sender
    ),
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(inputs, st.booleans(), st.sampled_from([100_000, 5]), st.sampled_from([10**6, 300]))
def test_an_in_order_run_received_at_once_equals_the_message_by_message_path(batches, data_events, window, stable):
    """Up with the leading in-order run of MSGs taken at once (_take_run) gives exactly the
    actions, events, state and counters of the per-message path, whatever the batches hold."""
    config = {"max_recv_window_seqnos": window, "stable_max_bytes": stable}
    fast, slow = _member("B", config), _member("B", config)
    slow._take_run = lambda msgs, start, now, out: start  # type: ignore[method-assign]
    fast.data_events = slow.data_events = data_events
    next_of = {"A": 1, "C": 1}
    for i, (src, items, run_first) in enumerate(batches):
        specs = []
        if run_first:
            specs = [("msg", next_of[src] + k) for k in range(3)]
            next_of[src] += 3
        for kind, offset in items:
            seqno = max(0, next_of[src] + offset)
            specs.append((kind, seqno))
            if kind == "msg" and seqno >= next_of[src]:
                next_of[src] = seqno + 1
        now = 0.1 * (i + 1)
        outs = []
        for layer in (fast, slow):
            outs.append(_plain(layer.up([_msg(src, kind, seqno) for kind, seqno in specs], now)))
            layer.check_invariants()
        assert outs[0] == outs[1]
        assert fast.snapshot() == slow.snapshot()
        assert fast._bytes_since_stable == slow._bytes_since_stable
    assert fast.windows() == slow.windows()


@settings(max_examples=100, deadline=None)
@given(inputs, st.booleans())
def test_multicasts_handed_up_pass_unicast3_as_its_up_passes_them(batches, view):
    """NAKACK2's deliveries (Up.multicasts) go through UNICAST3's up_multicasts, which neither
    looks at each message nor changes anything up() would not: the same deliveries, frames,
    events, state and timers as a stack whose UNICAST3 takes them with up(). Without a view
    (no command has armed UNICAST3's timer yet) NAKACK2 delivers from any sender."""
    fast, slow = (build_stack("B", "nakack2", {}, random.Random(3)) for _ in range(2))
    u3 = slow.layer(Unicast3)
    u3.up_multicasts = u3.up  # type: ignore[method-assign]
    for s in (fast, slow):
        if view:
            s.command(ViewChange(members=ALL, view_id=1), 0.0)
    next_of = {"A": 1, "C": 1}
    for i, (src, items, run_first) in enumerate(batches):
        specs = [("msg", next_of[src] + k) for k in range(3)] if run_first else []
        next_of[src] += 3 if run_first else 0
        for kind, offset in items:
            specs.append((kind, max(0, next_of[src] + offset)))
            next_of[src] = max(next_of[src], specs[-1][1] + 1) if kind == "msg" else next_of[src]
        now = 0.7 * (i + 1)  # UNICAST3's timer fires between batches, and up() arms it again
        for s in (fast, slow):
            s.on_timer(now)
            s.receive([_msg(src, kind, seqno) for kind, seqno in specs], now)
        assert fast.take() == slow.take()
        assert [layer.snapshot() for layer in fast.layers] == [layer.snapshot() for layer in slow.layers]
        assert fast.layer(Unicast3).timers.at == u3.timers.at


def test_a_frame_of_in_order_multicasts_is_taken_as_one_run():
    """The common case does take the fast path: a frame of A's next multicasts is one run."""
    b = _member("B")
    taken = []
    real = b._take_run

    def spy(msgs, start, now, out):
        taken.append(real(msgs, start, now, out) - start)
        return start + taken[-1]

    b._take_run = spy  # type: ignore[method-assign]
    b.up([_msg("A", "msg", 1)], 0.1)  # the first input arms the layer: per message
    out = b.up([_msg("A", "msg", s) for s in range(2, 12)], 0.2)
    assert taken == [10]  # the first input has no table yet: up() goes per message without asking
    assert [type(a) for a in out] == [Log, Up] and len(out[1].msgs) == 10
    assert b.tables["A"].delivered == 11


def test_copies_of_a_multicast_are_encoded_once_per_flush_with_the_same_bytes():
    """split_into_frames with a memo shared by the dests of one flush gives the frames it gives
    without; a message that shares a headers dict but not the payload is encoded anew."""
    hdrs = [{PROTO_ID: N2Header(MsgType.MSG, s)} for s in range(1, 40)]
    payloads = [app_payload("A", 0, s, 200) for s in range(1, 40)]
    queues: dict[str, list[Message]] = {d: [] for d in ("B", "C", "D")}
    for h, p in zip(hdrs, payloads):
        for dest in queues:
            queues[dest].append(Message("A", dest, p, h))
    queues["D"].append(Message("A", "D", b"other payload", hdrs[0]))
    queues["C"].append(Message("A", "C", b"", {PROTO_ID: N2Header(MsgType.STABLE, digest=(("A", 3),))}))
    memo: dict[int, tuple[bytes, bytes]] = {}
    for msgs in queues.values():
        shared = split_into_frames("A", msgs, 2_000, memo)
        assert shared == split_into_frames("A", msgs, 2_000)
        decoded = [m for f in shared for m in decode_frame(f)[1]]
        assert [(m.payload, m.headers) for m in decoded] == [(m.payload, m.headers) for m in msgs]


def test_send_records_count_two_events_per_multicast():
    """A send record stands for a send and a loopback deliver per message (the log counts both)."""
    msgs = [Message("A", MCAST_DEST, app_payload("A", 0, n, 10)) for n in (1, 2, 3)]
    rec = DataEvents(2.5, "A", "nakack2", "send", None, None, 1, msgs, list(ALL))
    assert len(rec) == 6 == len(rec.dicts())
    assert rec.dicts() == _old_own_events(2.5, "A", list(ALL), 1, msgs)


def test_runs_after_control_messages_are_taken_and_joined_as_message_by_message():
    """A run of MSGs after a STABLE or a resent MSG of the same sender is taken at once too, and
    one that goes on from the Up returned last joins it (one Up, one record) as the per-message
    path joins it."""
    for data_events in (True, False):
        fast, slow = _member("B"), _member("B")
        slow._take_run = lambda msgs, start, now, out: start  # type: ignore[method-assign]
        fast.data_events = slow.data_events = data_events
        taken: list[int] = []
        real = fast._take_run

        def spy(msgs, start, now, out, real=real, taken=taken):
            end = real(msgs, start, now, out)
            taken.append(end - start)
            return end

        fast._take_run = spy  # type: ignore[method-assign]
        batches = [
            [_msg("C", "msg", 1)],  # arms the layers: per message
            [_msg("A", "msg", 1)],
            [_msg("A", "msg", s) for s in (2, 3)] + [_msg("A", "stable", 3)] + [_msg("A", "msg", s) for s in (4, 5)],
            [_msg("A", "rsp", 6)] + [_msg("A", "msg", s) for s in (7, 8, 9)],
            [_msg("C", "rsp", 10)] + [_msg("C", "msg", s) for s in (2, 3)],  # C resends A's 10: no join
        ]
        for i, batch in enumerate(batches):
            now = 0.1 * (i + 1)
            outs = [_plain(layer.up([_msg(m.src, *_spec(m)) for m in batch], now)) for layer in (fast, slow)]
            assert outs[0] == outs[1]
            assert fast.snapshot() == slow.snapshot()
        # Per batch: (no table yet: none asked) twice; 2, the STABLE, 2; none (a resent MSG first),
        # 3 joined; none, C's 2 in an Up of their own.
        assert taken == [2, 2, 0, 3, 0, 2]
        assert fast.tables["A"].delivered == 10 and fast.tables["C"].delivered == 3


def _spec(msg: Message) -> tuple[str, int]:
    """(kind, seqno) of a message _msg built, to build it again for the other layer."""
    hdr = msg.headers[PROTO_ID]
    kind = {MsgType.MSG: "msg", MsgType.XMIT_RSP: "rsp", MsgType.STABLE: "stable"}[hdr.type]
    return kind, hdr.digest[0][1] if kind == "stable" else hdr.seqno


def _up_by_receive(layer: Nakack2, msg: Message, now: float) -> list[Any]:
    """up() of one MSG the exact way: counted, then every check of _receive (the slow path)."""
    out: list[Any] = []
    if not layer._armed:
        layer._arm(now)
    layer._count("rx_MSG")
    layer._receive(msg.src, msg.headers[PROTO_ID].seqno, msg, now, out)
    if layer._bytes_since_stable >= layer.config.stable_max_bytes:
        layer._stable_round(now, out)
    return out


def test_msgs_taken_inline_by_up_act_as_receive_does():
    """A's MSGs one per input, out of order with duplicates and one beyond the receive window: up()
    takes the new ones inside the window inline, and acts on every one as _receive does."""
    fast = _member("B", {"max_recv_window_seqnos": 10})
    slow = _member("B", {"max_recv_window_seqnos": 10})
    received = []
    real = fast._receive

    def spy(sender: str, seqno: int, msg: Message, now: float, out: list[Any]) -> None:
        received.append(seqno)
        real(sender, seqno, msg, now, out)

    fast._receive = spy  # type: ignore[method-assign]
    for i, seqno in enumerate([1, 3, 4, 3, 2, 6, 30, 5, 1, 7]):
        now = 0.1 * (i + 1)
        assert _plain(fast.up([_msg("A", "msg", seqno)], now)) == _plain(
            _up_by_receive(slow, _msg("A", "msg", seqno), now)
        )
        fast.check_invariants()
        assert fast.snapshot() == slow.snapshot()
        assert fast._bytes_since_stable == slow._bytes_since_stable
    assert fast.tables["A"].delivered == 7
    # The first (no table yet), the duplicates and the one beyond the window took _receive.
    assert received == [1, 3, 30, 1]
