"""Connection entries of UNICAST3 and their state machine.

A SenderEntry is this node's send window towards one peer, a ReceiverEntry its receive window
for one peer. Both go OPEN -> CLOSING -> CLOSED (the UNICAST3 design, "Connection establishment"); every
allowed change is listed in TRANSITIONS, and any other (state, cause) pair is a protocol error.
"""

from __future__ import annotations

from enum import Enum

from ..entries import ReceiveWindow, SendWindow, Transitions
from ..rangeset import RangeSet


class ConnState(Enum):
    OPEN = "OPEN"
    CLOSING = "CLOSING"
    CLOSED = "CLOSED"


# (state, cause) -> new state.
TRANSITIONS: dict[tuple[ConnState, str], ConnState] = {
    (ConnState.OPEN, "expired"): ConnState.CLOSING,
    (ConnState.OPEN, "left_view"): ConnState.CLOSING,
    (ConnState.CLOSING, "send"): ConnState.OPEN,
    (ConnState.CLOSING, "receive"): ConnState.OPEN,
    (ConnState.CLOSING, "joined_view"): ConnState.OPEN,
    (ConnState.CLOSING, "close_timeout"): ConnState.CLOSED,
    (ConnState.OPEN, "close_rx"): ConnState.CLOSED,
    (ConnState.CLOSING, "close_rx"): ConnState.CLOSED,
    (ConnState.OPEN, "replaced"): ConnState.CLOSED,
    (ConnState.CLOSING, "replaced"): ConnState.CLOSED,
}

next_state = Transitions(TRANSITIONS)


class SenderEntry(SendWindow):
    """Send window to one peer: seqnos HA+1..HS are unacked and kept for retransmission."""

    __slots__ = (
        "conn_id",
        "state",
        "last_active",
        "prev_xmit",
        "awaiting_sync_ack",
        "sync_started",
        "prev_conn_id",
        "last_timestamp",
        "sync_nonce",
    )

    def __init__(self, peer: str, conn_id: int, now: float):
        super().__init__(peer)
        self.conn_id = conn_id
        self.state = ConnState.OPEN
        self.last_active = now
        self.prev_xmit: tuple[int, int] | None = None  # (HA, HS) at the previous retransmit run
        self.awaiting_sync_ack = False  # SYNC: ACKs from the peer are ignored until SYNC-ACK
        self.sync_started = 0.0
        self.prev_conn_id = 0
        self.last_timestamp = -1  # resync=timestamp: highest ACK/SEND_FIRST_SEQNO timestamp seen
        self.sync_nonce = 0  # the nonce of the newest SYNC answered (pending or done)


class ReceiverEntry(ReceiveWindow):
    """Receive window for one peer: delivered up to `delivered`, holding what came early."""

    __slots__ = ("conn_id", "state", "last_active", "ack_pending", "last_ack_tx", "prev_missing")

    def __init__(self, peer: str, conn_id: int, delivered: int, now: float):
        super().__init__(peer, delivered)
        self.conn_id = conn_id
        self.state = ConnState.OPEN
        self.last_active = now
        self.ack_pending = False
        self.last_ack_tx = float("-inf")
        self.prev_missing: RangeSet | None = None  # RangeSet of gaps seen at the previous retransmit run
