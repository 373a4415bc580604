"""MCAST's entry in the protocol registry (node/protocols.py).

An MCAST stack is [MCAST, UNICAST3], bottom first, like NAKACK2's: MCAST multicasts, UNICAST3
carries unicasts. No MFC flow-control layer: MCAST's fixed window is the flow control (the MCAST design).
"""

from __future__ import annotations

from typing import Any

from ..layer import Action, Layer, SetConfig
from ..protocols import ChaosSet, ProtocolSpec, Rng, retransmission_sent
from ..unicast3.config import U3_PREFIX
from ..unicast3.header import MsgType as U3MsgType
from ..unicast3.protocol import Unicast3
from .config import MUTATIONS, McastConfig
from .fuzz import fuzz_header
from .header import CODEC, MsgType
from .protocol import Mcast


class StackedUnicast3(Unicast3):
    """UNICAST3 under an MCAST stack's flat settings: run-time changes name MCAST's keys or
    UNICAST3's with the unicast3_ prefix."""

    def command(self, cmd: Any, now: float) -> list[Action]:
        if isinstance(cmd, SetConfig):
            own = set(McastConfig.own_keys())
            values = {
                (k[len(U3_PREFIX) :] if k.startswith(U3_PREFIX) else k): v
                for k, v in cmd.values.items()
                if k not in own
            }
            cmd = SetConfig(values=values)
        return super().command(cmd, now)


def _layers(name: str, config: McastConfig, rng: Rng, incarnation: int) -> list[Layer]:
    return [Mcast(name, config, rng, incarnation), StackedUnicast3(name, config.unicast3, rng, incarnation)]


SPEC = ProtocolSpec(
    name="mcast",
    summary="reliable multicast, fixed-capacity windows, blocking senders, acks, XMIT-REQ, over UNICAST3",
    config=McastConfig.from_dict,
    layers=_layers,
    header=CODEC,
    message_types=tuple(t.name for t in MsgType) + tuple(t.name for t in U3MsgType),
    event_kinds={
        "highest_seqno_tx": "acks did not move: the highest seqno sent to the members behind (seqno, members)",
        "highest_seqno_rx": "a sender's HIGHEST_SEQNO received (peer, seqno)",
        "config_change": "a run-time setting changed (detail = key=value, ...)",
        "window_fill": "the send window at a retransmit run, when it changed (low = acked by all, high = sent, "
        "count = sends waiting)",
    },
    per_message_kinds=("highest_seqno_rx",),
    overhead_kinds={"highest_seqnos": "highest_seqno_tx"},
    multicast=True,
    fuzz=fuzz_header,
    mutations=MUTATIONS,
    chaos_drop_types=("MSG", "MSG", "MCAST_ACK", "MCAST_XMIT_REQ", "MCAST_HIGHEST_SEQNO", "DATA", "ACK"),
    variant_key="capacity",
    xmit_traffic=retransmission_sent,
    # A sender blocks on a full window (node/events.py's core block and unblock); window_fill and
    # both of those carry the window's low and high.
    block_kinds=("block", "unblock"),
    send_window_kinds=("window_fill", "block", "unblock"),
    chaos=ChaosSet(
        draws={"xmit_interval": (0.1, 0.2, 0.5), "capacity": (64, 256, 1024)},
        lossless_share=0.4,
        membership="gms",
        membership_share=0.3,
    ),
)
