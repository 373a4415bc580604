"""Hostile UNICAST headers for the protocol-level fuzzer (tests/protocol_fuzz.py): DATA and ACK
with seqnos of 0, 2^62 or 2^64-1, or near the ones this node sent lately (so ACKs hit its send
window and DATA lands in its receive window)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fuzzing import U64, value
from ..protocols import Rng
from .header import MsgType, U1Header


def fuzz_header(rng: Rng, sent: Sequence[Any]) -> U1Header:
    """A random UNICAST header a peer could send, given the headers this node sent it lately."""
    seqnos = [h.seqno for h in sent if isinstance(h, U1Header)]
    mtype = MsgType.DATA if rng.random() < 0.5 else MsgType.ACK
    return U1Header(mtype, value(rng, U64, seqnos))
