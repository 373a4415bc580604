"""GMS headers and their wire layout.

Two protocol ids share one header type: LOWER_ID (12) for the unreliable messages of the layers
below the reliable protocol (discovery, heartbeats, MERGE3's INFO) and GMS_ID (13) for GMS's own
messages, which ride UNICAST3 (JOIN, VIEW, LEAVE, MERGE). Each id decodes only its own types.

    header := type:u8 view_id:u64 merge_id:u32 coord:str8 reason:str8
              n:u16 member:str8*n  d:u16 (sender:str8 seqno:u64)*d
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from ..wire import HeaderCodec, WireError, register_header

LOWER_ID = 12
GMS_ID = 13
MAX_MEMBERS = 1024


class GmsType(IntEnum):
    # below the reliable protocol, unreliable
    GET_MBRS_REQ = 0
    GET_MBRS_RSP = 1
    HEARTBEAT = 2
    INFO = 3
    LEAVE = 4  # a graceful leave, to every member: unreliable, so a stopping node leaves no window open
    # GMS's own, over UNICAST3
    JOIN_REQ = 10
    JOIN_RSP = 11
    VIEW = 12
    LEAVE_REQ = 13
    MERGE_REQ = 14
    MERGE_RSP = 15
    SUSPECT = 16  # a member's suspicion, to the member that would act on it (coordinator or next)
    VIEW_ACK = 17  # a member installed a join VIEW (view_id): the coordinator may answer the joiner


LOWER_TYPES = frozenset({GmsType.GET_MBRS_REQ, GmsType.GET_MBRS_RSP, GmsType.HEARTBEAT, GmsType.INFO, GmsType.LEAVE})
GMS_TYPES = frozenset(GmsType) - LOWER_TYPES


@dataclass(frozen=True, slots=True)
class GmsHeader:
    type: GmsType
    view_id: int = 0  # the sender's (or the carried) view counter
    coord: str = ""  # the coordinator of that view; "" = no view (a node still joining)
    members: tuple[str, ...] = ()  # VIEW, JOIN_RSP, MERGE_RSP, INFO: the view's members
    merge_id: int = 0  # MERGE_REQ / MERGE_RSP: which merge; JOIN_REQ / JOIN_RSP: the joiner's incarnation (u32)
    reason: str = ""  # VIEW: why it was installed (join, leave, suspect, merge)
    digest: tuple[tuple[str, int], ...] = ()  # JOIN_RSP, VIEW after a merge: highest seqno per sender


_HEAD = struct.Struct("!BQI")
_U8 = struct.Struct("!B")
_U16 = struct.Struct("!H")
_U64 = struct.Struct("!Q")


def _str8(s: str) -> bytes:
    raw = s.encode()
    if len(raw) > 255:
        raise ValueError(f"name too long for a GMS header: {s!r}")
    return _U8.pack(len(raw)) + raw


def encode(h: GmsHeader) -> bytes:
    if len(h.members) > MAX_MEMBERS or len(h.digest) > MAX_MEMBERS:
        raise ValueError(f"GMS header with {len(h.members)} members (max {MAX_MEMBERS})")
    parts = [_HEAD.pack(h.type, h.view_id, h.merge_id), _str8(h.coord), _str8(h.reason), _U16.pack(len(h.members))]
    parts.extend(_str8(m) for m in h.members)
    parts.append(_U16.pack(len(h.digest)))
    for sender, seqno in h.digest:
        parts.append(_str8(sender) + _U64.pack(seqno))
    return b"".join(parts)


class _Reader:
    __slots__ = ("body", "pos")

    def __init__(self, body: bytes):
        self.body = body
        self.pos = 0

    def take(self, st: struct.Struct) -> tuple[Any, ...]:
        if self.pos + st.size > len(self.body):
            raise WireError("GMS header too short")
        values = st.unpack_from(self.body, self.pos)
        self.pos += st.size
        return values

    def str8(self) -> str:
        (n,) = self.take(_U8)
        end = self.pos + n
        if end > len(self.body):
            raise WireError("GMS header: truncated name")
        try:
            s = self.body[self.pos : end].decode()
        except UnicodeDecodeError as exc:
            raise WireError("GMS header: name is not UTF-8") from exc
        self.pos = end
        return s


def _decoder(allowed: frozenset[GmsType]) -> Callable[[bytes], GmsHeader]:
    def decode(body: bytes) -> GmsHeader:
        r = _Reader(body)
        type_raw, view_id, merge_id = r.take(_HEAD)
        if type_raw not in GmsType._value2member_map_ or GmsType(type_raw) not in allowed:
            raise WireError(f"unknown GMS message type {type_raw}")
        coord = r.str8()
        reason = r.str8()
        (n,) = r.take(_U16)
        if n > MAX_MEMBERS:
            raise WireError(f"GMS header claims {n} members")
        members = tuple(r.str8() for _ in range(n))
        if len(set(members)) != len(members):
            raise WireError("GMS header lists a member twice")
        (d,) = r.take(_U16)
        if d > MAX_MEMBERS:
            raise WireError(f"GMS header claims {d} digest entries")
        digest = []
        for _ in range(d):
            sender = r.str8()
            (seqno,) = r.take(_U64)
            digest.append((sender, seqno))
        if r.pos != len(body):
            raise WireError(f"GMS header has {len(body) - r.pos} extra bytes")
        return GmsHeader(GmsType(type_raw), view_id, coord, members, merge_id, reason, tuple(digest))

    return decode


def type_name(h: GmsHeader) -> str:
    return h.type.name


LOWER_CODEC = HeaderCodec(LOWER_ID, GmsHeader, encode, _decoder(LOWER_TYPES), type_name)
CODEC = HeaderCodec(GMS_ID, GmsHeader, encode, _decoder(GMS_TYPES), type_name)
register_header(LOWER_CODEC)
register_header(CODEC)
