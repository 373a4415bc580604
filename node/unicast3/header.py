"""The UNICAST3 header and its compact per-type wire layout.

Each message type carries only the fields it needs: a DATA header is 14 bytes (type, flags,
seqno, conn_id), an ACK 22 (plus a timestamp for `resync: timestamp`), an XMIT-REQ carries its
missing seqnos as at most MAX_XMIT_RANGES ranges.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from ..wire import HeaderCodec, HotLayout, WireError, register_header
from ..xmit import decode_ranges, encode_ranges

PROTO_ID = 3


class MsgType(IntEnum):
    DATA = 0
    ACK = 1
    SEND_FIRST_SEQNO = 2
    XMIT_REQ = 3
    CLOSE = 4
    SYNC = 5
    SYNC_OK = 6
    SYNC_ACK = 7


_TYPE_NAMES = {t.value: t.name for t in MsgType}
FLAG_FIRST = 0x01


# Not frozen: a frozen dataclass costs about 1.8 us to build against 0.35 us, and one is built for
# every message sent. Treat it as immutable all the same (headers are shared by a message and its
# retransmissions, and in the simulator by sender and receiver): change one with dataclasses.replace.
@dataclass(slots=True, unsafe_hash=True)
class U3Header:
    type: MsgType
    seqno: int = 0  # DATA: its seqno; ACK: highest delivered; SYNC_OK: low (first seqno to expect)
    conn_id: int = 0
    first: bool = False
    timestamp: int = 0  # ACK and SEND_FIRST_SEQNO under resync=timestamp
    prev_conn_id: int = 0  # SYNC_OK: the conn-id the sender had before the sync
    ranges: tuple[tuple[int, int], ...] = ()  # XMIT_REQ: missing seqnos
    # SYNC, SYNC_OK, SYNC_ACK: the receiver's number for one sync, echoed by the answers, so a
    # delayed answer to an earlier sync is never taken for the answer to a newer one.
    nonce: int = 0


_HEAD = struct.Struct("!BB")
_LAYOUT: dict[MsgType, tuple[struct.Struct, tuple[str, ...]]] = {
    MsgType.DATA: (struct.Struct("!QI"), ("seqno", "conn_id")),
    MsgType.ACK: (struct.Struct("!QIQ"), ("seqno", "conn_id", "timestamp")),
    MsgType.SEND_FIRST_SEQNO: (struct.Struct("!IQ"), ("conn_id", "timestamp")),
    MsgType.XMIT_REQ: (struct.Struct("!I"), ("conn_id",)),
    MsgType.CLOSE: (struct.Struct("!I"), ("conn_id",)),
    MsgType.SYNC: (struct.Struct("!IQ"), ("conn_id", "nonce")),
    MsgType.SYNC_OK: (struct.Struct("!QIIQ"), ("seqno", "conn_id", "prev_conn_id", "nonce")),
    MsgType.SYNC_ACK: (struct.Struct("!IQ"), ("conn_id", "nonce")),
}


_DATA = struct.Struct("!BBQI")  # the hot path: one pack for a whole DATA header


def encode(h: U3Header) -> bytes:
    if h.type is MsgType.DATA:
        return _DATA.pack(0, FLAG_FIRST if h.first else 0, h.seqno, h.conn_id)
    st, fields = _LAYOUT[h.type]
    out = _HEAD.pack(h.type, FLAG_FIRST if h.first else 0) + st.pack(*(getattr(h, f) for f in fields))
    if h.type is MsgType.XMIT_REQ:
        out += encode_ranges(h.ranges)
    return out


def decode(body: bytes) -> U3Header:
    if len(body) == _DATA.size and body[0] == 0:
        _, flags, seqno, conn_id = _DATA.unpack(body)
        if flags & ~FLAG_FIRST:
            raise WireError(f"unknown UNICAST3 flags {flags:#x}")
        return U3Header(MsgType.DATA, seqno, conn_id, bool(flags))
    if len(body) < _HEAD.size:
        raise WireError("UNICAST3 header too short")
    type_raw, flags = _HEAD.unpack_from(body)
    if type_raw not in _TYPE_NAMES:
        raise WireError(f"unknown UNICAST3 message type {type_raw}")
    if flags & ~FLAG_FIRST:
        raise WireError(f"unknown UNICAST3 flags {flags:#x}")
    mtype = MsgType(type_raw)
    st, fields = _LAYOUT[mtype]
    end = _HEAD.size + st.size
    if len(body) < end:
        raise WireError(f"UNICAST3 {mtype.name} header too short")
    values = dict(zip(fields, st.unpack_from(body, _HEAD.size)))
    ranges: tuple[tuple[int, int], ...] = ()
    if mtype is MsgType.XMIT_REQ:
        ranges, end = decode_ranges(body, end)
    if end != len(body):
        raise WireError(f"UNICAST3 {mtype.name} header has {len(body) - end} extra bytes")
    return U3Header(type=mtype, first=bool(flags & FLAG_FIRST), ranges=ranges, **values)


def type_name(h: U3Header) -> str:
    return h.type.name


# Read per message as a global: in CPython 3.11 an Enum member read as a class attribute costs
# about ten times a global's read (0.15 against 0.015 us here).
_DATA_TYPE = MsgType.DATA
_new = object.__new__


def _make_data(flags: int, seqno: int, conn_id: int, _payload_len: int) -> U3Header:
    if flags & ~FLAG_FIRST:
        raise WireError(f"unknown UNICAST3 flags {flags:#x}")
    # Every field set here rather than through the dataclass's __init__ (one call fewer per message
    # received; tests/node/test_wire.py compares the result with U3Header(...) field by field).
    h = _new(U3Header)
    h.type = _DATA_TYPE
    h.seqno = seqno
    h.conn_id = conn_id
    h.first = flags == FLAG_FIRST
    h.timestamp = 0
    h.prev_conn_id = 0
    h.ranges = ()
    h.nonce = 0
    return h


def _data_values(h: U3Header) -> tuple[int, int, int] | None:
    if h.type is _DATA_TYPE:
        return (FLAG_FIRST if h.first else 0, h.seqno, h.conn_id)
    return None


# DATA, the header of nearly every message, is coded by the frame codec in one pass (wire.HotLayout).
CODEC = HeaderCodec(PROTO_ID, U3Header, encode, decode, type_name, HotLayout(0, "BQI", _make_data, _data_values))
register_header(CODEC)
