"""The wire format: round trips, and any byte string decodes to a frame or raises WireError."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from splitbrain.node import wire
from splitbrain.node.message import Message, app_payload
from splitbrain.node.nakack2.header import PROTO_ID as N2_ID
from splitbrain.node.nakack2.header import MsgType as N2Type
from splitbrain.node.nakack2.header import N2Header
from splitbrain.node.unicast3 import PROTO_ID, MsgType, U3Header

seqnos = st.integers(min_value=0, max_value=2**64 - 1)
conn_ids = st.integers(min_value=0, max_value=2**32 - 1)
ranges = st.lists(
    st.tuples(st.integers(0, 2**40), st.integers(0, 2**20)).map(lambda t: (t[0], t[0] + t[1])), max_size=8
).map(tuple)


@st.composite
def headers(draw):
    mtype = draw(st.sampled_from(list(MsgType)))
    kw = {"type": mtype, "first": draw(st.booleans())}
    if mtype in (MsgType.DATA, MsgType.ACK, MsgType.SYNC_OK):
        kw["seqno"] = draw(seqnos)
    kw["conn_id"] = draw(conn_ids)
    if mtype in (MsgType.ACK, MsgType.SEND_FIRST_SEQNO):
        kw["timestamp"] = draw(seqnos)
    if mtype is MsgType.SYNC_OK:
        kw["prev_conn_id"] = draw(conn_ids)
    if mtype is MsgType.XMIT_REQ:
        kw["ranges"] = draw(ranges)
    return U3Header(**kw)


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
messages = st.builds(lambda h, p: Message("", "", p, {PROTO_ID: h}), headers(), st.binary(max_size=300))


@given(names, names, st.lists(messages, min_size=1, max_size=20))
def test_frame_round_trip(src, dest, msgs):
    """Any frame of UNICAST3 messages decodes back to the same source, headers and payloads."""
    for m in msgs:
        m.src, m.dest = src, dest
    got_src, got = wire.decode_frame(wire.encode_frame(src, msgs))
    assert got_src == src and got == msgs


@settings(max_examples=500)
@given(st.binary(max_size=2000))
def test_random_bytes_decode_or_raise_wire_error(data):
    """Random bytes give a frame or WireError, never another exception."""
    try:
        wire.decode_frame(data)
    except wire.WireError:
        pass


@settings(max_examples=300)
@given(st.lists(messages, min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_mutated_frames_decode_or_raise_wire_error(msgs, rnd):
    """Valid frames with flipped, cut or inserted bytes give a frame or WireError, nothing else."""
    for m in msgs:
        m.src, m.dest = "A", "B"
    frame = bytearray(wire.encode_frame("A", msgs))
    for _ in range(rnd.randint(1, 4)):
        op = rnd.choice(("flip", "cut", "insert"))
        pos = rnd.randrange(len(frame))
        if op == "flip":
            frame[pos] ^= 1 << rnd.randrange(8)
        elif op == "cut":
            del frame[pos:]
            if not frame:
                frame = bytearray(b"\x01")
        else:
            frame[pos:pos] = bytes([rnd.randrange(256)])
    try:
        wire.decode_frame(bytes(frame))
    except wire.WireError:
        pass


def test_huge_length_fields_allocate_nothing():
    """A frame claiming 65535 messages or a 4 GB payload is rejected before any allocation."""
    head = bytes([wire.WIRE_VERSION, 0, 1]) + b"A" + bytes([1]) + b"B"
    for body in (b"\xff\xff" + b"\x00" * 10, b"\x00\x01" + b"\x00" + b"\xff\xff\xff\xff"):
        try:
            wire.decode_frame(head + body)
        except wire.WireError as exc:
            assert "claims" in str(exc) or "truncated" in str(exc)
        else:
            raise AssertionError("decoded a frame with an impossible length")


def test_unknown_version_and_protocol_are_wire_errors():
    """A frame of another wire version, or with an unknown protocol id, is a WireError naming it."""
    frame = bytearray(wire.encode_frame("A", [Message("A", "B", b"x", {PROTO_ID: U3Header(MsgType.CLOSE, conn_id=1)})]))
    bad_version = bytes([9]) + bytes(frame[1:])
    try:
        wire.decode_frame(bad_version)
    except wire.WireError as exc:
        assert "version 9" in str(exc)
    i = frame.index(bytes([PROTO_ID]), 7)
    frame[i] = 99
    try:
        wire.decode_frame(bytes(frame))
    except wire.WireError as exc:
        assert "unknown protocol id 99" in str(exc)


def test_data_header_is_compact():
    """A DATA message costs 14 header bytes plus 8 of message framing: compact like JGroups'."""
    msg = Message("A", "B", b"", {PROTO_ID: U3Header(MsgType.DATA, 5, 7, True)})
    assert len(wire.encode_message(msg)) == 1 + 3 + 14 + 4


def test_split_into_frames_respects_size_and_order():
    """Many messages split into frames under the size bound, in order, each decodable."""
    msgs = [
        Message("A", "B", app_payload("A", 0, i, 1000), {PROTO_ID: U3Header(MsgType.DATA, i, 1)}) for i in range(1, 200)
    ]
    frames = wire.split_into_frames("A", msgs, max_bytes=10_000)
    assert all(len(f) <= 10_000 for f in frames) and len(frames) > 10
    got = [m for f in frames for m in wire.decode_frame(f)[1]]
    assert [m.app for m in got] == [m.app for m in msgs]


def test_fuzz_decoder_with_random_garbage_for_a_bounded_count():
    """A bounded fuzz loop (seeded) over mixed garbage and truncated valid frames."""
    rnd = random.Random(1875)
    valid = wire.encode_frame("A", [Message("A", "B", b"p" * 30, {PROTO_ID: U3Header(MsgType.DATA, 1, 2)})] * 3)
    for _ in range(20_000):
        data = valid[: rnd.randrange(len(valid) + 1)] if rnd.random() < 0.5 else rnd.randbytes(rnd.randrange(64))
        try:
            wire.decode_frame(data)
        except wire.WireError:
            pass


def _generic_message(msg: Message) -> bytes:
    """A message laid out by the format's grammar, header by header through each codec's own
    encode: what the hot layouts (one struct call per DATA message) must match byte for byte."""
    out = bytes([len(msg.headers)])
    for proto_id, header in msg.headers.items():
        body = wire._CODECS[proto_id].encode(header)
        out += bytes([proto_id]) + len(body).to_bytes(2, "big") + body
    return out + len(msg.payload).to_bytes(4, "big") + msg.payload


@given(st.lists(messages, min_size=1, max_size=20))
def test_hot_layout_is_the_generic_layout(msgs):
    """UNICAST3 DATA through the hot layout gives the bytes of the generic layout, and frames of
    generic bytes decode (through the hot path where it applies) to the same messages."""
    for m in msgs:
        m.src, m.dest = "A", "B"
        assert wire.encode_message(m) == _generic_message(m)
    frame = wire.encode_frame("A", msgs)
    generic = frame[: frame.index(b"B") + 1] + len(msgs).to_bytes(2, "big") + b"".join(map(_generic_message, msgs))
    assert frame == generic
    assert wire.split_into_frames("A", msgs, 10**9) == [frame]
    assert wire.decode_frame(generic)[1] == msgs


def test_hot_layout_rejects_what_the_codec_rejects():
    """A DATA header with unknown flags, or a DATA message cut short, is a WireError on the hot path."""
    msg = Message("A", "B", b"payload", {PROTO_ID: U3Header(MsgType.DATA, 5, 7, False)})
    frame = wire.encode_frame("A", [msg])
    flags_at = len(frame) - len(b"payload") - 4 - 12 - 1
    assert frame[flags_at] == 0
    bad = frame[:flags_at] + b"\x02" + frame[flags_at + 1 :]
    for broken, why in ((bad, "flags"), (frame[:-1], "truncated")):
        try:
            wire.decode_frame(broken)
        except wire.WireError as exc:
            assert why in str(exc)
        else:
            raise AssertionError(f"decoded a frame that should fail ({why})")


n2_messages = st.builds(
    lambda s, p: Message("", "", p, {N2_ID: N2Header(N2Type.MSG, s)}), seqnos, st.binary(max_size=40)
)


def _decoded(frame: bytes) -> tuple:
    try:
        src, msgs = wire.decode_frame(frame)
    except wire.WireError:
        return ("WireError",)
    return (src, [(m.src, m.dest, m.payload, m.headers) for m in msgs])


@settings(max_examples=300)
@given(
    st.lists(st.one_of(messages, n2_messages, n2_messages), min_size=1, max_size=20),
    st.randoms(use_true_random=False),
    st.sampled_from(["intact", "cut", "flip"]),
)
def test_runs_of_hot_messages_decode_as_the_generic_path_does(msgs, rnd, change):
    """decode_frame takes each run of messages of one hot layout (NAKACK2 MSG, UNICAST3 DATA) in
    one loop: the same messages, or a WireError, as the generic path alone gives for the same
    bytes, intact, cut short or with a byte changed."""
    for m in msgs:
        m.src, m.dest = "A", "B"
    frame = wire.encode_frame("A", msgs)
    if change == "cut":
        frame = frame[: rnd.randrange(len(frame))]
    elif change == "flip":
        at = rnd.randrange(len(frame))
        frame = frame[:at] + bytes([rnd.randrange(256)]) + frame[at + 1 :]
    fast = _decoded(frame)
    hot = dict(wire._HOT_DECODE)
    wire._HOT_DECODE.clear()
    try:
        slow = _decoded(frame)
    finally:
        wire._HOT_DECODE.update(hot)
    assert fast == slow
    if change == "intact":
        assert fast == ("A", [(m.src, m.dest, m.payload, m.headers) for m in msgs])


@pytest.mark.parametrize("flags", [0, 1])
def test_hot_layout_headers_equal_their_dataclass(flags):
    """The hot layouts build their headers slot by slot (no __init__ call): every field is set,
    to what the dataclass gives, so a field added to the dataclass and not here fails this."""
    from splitbrain.node.nakack2.header import _make_msg
    from splitbrain.node.unicast3.header import _make_data

    assert _make_data(flags, 7, 3, 100) == U3Header(MsgType.DATA, 7, 3, flags == 1)
    assert _make_msg(9, 100) == N2Header(N2Type.MSG, 9)
