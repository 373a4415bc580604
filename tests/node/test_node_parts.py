"""Pieces of the node runtime in isolation: payloads, delivered bookkeeping, event-log encoding, bundler."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitbrain.node.events import DataEvents, make_event, unpack_events
from splitbrain.node.message import Message, app_payload
from splitbrain.node.runtime.bundler import Bundler
from splitbrain.node.runtime.eventlog import EventLog
from splitbrain.node.runtime.workload import Delivered, Stream, StreamStats, make_payloads
from splitbrain.node.unicast3 import PROTO_ID, MsgType, U3Header
from splitbrain.node.wire import decode_frame, split_into_frames


@given(
    sender=st.text(st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), min_size=1, max_size=20),
    stream=st.integers(0, 10**6),
    n=st.integers(1, 10**12),
    size=st.integers(0, 300),
)
def test_make_payloads_of_one_is_app_payload(sender, stream, n, size):
    """The stream's fast payload builder, for one message, produces exactly node.message.app_payload."""
    try:
        expected = app_payload(sender, stream, n, size)
    except ValueError:
        return
    assert make_payloads(f"{sender}:{stream}:".encode(), n, n, size) == [expected]


@given(
    sender=st.text(st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), min_size=1, max_size=70),
    stream=st.integers(0, 10**6),
    first=st.one_of(st.integers(0, 10**12), st.sampled_from([0, 1, 8, 9, 95, 999, 9990, 10**11 - 3])),
    count=st.integers(0, 30),
    size=st.integers(0, 300),
)
def test_make_payloads_is_app_payload_for_each_n(sender, stream, first, count, size):
    """A stream's batch of payloads, across changes in the number's digit count (9 -> 10, 999 ->
    1000), is exactly app_payload for each n, or the same ValueError."""
    prefix = f"{sender}:{stream}:".encode()
    last = first + count - 1
    try:
        expected = [app_payload(sender, stream, n, size) for n in range(first, last + 1)]
    except ValueError:
        with pytest.raises(ValueError, match="too long"):
            make_payloads(prefix, first, last, size)
        return
    assert make_payloads(prefix, first, last, size) == expected


@settings(max_examples=200)
@given(st.lists(st.integers(1, 60), max_size=200))
def test_stream_stats_match_a_model(ns):
    """Order violations, duplicates, first/last and count agree with a plain set model."""
    stats = StreamStats()
    seen, highest, violations, dups = set(), 0, 0, 0
    for n in ns:
        stats.add(n)
        if n in seen:
            dups += 1
        elif n < highest:
            violations += 1
        seen.add(n)
        highest = max(highest, n)
    assert stats.count == len(ns)
    assert stats.duplicates == dups and stats.order_violations == violations
    assert stats.first == (ns[0] if ns else None) and stats.last == (ns[-1] if ns else None)
    covered = {v for lo, hi in stats.ranges for v in range(lo, hi + 1)}
    assert covered == seen
    ranges = stats.ranges
    assert all(a_hi + 1 < b_lo for (_, a_hi), (b_lo, _) in zip(ranges, ranges[1:]))


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.sampled_from(["A:0", "A:1", "B:0"]), st.integers(1, 40)), max_size=150),
    st.lists(st.integers(1, 20), min_size=1, max_size=10),
)
def test_delivered_batches_match_one_by_one(items, cuts):
    """Recording runs of a batch at once gives the same stats as adding every n one by one."""
    msgs = [Message("x", "y", app_payload(key.split(":")[0], int(key.split(":")[1]), n, 20)) for key, n in items]
    d = Delivered()
    i = 0
    for k in range(len(msgs)):
        size = cuts[k % len(cuts)]
        d.add_batch(msgs[i : i + size], 1.0)
        i += size
        if i >= len(msgs):
            break
    model: dict[str, StreamStats] = {}
    for key, n in items:
        model.setdefault(key, StreamStats()).add(n)
    got = d.to_dict()["delivered"]
    for key, stats in model.items():
        sender, stream = key.split(":")
        assert got[sender][stream] == stats.to_dict()
        assert d.by_key[key.encode()].ranges == stats.ranges
    assert d.total == len(items)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A:0", "A:1", "B:0"]),
            st.integers(1, 1_100),
            st.one_of(st.integers(1, 40), st.integers(250, 600)),  # long runs: chunks up to 256
            st.sampled_from(["", "leading zero", "longer id", "other magic", "cut short", "not a workload payload"]),
        ),
        max_size=10,
    ),
    st.one_of(st.integers(1, 60), st.integers(300, 1_000)),
)
def test_runs_of_app_ids_in_a_batch_are_recorded_as_one_by_one(runs, size):
    """add_batch compares the next app id of a run as bytes instead of parsing it: the same
    stats, samples and counts as a batch per message (which parses every one), across digit
    changes (9 -> 10, 99 -> 100) and with ids that look like the next one but are not."""
    payloads = []
    for key, start, length, odd in runs:
        sender, stream = key.split(":")
        payloads += [app_payload(sender, int(stream), n, 20) for n in range(start, start + length)]
        nxt = app_payload(sender, int(stream), start + length, 20)
        if odd == "leading zero":
            app = f"{key}:0{start + length}".encode()
            payloads.append(b"SB%c%s" % (len(app), app))
        elif odd == "longer id":  # the next id's bytes and one digit more: n x 10
            payloads.append(app_payload(sender, int(stream), (start + length) * 10, 20))
        elif odd == "other magic":
            payloads.append(b"SX" + nxt[2:])
        elif odd == "cut short":
            payloads.append(nxt[: 2 + nxt[2]])
        elif odd:
            payloads.append(b"payload")
    msgs = [Message("x", "y", p) for p in payloads]
    batched, one_by_one = Delivered(), Delivered()
    for i in range(0, len(msgs), size):
        batched.add_batch(msgs[i : i + size], 1.0 + i)
    for i, msg in enumerate(msgs):
        one_by_one.add_batch([msg], 1.0 + i - i % size)
    assert batched.to_dict() == one_by_one.to_dict()
    assert batched.samples() == one_by_one.samples()
    assert (batched.total, batched.other) == (one_by_one.total, one_by_one.other)
    for key, stats in batched.by_key.items():
        assert stats.ranges == one_by_one.by_key[key].ranges


def test_in_order_stream_is_one_range():
    """A million in-order deliveries keep one range: memory does not grow with the stream."""
    stats = StreamStats()
    for n in range(1, 1_000_001):
        stats.add(n)
    assert stats.ranges == [(1, 1_000_000)] and stats.count == 1_000_000


def test_delivered_parses_app_ids_and_samples():
    """Delivered bookkeeping keys by (sender, stream) from the payload and ignores other payloads."""
    d = Delivered()
    msgs = [Message("A", "B", app_payload("A", 3, n, 50)) for n in range(1, 130)]
    msgs += [Message("C", "B", app_payload("C", 0, 1)), Message("C", "B", b"not a workload payload")]
    d.add_batch(msgs, 1.5)
    out = d.to_dict()
    assert out["total"] == 131
    assert out["delivered"]["A"]["3"] == {"count": 129, "first": 1, "last": 129, "order_violations": 0, "duplicates": 0}
    assert out["delivered"]["C"]["0"]["count"] == 1
    assert d.samples()["A"]["3"] == [[64, 1.5], [128, 1.5]]


def test_stream_pacing():
    """A paced stream sends rate x elapsed (+1, the first goes at once), capped by count."""
    s = Stream("A", 0, ["B"], count=None, duration=1.0, rate=100.0, size=10, started=10.0)
    assert s.planned == 100
    assert s.due(10.0, 1000) == 1
    s.sent = 1
    assert s.due(10.5, 1000) == 50
    assert s.due(10.5, 20) == 20
    s.sent = 100
    assert s.finished(10.99) and s.due(11.5, 1000) == 0
    fast = Stream("A", 1, ["B"], count=5, duration=None, rate=0.0, size=10, started=0.0)
    assert fast.due(0.0, 3) == 3 and fast.planned == 5


# ---- event log --------------------------------------------------------------------------------


names = st.text(min_size=1, max_size=8)
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)


odd = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), floats, st.text(max_size=3))
shared_t = 1.25  # one float object, as the events of one input share their `now`


@st.composite
def events(draw):
    kind = draw(st.sampled_from(["send", "deliver", "ack_tx", "window"]))
    if kind in ("send", "deliver"):
        ev = {
            "v": 1,
            "t": draw(st.one_of(floats, st.just(shared_t))),
            "node": draw(st.sampled_from(["A", "B", "%s"])),
            "proto": "unicast3",
            "kind": kind,
            "peer": draw(names),
            "seqno": draw(st.integers(0, 2**63)),
            "conn_id": draw(st.sampled_from([1, 2, 2**32])),
            "bytes": draw(st.integers(0, 10**6)),
        }
        if draw(st.booleans()):
            ev["app"] = draw(st.text(max_size=12))
        if draw(st.integers(0, 9)) == 0:
            # A value of the wrong type must fall back to the json encoder, never be formatted.
            ev[draw(st.sampled_from(sorted(ev)))] = draw(odd)
        return ev
    return make_event(
        draw(floats),
        draw(names),
        "unicast3",
        kind,
        peer=draw(names),
        seqno=draw(st.integers(0, 100)),
        final=draw(st.booleans()) or None,
    )


@settings(max_examples=500, deadline=None)  # a temporary file per example: slow on a busy machine
@given(st.lists(events(), max_size=30))
def test_event_log_encoding_is_json(evs):
    """The hand-formatted hot path writes exactly what json would: each line loads back equal."""
    loop = asyncio.new_event_loop()
    try:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            log = EventLog(f"{tmp}/e.jsonl", loop)
            data = log.encode(evs).decode()
            log.close()
    finally:
        loop.close()
    lines = data.split("\n")
    assert lines[-1] == ""
    assert [json.loads(line) for line in lines[:-1]] == evs


payloads = st.one_of(
    st.builds(app_payload, names, st.integers(0, 9), st.integers(1, 10**9), st.integers(0, 120)),
    st.binary(max_size=40),  # no app id: the line has no "app"
)
# Senders a workload could name: printable ASCII (JSON writes them as they are), '%' (a format
# character of the writer's templates) and '"' or '\\' (which JSON escapes) included.
ascii_senders = st.text(st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters=":"), min_size=1)
odd_floats = st.sampled_from([0.0, -0.0, 5e-324, 1e-7, 0.1, 1e16, 1.7976931348623157e308, 1764093732.1234567])


@st.composite
def stream_payloads(draw):
    """A run of one stream's payloads: app ids n, n+1, ... of one sender, of one size (or mixed
    sizes), as a workload sends them: what the writer's one-format-per-record path takes."""
    sender = draw(st.one_of(ascii_senders, names))
    first = draw(st.integers(1, 10**12))
    count = draw(st.integers(1, 12))
    size = draw(st.integers(0, 64))
    one_size = draw(st.booleans())
    sizes = [size] * count if one_size else draw(st.lists(st.integers(0, 64), min_size=count, max_size=count))
    return [app_payload(sender, 0, first + i, size) for i, size in enumerate(sizes)]


@st.composite
def same_size_payloads(draw):
    """Payloads of one size, most with app ids of one length (what the writer reads at fixed
    offsets, in blocks of 64), some breaking that layout in one byte: another id length, no
    b"SB", an id longer than the payload, an id JSON must escape, or random bytes."""
    size = draw(st.integers(3, 24))
    length = draw(st.integers(0, size - 3))
    ids = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=length, max_size=length)
    tail = st.binary(min_size=size - 3 - length, max_size=size - 3 - length)
    count = draw(st.sampled_from([1, 2, 5, 63, 64, 65, 130]))
    out = [b"SB%c%s%s" % (length, draw(ids).encode(), draw(tail)) for _ in range(count)]
    if draw(st.booleans()):
        i, at = draw(st.integers(0, count - 1)), draw(st.integers(0, size - 1))
        bad = bytearray(out[i])
        bad[at] = draw(st.integers(0, 255))
        out[i] = bytes(bad)
    return out


@settings(max_examples=200, deadline=None)  # a temporary file per example: slow on a busy machine
@given(
    st.lists(
        st.tuples(
            st.one_of(floats, odd_floats, st.integers(0, 5)),
            st.one_of(names, st.just("%d%%s")),
            st.sampled_from(["send", "deliver"]),
            st.integers(1, 2**40),
            st.one_of(st.lists(payloads, min_size=1, max_size=5), stream_payloads(), same_size_payloads()),
            st.sampled_from([7, None]),
            st.one_of(st.none(), st.lists(names, min_size=1, max_size=3)),
        ),
        max_size=6,
    ),
    st.lists(st.integers(0, 10), max_size=4),
)
def test_event_records_write_the_lines_of_their_dicts(records, other_at):
    """A DataEvents record (with a conn_id, or without as NAKACK2's, or a multicast sender's with
    `members`: a send and a loopback deliver per message) is written byte for byte as the dicts
    it stands for (which it never builds), mixed with other events in any order, and counts as
    one event per event it stands for."""
    evs: list = [
        DataEvents(t, "A", "unicast3", kind, peer, conn_id, first, [Message("A", peer, p) for p in msgs])
        if members is None
        else DataEvents(t, "A", "nakack2", "send", None, None, first, [Message("A", "*", p) for p in msgs], members)
        for t, peer, kind, first, msgs, conn_id, members in records
    ]
    for i in other_at:
        evs.insert(min(i, len(evs)), make_event(1.5, "A", "unicast3", "ack_tx", peer="B", seqno=i))
    flat = unpack_events(evs)
    assert len(flat) == sum(len(ev) if isinstance(ev, DataEvents) else 1 for ev in evs)
    loop = asyncio.new_event_loop()
    try:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            log = EventLog(f"{tmp}/e.jsonl", loop, runs=False)  # one line per message (v1)
            assert log.encode(evs) == log.encode(flat)
            enc = json.JSONEncoder(separators=(",", ":"))
            assert log.encode(evs) == "".join(enc.encode(ev) + "\n" for ev in flat).encode()
            log.extend(evs)
            assert log.pending == len(flat)
            log.close()
            assert log.written == len(flat)
    finally:
        loop.close()


def test_workload_records_take_the_one_format_path_and_others_fall_back(tmp_path):
    """A record of a workload stream is formatted in one go; one whose app ids JSON must escape,
    or with a payload that has no (or a cut) app id, goes line by line; both write the lines of its dicts."""
    enc = json.JSONEncoder(separators=(",", ":"))

    def record(sender: str, extra: bytes | None = None, first: int = 998, count: int = 5) -> DataEvents:
        msgs = [Message(sender, "B", p) for p in make_payloads(f"{sender}:0:".encode(), first, first + count - 1, 100)]
        if extra is not None:
            msgs.append(Message(sender, "B", extra))
        return DataEvents(1764093732.5, "B", "unicast3", "deliver", "%s", 7, 2**40, msgs)

    loop = asyncio.new_event_loop()
    try:
        log = EventLog(tmp_path / "e.jsonl", loop, runs=False)  # one line per message (v1)
        for rec, one_go in [
            (record("A%d"), True),
            (record("A", first=1000, count=130), True),  # app ids read at fixed offsets: 2 blocks and a rest
            (record("Ä"), False),
            (record('A"'), False),
            (record("A", extra=b"no app id"), False),
            (record("A", extra=b""), False),
            (record("A", extra=b"SB\x05ab"), False),  # an app id cut short
        ]:
            expected = "".join(enc.encode(ev) + "\n" for ev in rec.dicts()).encode()
            assert (log._record_block(rec) is not None) is one_go
            assert (log._aligned_app_ids([m.payload for m in rec.msgs]) is not None) is (len(rec) == 130)
            assert log.encode([rec]) == expected
        log.close()
    finally:
        loop.close()


def test_stack_take_gives_the_dicts_of_its_records():
    """Stack.take() hands out dicts (what the simulator and tests read); take_packed() the records,
    which stand for exactly those dicts; a delivered batch is one record, not one per message."""
    from splitbrain.node.compose import build_stack
    from splitbrain.node.layer import ViewChange

    sender, receivers = build_stack("A", "unicast3", {}, random.Random(1)), []
    for _ in range(2):
        b = build_stack("B", "unicast3", {}, random.Random(2))
        b.command(ViewChange(members=("A", "B"), view_id=1), 0.0)
        b.take()
        receivers.append(b)
    sender.send_batch([Message("A", "B", app_payload("A", 0, n, 50)) for n in range(1, 21)], 0.0)
    frames, _, _ = sender.take()
    sync = None
    for b in receivers:
        b.receive(decode_frame(split_into_frames("A", frames)[0])[1], 0.5)
        out, _, _ = b.take()  # no window yet: SYNC, messages cached
        sync = out
    sender.receive(decode_frame(split_into_frames("B", sync)[0])[1], 0.6)
    sync_ok, _, _ = sender.take()
    for b in receivers:
        b.receive(decode_frame(split_into_frames("A", sync_ok)[0])[1], 0.7)
    net_a, app_a, dicts = receivers[0].take()
    net_b, app_b, records = receivers[1].take_packed()
    assert net_a == net_b and app_a == app_b
    assert len(app_a) == len(app_b) == 20
    assert [e for e in records if isinstance(e, DataEvents)] and len(records) < len(dicts)
    assert unpack_events(records) == dicts
    assert [e["seqno"] for e in dicts if e["kind"] == "deliver"] == list(range(1, 21))


def test_event_log_appends_and_flushes(tmp_path):
    """The log appends to an existing file (a restarted node continues it) and flushes on close."""
    path = tmp_path / "n" / "events.jsonl"
    loop = asyncio.new_event_loop()
    try:
        for i in range(2):
            log = EventLog(path, loop)
            log.append(make_event(float(i), "A", "node", "node_start", incarnation=i))
            log.close()
            log.append(make_event(9.0, "A", "node", "node_stop", reason="late"))  # ignored after close
    finally:
        loop.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [ev["incarnation"] for ev in lines] == [0, 1]


# ---- bundler ----------------------------------------------------------------------------------


class _Recorder:
    def __init__(self):
        self.frames: list[tuple[str, bytes]] = []

    def send(self, peer, frame):
        self.frames.append((peer, frame))


def _data(dest: str, seqno: int, size: int = 100) -> Message:
    return Message("A", dest, app_payload("A", 0, seqno, size), {PROTO_ID: U3Header(MsgType.DATA, seqno, 7)})


def test_bundler_packs_one_iteration_into_few_frames():
    """Messages added during one loop iteration leave as one frame per destination, in order."""
    loop = asyncio.new_event_loop()
    rec = _Recorder()
    try:
        b = Bundler("A", loop, rec, 60_000, True)
        b.add([_data("B", n) for n in range(1, 101)])
        b.add([_data("C", 1)])
        b.add([_data("B", n) for n in range(101, 201)])
        assert rec.frames == []
        loop.call_soon(loop.stop)
        loop.run_forever()
    finally:
        loop.close()
    assert [peer for peer, _ in rec.frames] == ["B", "C"]
    src, msgs = decode_frame(rec.frames[0][1])
    assert src == "A" and [m.headers[PROTO_ID].seqno for m in msgs] == list(range(1, 201))


def test_bundler_respects_max_bytes_and_can_be_off():
    """Bundles stay under bundle_max_bytes; with bundling off every message is its own frame."""
    loop = asyncio.new_event_loop()
    rec = _Recorder()
    try:
        msgs = [_data("B", n, 1000) for n in range(1, 301)]
        b = Bundler("A", loop, rec, 20_000, True)
        b.add(msgs)
        b.flush()
        assert all(len(f) <= 20_000 for _, f in rec.frames) and len(rec.frames) > 10
        assert [f for _, f in rec.frames] == split_into_frames("A", msgs, 20_000)
        rec.frames.clear()
        off = Bundler("A", loop, rec, 20_000, False)
        off.add(msgs[:5])
        off.flush()
        assert len(rec.frames) == 5
    finally:
        loop.close()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 300), min_size=1, max_size=30),
    st.lists(st.sampled_from(["B", "C", "DD", "E"]), min_size=1, max_size=4, unique=True),
    st.sampled_from(["none", "extra", "other payload", "other headers", "dropped"]),
    st.one_of(st.integers(300, 3_000), st.integers(-1, 1)),
)
def test_a_flush_of_multicast_copies_sends_each_queue_as_encoded_alone(sizes, dests, change, max_bytes):
    """A flush whose queues hold a multicast's copies (shared headers and payloads; the frames of
    the first dest readdressed for the others) sends, per dest, the frames that dest's queue gives
    encoded alone, whatever the dest names' lengths and whether one queue holds something else.
    A max_bytes of -1..1 is the first dest's whole queue in one frame, plus that: a frame that fits
    exactly for one name length does not for a longer one."""
    originals = [
        (app_payload("A", 0, n, size), {PROTO_ID: U3Header(MsgType.DATA, n, 7)}) for n, size in enumerate(sizes, 1)
    ]
    queues = {d: [Message("A", d, p, h) for p, h in originals] for d in dests}
    if max_bytes <= 1:
        max_bytes += len(split_into_frames("A", queues[dests[0]], 10**6)[0])
    last = queues[dests[-1]]
    if change == "extra":
        last.append(_data(dests[-1], 999))
    elif change == "other payload":
        last[-1] = Message("A", dests[-1], bytes(len(last[-1].payload)), last[-1].headers)
    elif change == "other headers":
        last[0] = Message("A", dests[-1], last[0].payload, dict(last[0].headers))
    elif change == "dropped":
        del last[0]
    loop = asyncio.new_event_loop()
    rec = _Recorder()
    try:
        b = Bundler("A", loop, rec, max_bytes, True)
        for msgs in queues.values():
            b.add(msgs)
        b.flush()
    finally:
        loop.close()
    expected = [(d, f) for d, msgs in queues.items() if msgs for f in split_into_frames("A", msgs, max_bytes)]
    assert rec.frames == expected


def test_bundler_reports_unencodable_messages_and_sends_the_rest():
    """A message the wire cannot encode is reported; the others of the batch still go out."""
    loop = asyncio.new_event_loop()
    rec = _Recorder()
    errors = []
    try:
        b = Bundler("A", loop, rec, 60_000, True, on_error=lambda dest, exc: errors.append(dest))
        bad = Message("A", "B", b"x", {PROTO_ID: U3Header(MsgType.DATA, -1, 7)})  # seqno < 0: no encoding
        b.add([_data("B", 1), bad, _data("B", 2)])
        b.flush()
    finally:
        loop.close()
    assert errors == ["B"] and len(rec.frames) == 2


def test_random_bytes_never_escape_decode_as_anything_but_wire_error():
    """The runtime relies on decode_frame raising only WireError (a spot check with random input)."""
    from splitbrain.node.wire import WireError

    rng = random.Random(5)
    for _ in range(2000):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        try:
            decode_frame(data)
        except WireError:
            pass


def test_gc_policy_turns_automatic_collection_off_and_back_on():
    """The daemon's GC policy disables automatic collection, freezes on a timer, and restores."""
    import gc

    from splitbrain.node.runtime.runner import GcPolicy

    loop = asyncio.new_event_loop()
    was = gc.isenabled()
    try:
        policy = GcPolicy(loop, period_s=0.001)
        policy.start()
        assert not gc.isenabled()
        loop.run_until_complete(asyncio.sleep(0.05))
        assert policy.ticks >= 1
        policy.stop()
        assert gc.isenabled() == was
        assert gc.get_freeze_count() == 0  # nothing stays frozen after stop
    finally:
        loop.close()


def test_gc_policy_reclaims_cyclic_garbage_at_its_full_collection():
    """Objects made while the policy runs are frozen (no collection traverses them each second),
    yet a reference cycle dropped meanwhile is freed by the full collection every `full_every`
    ticks: the daemon's memory does not grow with cyclic garbage."""
    import gc
    import weakref

    from splitbrain.node.runtime.runner import GcPolicy

    class Node:
        other: Node | None = None

    loop = asyncio.new_event_loop()
    try:
        policy = GcPolicy(loop, period_s=0.001, full_every=5)
        policy.start()
        a, b = Node(), Node()
        a.other, b.other = b, a
        alive = weakref.ref(a)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert gc.get_freeze_count() > 0  # the first ticks froze what existed, the cycle too
        del a, b
        assert alive() is not None  # frozen: reference counting alone cannot free a cycle
        ticks = policy.ticks

        async def until_freed() -> None:
            for _ in range(2000):  # bounded: 2 s of ticks at most
                if alive() is None:
                    return
                await asyncio.sleep(0.001)

        loop.run_until_complete(until_freed())
        assert alive() is None, f"the cycle survived {policy.ticks - ticks} ticks"
        policy.stop()
    finally:
        loop.close()


@settings(max_examples=60)
@given(st.lists(st.tuples(st.sampled_from(["B", "C"]), st.integers(0, 50)), min_size=1, max_size=40), st.booleans())
def test_stack_send_batch_equals_send_one_by_one(sends, with_rule):
    """Stack.send_batch (used by the runtime) has exactly the effect of send() per message, with
    the fault layer routed around when it has no rules and used when it has one."""
    from splitbrain.node.compose import build_stack
    from splitbrain.node.faultlayer import FaultLayer, FaultRule

    stacks = [build_stack("A", "unicast3", {}, random.Random(9)) for _ in range(2)]
    if with_rule:
        for s in stacks:
            s.layer(FaultLayer).add_rule(FaultRule(direction="down", peer="C", types=frozenset({"DATA"}), count=3))
    for k, s in enumerate(stacks):
        msgs = [Message("A", dest, app_payload("A", 0, i, size)) for i, (dest, size) in enumerate(sends, 1)]
        if k == 0:
            for m in msgs:
                s.send(m, 1.0)
        else:
            s.send_batch(msgs, 1.0)
    (net0, app0, ev0), (net1, app1, ev1) = stacks[0].take(), stacks[1].take()
    assert net0 == net1 and app0 == app1 and ev0 == ev1
    assert stacks[0].layers[-1].snapshot() == stacks[1].layers[-1].snapshot()
