"""Hostile GMS headers for the protocol-level fuzzer (tests/protocol_fuzz.py): valid on the wire,
wrong in their values (view ids of 0 or 2^64-1, members that are not peers, views without this
node, merges never started)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..fuzzing import pick
from ..protocols import Rng
from .header import GmsHeader, GmsType

# Every type: GMS's own (over UNICAST3) and the unreliable ones of discovery, FD_ALL3 and MERGE3.
_TYPES = tuple(GmsType)
# N, P and Q are the fuzzed node and its peers (tests/protocol_fuzz.py); the others are strangers.
_NAMES = ("N", "P", "Q", "A", "B", "", "Z" * 40)
_IDS = (0, 1, 2, 3, 1 << 31, (1 << 64) - 1)


def fuzz_header(rng: Rng, sent: Sequence[Any]) -> GmsHeader:
    members = tuple(dict.fromkeys(pick(rng, _NAMES) for _ in range(int(rng.random() * 4))))
    coord = members[0] if members and rng.random() < 0.7 else pick(rng, _NAMES)
    echoed = [h.view_id for h in sent if isinstance(h, GmsHeader)]
    view_id = pick(rng, echoed) + int(rng.random() * 3) if echoed and rng.random() < 0.5 else pick(rng, _IDS)
    digest = tuple((pick(rng, _NAMES), pick(rng, _IDS)) for _ in range(int(rng.random() * 2)))
    return GmsHeader(
        type=GmsType(pick(rng, _TYPES)),
        view_id=min(view_id, (1 << 64) - 1),
        coord=coord,
        members=members,
        merge_id=pick(rng, (0, 1, 2, (1 << 32) - 1)),
        reason=pick(rng, ("", "join", "merge", "x")),
        digest=digest,
    )
