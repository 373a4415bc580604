"""The connection table of UNICAST2: one SenderEntry and one ReceiverEntry per peer.

The UNICAST2 design has no CLOSING state: an entry is OPEN until it is removed (the peer left the view, the
connection expired) or replaced (a first=true message with another conn-id). The allowed changes
are listed in TRANSITIONS; any other (state, cause) pair is a bug of this layer.
"""

from __future__ import annotations

from enum import Enum

from ..entries import ReceiveWindow, SendWindow, Transitions


class ConnState(Enum):
    OPEN = "OPEN"
    CLOSED = "CLOSED"


TRANSITIONS: dict[tuple[ConnState, str], ConnState] = {
    (ConnState.OPEN, "left_view"): ConnState.CLOSED,
    (ConnState.OPEN, "expired"): ConnState.CLOSED,
    (ConnState.OPEN, "replaced"): ConnState.CLOSED,
}

next_state = Transitions(TRANSITIONS)


class SenderEntry(SendWindow):
    """Send window to one peer: seqnos HA+1..HS are kept until a STABLE says they were delivered
    (HA, "highest acked", is the highest seqno purged)."""

    __slots__ = ("conn_id", "state", "last_active")

    def __init__(self, peer: str, conn_id: int, now: float):
        super().__init__(peer)
        self.conn_id = conn_id  # send-conn-id
        self.state = ConnState.OPEN
        self.last_active = now


class ReceiverEntry(ReceiveWindow):
    """Receive window (recv_win) for one peer under its recv-conn-id: delivered up to
    `delivered`, holding what came early; `stable_mark` and `stable_repeats` pace its STABLEs."""

    __slots__ = ("conn_id", "state", "last_active", "stable_mark", "stable_repeats")

    def __init__(self, peer: str, conn_id: int, delivered: int, now: float):
        super().__init__(peer, delivered)
        self.conn_id = conn_id  # recv-conn-id
        self.state = ConnState.OPEN
        self.last_active = now
        self.stable_mark: tuple[int, int] | None = None  # (delivered, highest) the last STABLE carried
        self.stable_repeats = 0  # STABLEs sent in a row with that same mark
