"""The NAKACK2 header (JGroups' NakAckHeader2 plus STABLE's gossip) and its wire layout.

    MSG            type:u8 seqno:u64                      a multicast, numbered per sender
    XMIT_REQ       type:u8 orig:str8 n:u16 (lo:u64 hi:u64)*n   seqnos of `orig` asked for
    XMIT_RSP       type:u8 orig:str8 seqno:u64            a retransmitted multicast of `orig`
    HIGHEST_SEQNO  type:u8 seqno:u64                      the sender's highest seqno (last-seqno-sender)
    STABLE         type:u8 n:u16 (sender:str8 seqno:u64)*n     a digest: highest delivered per sender

Type names are distinct from UNICAST3's (NAK_XMIT_REQ, not XMIT_REQ), so a fault rule that drops
one protocol's message type never hits the other's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from ..wire import HeaderCodec, HotLayout, WireError, register_header

PROTO_ID = 4
MAX_XMIT_RANGES = 256
MAX_DIGEST_ENTRIES = 1024


class MsgType(IntEnum):
    MSG = 0
    NAK_XMIT_REQ = 1
    XMIT_RSP = 2
    HIGHEST_SEQNO = 3
    STABLE = 4


# Not frozen (as U3Header): a frozen dataclass costs several times as much to build, and one is
# built for every multicast. Treat it as immutable all the same: headers are shared by the copies
# of a multicast and by what a member keeps to answer XMIT-REQs.
@dataclass(slots=True, unsafe_hash=True)
class N2Header:
    type: MsgType
    seqno: int = 0
    orig: str = ""  # XMIT_REQ / XMIT_RSP: the original sender of the multicast
    ranges: tuple[tuple[int, int], ...] = ()  # XMIT_REQ
    digest: tuple[tuple[str, int], ...] = ()  # STABLE: (sender, highest delivered)


_TYPE = struct.Struct("!B")
_SEQNO = struct.Struct("!BQ")
_U16 = struct.Struct("!H")
_U64 = struct.Struct("!Q")
_RANGE = struct.Struct("!QQ")
_TYPES = {t.value: t for t in MsgType}


def _name(name: str) -> bytes:
    raw = name.encode()
    if len(raw) > 255:
        raise ValueError(f"name too long: {name!r}")
    return bytes((len(raw),)) + raw


def encode(h: N2Header) -> bytes:
    t = h.type
    if t is MsgType.MSG or t is MsgType.HIGHEST_SEQNO:
        return _SEQNO.pack(t, h.seqno)
    if t is MsgType.XMIT_RSP:
        return _TYPE.pack(t) + _name(h.orig) + _U64.pack(h.seqno)
    if t is MsgType.NAK_XMIT_REQ:
        if len(h.ranges) > MAX_XMIT_RANGES:
            raise ValueError(f"XMIT-REQ with {len(h.ranges)} ranges (max {MAX_XMIT_RANGES})")
        return (
            _TYPE.pack(t)
            + _name(h.orig)
            + _U16.pack(len(h.ranges))
            + b"".join(_RANGE.pack(lo, hi) for lo, hi in h.ranges)
        )
    if len(h.digest) > MAX_DIGEST_ENTRIES:
        raise ValueError(f"digest with {len(h.digest)} entries (max {MAX_DIGEST_ENTRIES})")
    return _TYPE.pack(t) + _U16.pack(len(h.digest)) + b"".join(_name(s) + _U64.pack(n) for s, n in h.digest)


def _name_at(body: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(body):
        raise WireError("NAKACK2 header: name expected")
    end = pos + 1 + body[pos]
    if end > len(body):
        raise WireError("NAKACK2 header: truncated name")
    try:
        return body[pos + 1 : end].decode(), end
    except UnicodeDecodeError:
        raise WireError("NAKACK2 header: name is not UTF-8") from None


def decode(body: bytes) -> N2Header:
    if not body:
        raise WireError("empty NAKACK2 header")
    t = _TYPES.get(body[0])
    if t is None:
        raise WireError(f"unknown NAKACK2 message type {body[0]}")
    if t is MsgType.MSG or t is MsgType.HIGHEST_SEQNO:
        if len(body) != _SEQNO.size:
            raise WireError(f"NAKACK2 {t.name} header of {len(body)} bytes")
        return N2Header(t, _SEQNO.unpack(body)[1])
    pos = 1
    if t is MsgType.XMIT_RSP:
        orig, pos = _name_at(body, pos)
        if len(body) != pos + 8:
            raise WireError("NAKACK2 XMIT_RSP header has the wrong size")
        return N2Header(t, _U64.unpack_from(body, pos)[0], orig=orig)
    if t is MsgType.NAK_XMIT_REQ:
        orig, pos = _name_at(body, pos)
        if len(body) < pos + 2:
            raise WireError("NAKACK2 XMIT_REQ without range count")
        (n,) = _U16.unpack_from(body, pos)
        pos += 2
        if n > MAX_XMIT_RANGES or len(body) != pos + n * _RANGE.size:
            raise WireError(f"NAKACK2 XMIT_REQ claims {n} ranges")
        ranges = tuple(_RANGE.unpack_from(body, pos + i * _RANGE.size) for i in range(n))
        if any(lo > hi or lo == 0 for lo, hi in ranges):
            raise WireError("NAKACK2 XMIT_REQ with an empty range or seqno 0")
        return N2Header(t, orig=orig, ranges=ranges)
    if len(body) < 3:
        raise WireError("NAKACK2 STABLE without entry count")
    (n,) = _U16.unpack_from(body, 1)
    pos = 3
    if n > MAX_DIGEST_ENTRIES:
        raise WireError(f"NAKACK2 STABLE claims {n} entries")
    digest = []
    for _ in range(n):
        sender, pos = _name_at(body, pos)
        if len(body) < pos + 8:
            raise WireError("NAKACK2 STABLE truncated")
        digest.append((sender, _U64.unpack_from(body, pos)[0]))
        pos += 8
    if pos != len(body):
        raise WireError("NAKACK2 STABLE has extra bytes")
    return N2Header(t, digest=tuple(digest))


def type_name(h: N2Header) -> str:
    return h.type.name


# Read per message as a global: in CPython 3.11 an Enum member read as a class attribute costs
# about ten times a global's read.
_MSG = MsgType.MSG
_new = object.__new__


def _make_msg(seqno: int, _payload_len: int) -> N2Header:
    # Every field set here rather than through the dataclass's __init__ (one call fewer per
    # multicast received; tests/node/test_wire.py compares the result with N2Header(...)).
    h = _new(N2Header)
    h.type = _MSG
    h.seqno = seqno
    h.orig = ""
    h.ranges = ()
    h.digest = ()
    return h


def _msg_values(h: N2Header) -> tuple[int] | None:
    return (h.seqno,) if h.type is _MSG else None


# MSG, the header of every multicast, is coded by the frame codec in one pass (wire.HotLayout).
CODEC = HeaderCodec(PROTO_ID, N2Header, encode, decode, type_name, HotLayout(0, "Q", _make_msg, _msg_values))
register_header(CODEC)
