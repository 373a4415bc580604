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
from typing import Any

from ..fuzzing import U32, U64, pick, value, xmit_ranges
from ..protocols import Rng
from ..xmit import MAX_XMIT_RANGES
from .header import MsgType, U3Header

_TYPES = tuple(MsgType)
_RECEIVER_TYPES = (MsgType.ACK, MsgType.XMIT_REQ, MsgType.SYNC_ACK)


def fuzz_header(rng: Rng, sent: Sequence[Any]) -> U3Header:
    """A random UNICAST3 header a peer could send, given the headers this node sent it lately."""
    mine = [h for h in sent if isinstance(h, U3Header)]
    conn_ids = [h.conn_id for h in mine] + [h.prev_conn_id for h in mine if h.prev_conn_id]
    seqnos = [h.seqno for h in mine] + [hi for h in mine for _, hi in h.ranges]
    nonces = [h.nonce for h in mine if h.nonce]
    timestamps = [h.timestamp + 1 for h in mine if h.timestamp]
    # DATA most often, so windows live long enough to fill; first=true seldom (it replaces one).
    mtype = MsgType.DATA if rng.random() < 0.4 else pick(rng, _TYPES)
    conn_id = value(rng, U32, conn_ids)
    if mtype is MsgType.DATA:
        # The conn-id of this node's receive window for us, as its ACKs, XMIT-REQs and SYNC-ACKs
        # carry it, and seqnos above what it acked: DATA that lands in the window and fills it.
        recv = [h for h in mine if h.type in _RECEIVER_TYPES]
        if recv and rng.random() < 0.7:
            conn_id = pick(rng, recv).conn_id
            seqnos = [h.seqno for h in recv if h.type is MsgType.ACK] or seqnos
        return U3Header(mtype, value(rng, U64, seqnos), conn_id, first=rng.random() < 0.03)
    if mtype is MsgType.ACK:
        return U3Header(mtype, value(rng, U64, seqnos), conn_id, timestamp=value(rng, U64, timestamps))
    if mtype is MsgType.SEND_FIRST_SEQNO:
        return U3Header(mtype, conn_id=conn_id, timestamp=value(rng, U64, timestamps))
    if mtype is MsgType.XMIT_REQ:
        return U3Header(mtype, conn_id=conn_id, ranges=xmit_ranges(rng, seqnos, MAX_XMIT_RANGES))
    if mtype is MsgType.CLOSE:
        return U3Header(mtype, conn_id=conn_id)
    if mtype is MsgType.SYNC_OK:
        return U3Header(
            mtype,
            value(rng, U64, seqnos),
            conn_id,
            prev_conn_id=value(rng, U32, conn_ids),
            nonce=value(rng, U64, nonces),
        )
    return U3Header(mtype, conn_id=conn_id, nonce=value(rng, U64, nonces))  # SYNC, SYNC_ACK
