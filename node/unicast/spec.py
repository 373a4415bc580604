"""The original UNICAST's entry in the protocol registry (node/protocols.py)."""

from __future__ import annotations

from ..layer import Layer
from ..protocols import ProtocolSpec, Rng
from .config import UnicastConfig
from .fuzz import fuzz_header
from .header import CODEC, MsgType
from .protocol import Unicast


def _layers(name: str, config: UnicastConfig, rng: Rng, incarnation: int) -> list[Layer]:
    # No conn-ids, so neither randomness nor the incarnation reaches the layer: a restarted node
    # starts its windows at 1 again, as the original did.
    return [Unicast(name, config)]


SPEC = ProtocolSpec(
    name="unicast",
    summary="the original UNICAST (before UNICAST2): an ACK per message, the sender resends until acked, "
    "windows without conn-ids; the partition UNICAST2 was designed for fails on it",
    config=UnicastConfig.from_dict,
    layers=_layers,
    header=CODEC,
    message_types=tuple(t.name for t in MsgType),
    chaos_drop_types=("DATA", "DATA", "ACK"),
    fuzz=fuzz_header,
    # Removed at once when the sender leaves the view.
    discard_reasons=frozenset(("left_view",)),
)
