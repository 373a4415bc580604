"""The UNICAST2 header and its compact per-type wire layout.

DATA is 14 bytes (type, flags, seqno, conn-id; flag bit 0 is `first`), STABLE 22 (highest
delivered, highest received, conn-id), SEND_FIRST_SEQNO 14 (the seqno and conn-id of the message
the receiver dropped), XMIT-REQ its conn-id and at most MAX_XMIT_RANGES ranges of seqnos.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from ..wire import HeaderCodec, WireError, register_header
from ..xmit import decode_ranges, encode_ranges

# JGroups numbers its protocols; UNICAST3 is 3 here, UNICAST2 takes 2.
PROTO_ID = 2
FLAG_FIRST = 0x01


class MsgType(IntEnum):
    DATA = 0
    XMIT_REQ = 1
    STABLE = 2
    SEND_FIRST_SEQNO = 3


_TYPE_NAMES = {t.value: t.name for t in MsgType}


@dataclass(frozen=True, slots=True)
class U2Header:
    type: MsgType
    # DATA: its seqno; STABLE: highest delivered; SEND_FIRST_SEQNO: the seqno of the dropped message.
    seqno: int = 0
    conn_id: int = 0
    first: bool = False
    high: int = 0  # STABLE: highest received
    ranges: tuple[tuple[int, int], ...] = ()  # XMIT_REQ: missing seqnos


_HEAD = struct.Struct("!BB")
_LAYOUT: dict[MsgType, tuple[struct.Struct, tuple[str, ...]]] = {
    MsgType.DATA: (struct.Struct("!QI"), ("seqno", "conn_id")),
    MsgType.XMIT_REQ: (struct.Struct("!I"), ("conn_id",)),
    MsgType.STABLE: (struct.Struct("!QQI"), ("seqno", "high", "conn_id")),
    MsgType.SEND_FIRST_SEQNO: (struct.Struct("!QI"), ("seqno", "conn_id")),
}


def encode(h: U2Header) -> bytes:
    st, fields = _LAYOUT[h.type]
    flags = FLAG_FIRST if h.first else 0
    out = _HEAD.pack(h.type, flags) + st.pack(*(getattr(h, f) for f in fields))
    if h.type is MsgType.XMIT_REQ:
        out += encode_ranges(h.ranges)
    return out


def decode(body: bytes) -> U2Header:
    if len(body) < _HEAD.size:
        raise WireError("UNICAST2 header too short")
    type_raw, flags = _HEAD.unpack_from(body)
    if type_raw not in _TYPE_NAMES:
        raise WireError(f"unknown UNICAST2 message type {type_raw}")
    if flags & ~FLAG_FIRST:
        raise WireError(f"unknown UNICAST2 flags {flags:#x}")
    mtype = MsgType(type_raw)
    st, fields = _LAYOUT[mtype]
    end = _HEAD.size + st.size
    if len(body) < end:
        raise WireError(f"UNICAST2 {mtype.name} header too short")
    values = dict(zip(fields, st.unpack_from(body, _HEAD.size)))
    ranges: tuple[tuple[int, int], ...] = ()
    if mtype is MsgType.XMIT_REQ:
        ranges, end = decode_ranges(body, end)
    if end != len(body):
        raise WireError(f"UNICAST2 {mtype.name} header has {len(body) - end} extra bytes")
    return U2Header(type=mtype, first=bool(flags & FLAG_FIRST), ranges=ranges, **values)


def type_name(h: U2Header) -> str:
    return h.type.name


CODEC = HeaderCodec(PROTO_ID, U2Header, encode, decode, type_name)
register_header(CODEC)
