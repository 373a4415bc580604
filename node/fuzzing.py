"""Value generators shared by the protocols' header fuzzers (node/<protocol>/fuzz.py, driven by
tests/protocol_fuzz.py): edges of the wire's integer fields, values echoed from headers this node
sent lately (nudged a little or pushed up to fill a window), and XMIT-REQ ranges.

Every draw goes through the fuzzer's seeded Rng, so a seed replays the same headers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from .protocols import Rng

U32 = (1 << 32) - 1
U64 = (1 << 64) - 1
# Edge values of the wire's u32 and u64 fields, and 2^62 (a seqno a window must not make room for).
EDGES = (0, 1, 2, 1 << 31, U32, 1 << 62, (1 << 63) - 1, 1 << 63, U64 - 1, U64)

T = TypeVar("T")


def below(rng: Rng, n: int) -> int:
    return int(rng.random() * n)


def pick(rng: Rng, seq: Sequence[T]) -> T:
    return seq[below(rng, len(seq))]


def value(rng: Rng, top: int, echoed: Sequence[int]) -> int:
    """An integer in 0..top: an echoed one nudged by a few or moved up by up to 2^20 (to fill
    a window), an edge, a small one or any."""
    roll = rng.random()
    if echoed and roll < 0.4:
        return min(top, max(0, pick(rng, echoed) + below(rng, 7) - 3))
    if echoed and roll < 0.5:
        return min(top, pick(rng, echoed) + below(rng, 1 << below(rng, 21)))
    if roll < 0.7:
        return min(top, pick(rng, EDGES))
    if roll < 0.9:
        return below(rng, 64)
    return rng.getrandbits(top.bit_length())


def xmit_ranges(rng: Rng, seqnos: Sequence[int], most: int) -> tuple[tuple[int, int], ...]:
    """Seqno ranges for an XMIT-REQ of at most `most` ranges: none, everything there is, the most
    the wire allows, or a few near the echoed seqnos."""
    roll = rng.random()
    if roll < 0.1:
        return ()
    if roll < 0.2:
        return ((0, U64),)  # everything there is
    count = most if roll < 0.25 else 1 + below(rng, 4)
    out = []
    for _ in range(count):
        lo = value(rng, U64, seqnos)
        hi = min(U64, lo + pick(rng, (0, 1, below(rng, 100), 1 << 40, U64)))
        out.append((lo, hi))
    return tuple(out)
