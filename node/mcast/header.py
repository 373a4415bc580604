"""The MCAST header (JGroups' NAKACK4 header) and its wire layout.

    MSG                  type:u8 seqno:u64 incarnation:u32 low:u64    a multicast, numbered per sender and life
    MCAST_ACK            type:u8 seqno:u64                         the receiver's highest delivered of the sender
    MCAST_XMIT_REQ       type:u8 n:u16 (lo:u64 hi:u64)*n           the sender's seqnos asked for
    MCAST_HIGHEST_SEQNO  type:u8 seqno:u64 low:u64                 the sender's highest seqno and window low

Names other than MSG carry an MCAST_ prefix so that a fault rule dropping UNICAST3's ACK or
XMIT_REQ (the layer stacked above) never hits this protocol's, and the other way round.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from ..wire import HeaderCodec, WireError, register_header

PROTO_ID = 5
MAX_XMIT_RANGES = 256


class MsgType(IntEnum):
    MSG = 0
    MCAST_ACK = 1
    MCAST_XMIT_REQ = 2
    MCAST_HIGHEST_SEQNO = 3


@dataclass(frozen=True, slots=True)
class McastHeader:
    type: MsgType
    seqno: int = 0
    ranges: tuple[tuple[int, int], ...] = ()  # MCAST_XMIT_REQ
    incarnation: int = 0  # MSG: the sender's life (a restarted sender numbers from 1 again)
    low: int = 0  # MSG, MCAST_HIGHEST_SEQNO: the sender's send-window low (it holds what is above)


_SEQNO = struct.Struct("!BQ")
_MSG = struct.Struct("!BQIQ")
_HIGHEST = struct.Struct("!BQQ")
_COUNT = struct.Struct("!BH")
_RANGE = struct.Struct("!QQ")
_TYPES = {t.value: t for t in MsgType}


def encode(h: McastHeader) -> bytes:
    if h.type is MsgType.MCAST_XMIT_REQ:
        if len(h.ranges) > MAX_XMIT_RANGES:
            raise ValueError(f"XMIT-REQ with {len(h.ranges)} ranges (max {MAX_XMIT_RANGES})")
        return _COUNT.pack(h.type, len(h.ranges)) + b"".join(_RANGE.pack(lo, hi) for lo, hi in h.ranges)
    if h.type is MsgType.MSG:
        return _MSG.pack(h.type, h.seqno, h.incarnation, h.low)
    if h.type is MsgType.MCAST_HIGHEST_SEQNO:
        return _HIGHEST.pack(h.type, h.seqno, h.low)
    return _SEQNO.pack(h.type, h.seqno)


def decode(body: bytes) -> McastHeader:
    if not body:
        raise WireError("empty MCAST header")
    t = _TYPES.get(body[0])
    if t is None:
        raise WireError(f"unknown MCAST message type {body[0]}")
    if t is MsgType.MCAST_XMIT_REQ:
        if len(body) < _COUNT.size:
            raise WireError("MCAST XMIT_REQ without range count")
        n = _COUNT.unpack_from(body)[1]
        if n > MAX_XMIT_RANGES or len(body) != _COUNT.size + n * _RANGE.size:
            raise WireError(f"MCAST XMIT_REQ claims {n} ranges")
        ranges = tuple(_RANGE.unpack_from(body, _COUNT.size + i * _RANGE.size) for i in range(n))
        if any(lo > hi or lo == 0 for lo, hi in ranges):
            raise WireError("MCAST XMIT_REQ with an empty range or seqno 0")
        return McastHeader(t, ranges=ranges)
    layout = _MSG if t is MsgType.MSG else _HIGHEST if t is MsgType.MCAST_HIGHEST_SEQNO else _SEQNO
    if len(body) != layout.size:
        raise WireError(f"MCAST {t.name} header of {len(body)} bytes")
    if t is MsgType.MSG:
        _, seqno, incarnation, low = _MSG.unpack(body)
        return McastHeader(t, seqno, incarnation=incarnation, low=low)
    if t is MsgType.MCAST_HIGHEST_SEQNO:
        _, seqno, low = _HIGHEST.unpack(body)
        return McastHeader(t, seqno, low=low)
    return McastHeader(t, _SEQNO.unpack(body)[1])


def type_name(h: McastHeader) -> str:
    return h.type.name


CODEC = HeaderCodec(PROTO_ID, McastHeader, encode, decode, type_name)
register_header(CODEC)
