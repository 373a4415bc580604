"""Hostile NAKACK2 headers for the protocol-level fuzzer (tests/protocol_fuzz.py).

Every header is valid on the wire (it survives encode and decode unchanged); its values are what a
broken or hostile member might send: MSGs numbered 0, 2^63 or just above what this node delivered,
XMIT-REQs for huge ranges of any sender (this node's own, a peer's, one it never heard of),
XMIT_RSPs of multicasts this node never asked for, HIGHEST_SEQNOs far ahead, STABLE digests that
claim more (or less) than anyone sent. Half the time a value is taken from a header this node sent
lately (a seqno of its multicasts, of a digest entry or of a request), so the fuzzer gets into the
tables instead of being dropped at the door.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fuzzing import U64, below, pick, value, xmit_ranges
from ..protocols import Rng
from ..xmit import MAX_XMIT_RANGES
from .header import MAX_DIGEST_ENTRIES, MsgType, N2Header

_TYPES = tuple(MsgType)
# Whose multicasts a header names: this node (N), the peers in the fuzzer's view, a stranger.
_NAMES = ("N", "P", "Q", "X", "")


def fuzz_header(rng: Rng, sent: Sequence[Any]) -> N2Header:
    """A random NAKACK2 header a member could send, given the headers this node sent it lately."""
    mine = [h for h in sent if isinstance(h, N2Header)]
    seqnos = [h.seqno for h in mine if h.seqno] + [n for h in mine for _, n in h.digest]
    seqnos += [hi for h in mine for _, hi in h.ranges]
    # MSG most often, so tables live long enough to fill and deliver.
    mtype = MsgType.MSG if rng.random() < 0.4 else pick(rng, _TYPES)
    if mtype is MsgType.MSG or mtype is MsgType.HIGHEST_SEQNO:
        return N2Header(mtype, value(rng, U64, seqnos))
    if mtype is MsgType.XMIT_RSP:
        return N2Header(mtype, value(rng, U64, seqnos), orig=pick(rng, _NAMES))
    if mtype is MsgType.NAK_XMIT_REQ:
        # The wire refuses an empty range and seqno 0: such a request never reaches the layer.
        ranges = tuple(
            (max(1, lo), max(1, hi)) for lo, hi in xmit_ranges(rng, seqnos, MAX_XMIT_RANGES) if max(1, lo) <= max(1, hi)
        )
        return N2Header(mtype, orig=pick(rng, _NAMES), ranges=ranges)
    count = MAX_DIGEST_ENTRIES if rng.random() < 0.02 else below(rng, 5)
    digest = tuple((pick(rng, _NAMES) or "N", value(rng, U64, seqnos)) for _ in range(count))
    return N2Header(mtype, digest=digest)
