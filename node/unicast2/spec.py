"""UNICAST2's entry in the protocol registry (node/protocols.py)."""

from __future__ import annotations

from ..layer import Layer
from ..protocols import ProtocolSpec, Rng
from .config import MUTATIONS, Unicast2Config
from .fuzz import fuzz_header
from .header import CODEC, MsgType
from .protocol import Unicast2


def _layers(name: str, config: Unicast2Config, rng: Rng, incarnation: int) -> list[Layer]:
    return [Unicast2(name, config, rng, incarnation)]


SPEC = ProtocolSpec(
    name="unicast2",
    summary="receiver-driven reliable FIFO unicast: XMIT-REQ, STABLE, conn-ids, SEND_FIRST_SEQNO (seed 001)",
    config=Unicast2Config.from_dict,
    layers=_layers,
    header=CODEC,
    message_types=tuple(t.name for t in MsgType),
    event_kinds={
        "stable_tx": "STABLE sent by a receiver (seqno = highest delivered, high = highest received, conn_id)",
        "stable_rx": "STABLE received by the sender (seqno, high, conn_id); ack_rx follows when it purged",
        "first_seqno_tx": "SEND_FIRST_SEQNO sent by a receiver without a usable window",
        "first_seqno_rx": "SEND_FIRST_SEQNO received by the sender",
    },
    overhead_kinds={"stables": "stable_tx", "first_seqno": "first_seqno_tx"},
    mutations=MUTATIONS,
    chaos_drop_types=("DATA", "DATA", "STABLE", "XMIT_REQ", "SEND_FIRST_SEQNO"),
    fuzz=fuzz_header,
)
