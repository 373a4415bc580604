"""Hostile UNICAST3 headers for the protocol-level fuzzer (tests/protocol_fuzz.py).

Every header is valid on the wire (it survives encode and decode unchanged), so it gets past the
framing layer and reaches the protocol; its values are what a broken or hostile peer might send:
seqnos of 0, 2^62 or 2^64-1, conn-ids of 0, XMIT-REQs for huge ranges, SYNC-OKs for syncs never
started. Half the time a value is taken from a header this node sent lately (a conn-id, a nonce,
a seqno, give or take a little), so the fuzzer gets past the conn-id and nonce checks into the
windows instead of being dropped at the door.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from ..protocols import Rng
from .header import MAX_XMIT_RANGES, MsgType, U3Header

_TYPES = tuple(MsgType)
_RECEIVER_TYPES = (MsgType.ACK, MsgType.XMIT_REQ, MsgType.SYNC_ACK)
U32 = (1 << 32) - 1
U64 = (1 << 64) - 1
# Edge values of the wire's u32 and u64 fields, and the 2^62.
_EDGES = (0, 1, 2, 1 << 31, U32, 1 << 62, (1 << 63) - 1, 1 << 63, U64 - 1, U64)


def _below(rng: Rng, n: int) -> int:
    return int(rng.random() * n)


T = TypeVar("T")


def _pick(rng: Rng, seq: Sequence[T]) -> T:
    return seq[_below(rng, len(seq))]


def _value(rng: Rng, top: int, echoed: Sequence[int]) -> int:
    """An integer in 0..top: an echoed one nudged by a few or moved up by up to 2^20 (to fill
    a window), an edge, a small one or any."""
    roll = rng.random()
    if echoed and roll < 0.4:
        return min(top, max(0, _pick(rng, echoed) + _below(rng, 7) - 3))
    if echoed and roll < 0.5:
        return min(top, _pick(rng, echoed) + _below(rng, 1 << _below(rng, 21)))
    if roll < 0.7:
        return min(top, _pick(rng, _EDGES))
    if roll < 0.9:
        return _below(rng, 64)
    return rng.getrandbits(top.bit_length())


def _ranges(rng: Rng, seqnos: Sequence[int]) -> tuple[tuple[int, int], ...]:
    roll = rng.random()
    if roll < 0.1:
        return ()
    if roll < 0.2:
        return ((0, U64),)  # everything there is
    count = MAX_XMIT_RANGES if roll < 0.25 else 1 + _below(rng, 4)
    out = []
    for _ in range(count):
        lo = _value(rng, U64, seqnos)
        hi = min(U64, lo + _pick(rng, (0, 1, _below(rng, 100), 1 << 40, U64)))
        out.append((lo, hi))
    return tuple(out)


def fuzz_header(rng: Rng, sent: Sequence[Any]) -> U3Header:
    """A random UNICAST3 header a peer could send, given the headers this node sent it lately."""
    mine = [h for h in sent if isinstance(h, U3Header)]
    conn_ids = [h.conn_id for h in mine] + [h.prev_conn_id for h in mine if h.prev_conn_id]
    seqnos = [h.seqno for h in mine] + [hi for h in mine for _, hi in h.ranges]
    nonces = [h.nonce for h in mine if h.nonce]
    timestamps = [h.timestamp + 1 for h in mine if h.timestamp]
    # DATA most often, so windows live long enough to fill; first=true seldom (it replaces one).
    mtype = MsgType.DATA if rng.random() < 0.4 else _pick(rng, _TYPES)
    conn_id = _value(rng, U32, conn_ids)
    if mtype is MsgType.DATA:
        # The conn-id of this node's receive window for us, as its ACKs, XMIT-REQs and SYNC-ACKs
        # carry it, and seqnos above what it acked: DATA that lands in the window and fills it.
        recv = [h for h in mine if h.type in _RECEIVER_TYPES]
        if recv and rng.random() < 0.7:
            conn_id = _pick(rng, recv).conn_id
            seqnos = [h.seqno for h in recv if h.type is MsgType.ACK] or seqnos
        return U3Header(mtype, _value(rng, U64, seqnos), conn_id, first=rng.random() < 0.03)
    if mtype is MsgType.ACK:
        return U3Header(mtype, _value(rng, U64, seqnos), conn_id, timestamp=_value(rng, U64, timestamps))
    if mtype is MsgType.SEND_FIRST_SEQNO:
        return U3Header(mtype, conn_id=conn_id, timestamp=_value(rng, U64, timestamps))
    if mtype is MsgType.XMIT_REQ:
        return U3Header(mtype, conn_id=conn_id, ranges=_ranges(rng, seqnos))
    if mtype is MsgType.CLOSE:
        return U3Header(mtype, conn_id=conn_id)
    if mtype is MsgType.SYNC_OK:
        return U3Header(
            mtype,
            _value(rng, U64, seqnos),
            conn_id,
            prev_conn_id=_value(rng, U32, conn_ids),
            nonce=_value(rng, U64, nonces),
        )
    return U3Header(mtype, conn_id=conn_id, nonce=_value(rng, U64, nonces))  # SYNC, SYNC_ACK
