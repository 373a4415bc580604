"""Hostile UNICAST2 headers for the protocol-level fuzzer (tests/protocol_fuzz.py).

Every header survives encode and decode; its values are what a broken or hostile peer might
send: seqnos of 0, 2^62 or 2^64-1, conn-ids of 0, XMIT-REQs for huge ranges, STABLEs far above
what was sent, first=true on any seqno. Half the time a value is taken from a header this node
sent lately, so the fuzzer gets past the conn-id checks into the windows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fuzzing import U32, U64, below, pick, value, xmit_ranges
from ..protocols import Rng
from ..xmit import MAX_XMIT_RANGES
from .header import MsgType, U2Header

_TYPES = tuple(MsgType)
_RECEIVER_TYPES = (MsgType.STABLE, MsgType.XMIT_REQ, MsgType.SEND_FIRST_SEQNO)


def fuzz_header(rng: Rng, sent: Sequence[Any]) -> U2Header:
    """A random UNICAST2 header a peer could send, given the headers this node sent it lately."""
    mine = [h for h in sent if isinstance(h, U2Header)]
    conn_ids = [h.conn_id for h in mine]
    seqnos = [h.seqno for h in mine] + [h.high for h in mine if h.high] + [hi for h in mine for _, hi in h.ranges]
    mtype = MsgType.DATA if rng.random() < 0.5 else pick(rng, _TYPES)
    conn_id = value(rng, U32, conn_ids)
    if mtype is MsgType.DATA:
        # The conn-id of this node's receive window for us, as its STABLEs and XMIT-REQs carry it,
        # and seqnos near what it delivered: DATA that lands in the window and fills it.
        recv = [h for h in mine if h.type in _RECEIVER_TYPES]
        if recv and rng.random() < 0.7:
            conn_id = pick(rng, recv).conn_id
            seqnos = [h.seqno + 1 + below(rng, 4) for h in recv if h.type is MsgType.STABLE] or seqnos
        return U2Header(mtype, value(rng, U64, seqnos), conn_id, first=rng.random() < 0.05)
    if mtype is MsgType.STABLE:
        return U2Header(mtype, value(rng, U64, seqnos), conn_id, high=value(rng, U64, seqnos))
    if mtype is MsgType.XMIT_REQ:
        return U2Header(mtype, conn_id=conn_id, ranges=xmit_ranges(rng, seqnos, MAX_XMIT_RANGES))
    return U2Header(mtype, value(rng, U64, seqnos), conn_id)  # SEND_FIRST_SEQNO
