"""UNICAST3's entry in the protocol registry (node/protocols.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..layer import Layer
from ..protocols import ChaosSet, EventMark, ProtocolSpec, Rng, retransmission_sent
from .config import MUTATION_RESYNC, MUTATIONS, REGRESSIONS, RESYNC_MODES, Unicast3Config
from .fuzz import fuzz_header
from .header import CODEC, MsgType
from .protocol import Unicast3


def _layers(name: str, config: Unicast3Config, rng: Rng, incarnation: int) -> list[Layer]:
    return [Unicast3(name, config, rng, incarnation)]


# Messages of a resync: SEND_FIRST_SEQNO (first_seqno, timestamp), SYNC / SYNC-OK / SYNC-ACK (sync),
# and the DATA a sender resends because one of those asked (its lowest unacked with first=true, or
# its lowest and highest after SYNC-ACK).
_RESYNC_KINDS = frozenset(("first_seqno_tx", "sync_tx"))
_RESYNC_RESENDS = frozenset(("first_seqno", "sync"))


def _resync_traffic(ev: Mapping[str, Any]) -> bool:
    kind = ev.get("kind")
    return kind in _RESYNC_KINDS or (kind == "retransmit" and ev.get("reason") in _RESYNC_RESENDS)


SPEC = ProtocolSpec(
    name="unicast3",
    summary="reliable FIFO unicast with SYNC resync (and JGroups' two earlier resync designs)",
    config=Unicast3Config.from_dict,
    layers=_layers,
    header=CODEC,
    message_types=tuple(t.name for t in MsgType),
    event_kinds={
        "first_seqno_tx": "SEND_FIRST_SEQNO sent by a receiver without a usable window",
        "first_seqno_rx": "SEND_FIRST_SEQNO received by the sender",
        "sync_tx": "a resync message sent (phase = sync | sync_ok | sync_ack, seqno = low for sync_ok)",
        "sync_rx": "a resync message received (phase, seqno, conn_id)",
        "sync_timeout": "a resync gave up (phase, peer)",
        "close_tx": "CLOSE sent to a peer when a sender entry is reaped",
        "close_rx": "CLOSE received; the receive window is removed",
    },
    overhead_kinds={"syncs": "sync_tx", "first_seqno": "first_seqno_tx", "closes": "close_tx"},
    mutations=MUTATIONS,
    mutation_settings={name: {"resync": mode} for name, mode in MUTATION_RESYNC.items()},
    chaos_drop_types=(
        "DATA",
        "DATA",
        "ACK",
        "ACK",
        "XMIT_REQ",
        "SYNC",
        "SYNC_OK",
        "SYNC_ACK",
        "SEND_FIRST_SEQNO",
        "CLOSE",
    ),
    variant_key="resync",
    variants=RESYNC_MODES,
    fuzz=fuzz_header,
    resync_traffic=_resync_traffic,
    xmit_traffic=retransmission_sent,
    # first_seqno is JGRP-1875 itself and fails unmutated: not a chaos mode. Small connection
    # lifetimes make windows close, get reaped and reopen.
    chaos=ChaosSet(
        mode_key="resync",
        modes=("sync", "timestamp"),
        settings={"xmit_interval": 0.5},
        draws={
            "ack_min_interval": (0.05, 0.2, 0.5),
            "conn_expiry_timeout": (3.0, 4.0, 6.0),
            "conn_close_timeout": (2.0, 3.0),
        },
        lifetime_keys=("conn_expiry_timeout", "conn_close_timeout"),
        view_episodes=True,
        admin_sync_mode="sync",
    ),
    regressions=REGRESSIONS,
    resync_marks=(
        EventMark(kind="sync_tx", label="resync (SYNC, SYNC-OK, SYNC-ACK sent)", text="sync"),
        EventMark(kind="first_seqno_tx", label="SEND_FIRST_SEQNO sent"),
    ),
    # CLOSED by a CLOSE from the sender, or reaped conn_close_timeout after leaving the view or expiring.
    discard_reasons=frozenset(("close_rx", "close_timeout")),
)
