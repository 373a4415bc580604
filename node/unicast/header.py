"""The original UNICAST header: a type and a seqno, nothing else (no conn-id, no `first`).

DATA and ACK are 9 bytes each (type, seqno), as in JGroups 2.x; an ACK names the one message it acknowledges.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from ..wire import HeaderCodec, WireError, register_header

# JGroups numbers its protocols; UNICAST2 is 2 here, UNICAST3 3, the original UNICAST 1.
PROTO_ID = 1


class MsgType(IntEnum):
    DATA = 0
    ACK = 1


_TYPE_NAMES = {t.value: t.name for t in MsgType}
_LAYOUT = struct.Struct("!BQ")


@dataclass(frozen=True, slots=True)
class U1Header:
    type: MsgType
    seqno: int = 0


def encode(h: U1Header) -> bytes:
    return _LAYOUT.pack(h.type, h.seqno)


def decode(body: bytes) -> U1Header:
    if len(body) != _LAYOUT.size:
        raise WireError(f"UNICAST header of {len(body)} bytes (expected {_LAYOUT.size})")
    type_raw, seqno = _LAYOUT.unpack(body)
    if type_raw not in _TYPE_NAMES:
        raise WireError(f"unknown UNICAST message type {type_raw}")
    return U1Header(MsgType(type_raw), seqno)


def type_name(h: U1Header) -> str:
    return h.type.name


CODEC = HeaderCodec(PROTO_ID, U1Header, encode, decode, type_name)
register_header(CODEC)
