"""Hostile MCAST headers for the protocol-level fuzzer (tests/protocol_fuzz.py).

Every header is valid on the wire (it survives encode and decode unchanged); its values are what a
broken or hostile member might send: MSGs of an older, the same or a newer incarnation, numbered 0,
2^63 or just above this node's window, with a send-window low far ahead; acks of more than this
node sent; XMIT-REQs for huge ranges; HIGHEST_SEQNOs that claim a high and a low nobody sent. Half
the time a value is taken from a header this node sent lately (a seqno, an ack, a requested range),
so the fuzzer gets into the windows instead of being dropped at the door.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fuzzing import U64, pick, value, xmit_ranges
from ..protocols import Rng
from ..xmit import MAX_XMIT_RANGES
from .header import McastHeader, MsgType

_TYPES = tuple(MsgType)


def fuzz_header(rng: Rng, sent: Sequence[Any]) -> McastHeader:
    """A random MCAST header a member could send, given the headers this node sent it lately."""
    mine = [h for h in sent if isinstance(h, McastHeader)]
    seqnos = [h.seqno for h in mine if h.seqno] + [h.low for h in mine if h.low]
    seqnos += [hi for h in mine for _, hi in h.ranges]
    mtype = MsgType.MSG if rng.random() < 0.4 else pick(rng, _TYPES)
    if mtype is MsgType.MSG:
        # Three lives, the latest most often: an older one is rejected, a newer one starts the
        # window afresh, and most MSGs get into the window (a huge incarnation once would make
        # every later MSG "older" for the rest of the run).
        roll = rng.random()
        incarnation = 2 if roll < 0.8 else 1 if roll < 0.9 else 0
        seqno = value(rng, U64, seqnos)
        low = 0 if rng.random() < 0.7 else min(seqno, value(rng, U64, seqnos))
        return McastHeader(mtype, seqno, incarnation=incarnation, low=low)
    if mtype is MsgType.MCAST_XMIT_REQ:
        # The wire refuses an empty range and seqno 0: such a request never reaches the layer.
        ranges = tuple(
            (max(1, lo), max(1, hi)) for lo, hi in xmit_ranges(rng, seqnos, MAX_XMIT_RANGES) if max(1, lo) <= max(1, hi)
        )
        return McastHeader(mtype, ranges=ranges)
    if mtype is MsgType.MCAST_HIGHEST_SEQNO:
        seqno = value(rng, U64, seqnos)
        return McastHeader(mtype, seqno, low=min(seqno, value(rng, U64, seqnos)))
    return McastHeader(mtype, value(rng, U64, seqnos))  # MCAST_ACK
