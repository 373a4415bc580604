"""UNICAST2's entry in the protocol registry (node/protocols.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..layer import Layer
from ..protocols import ChaosSet, EventMark, ProtocolSpec, Rng, retransmission_sent
from .config import MUTATIONS, Unicast2Config
from .fuzz import fuzz_header
from .header import CODEC, MsgType
from .protocol import Unicast2

if TYPE_CHECKING:
    from collections.abc import Mapping


def _layers(name: str, config: Unicast2Config, rng: Rng, incarnation: int) -> list[Layer]:
    return [Unicast2(name, config, rng, incarnation)]


def _resync_traffic(ev: Mapping[str, Any]) -> bool:
    """SEND_FIRST_SEQNO and the first=true resend that answers it (the `resync_traffic` check)."""
    kind = ev.get("kind")
    return kind == "first_seqno_tx" or (kind == "retransmit" and ev.get("reason") == "first_seqno")


SPEC = ProtocolSpec(
    name="unicast2",
    summary="receiver-driven reliable FIFO unicast: XMIT-REQ, STABLE, conn-ids, SEND_FIRST_SEQNO",
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
    resync_traffic=_resync_traffic,
    resync_marks=(EventMark(kind="first_seqno_tx", label="SEND_FIRST_SEQNO sent"),),
    xmit_traffic=retransmission_sent,
    # Fairness, as UNICAST3's connection lifetimes: STABLE repeats for an unchanged window until a
    # partition of the chaos set is surely over (JGroups' 5 can all be lost in one, and the sender
    # then never learns what was delivered). No restarts: a receiver restarted while the last
    # messages of a stream were cut off has no window to ask for them from, and the sender has no
    # resend of its highest message (UNICAST3 added it: the UNICAST3 design, the museum's last-message-lost).
    chaos=ChaosSet(
        settings={"xmit_interval": 0.5, "max_stable_msgs": 100},
        draws={"stable_interval": (0.5, 1.0)},
        restarts=False,
        first_loss_type="DATA",
    ),
    # Removed at once (no CLOSING) when the sender leaves the view or the connection expires.
    discard_reasons=frozenset(("left_view", "expired")),
)
