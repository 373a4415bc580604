"""The connection table of the original UNICAST: one SenderEntry and one ReceiverEntry per peer,
with no connection id: a window is known only by the peer's address.

An entry is OPEN until a view without its peer removes it (JGroups 2.x removed the connections of
members that left); TRANSITIONS lists that one change, any other (state, cause) pair is a bug of
this layer.
"""

from __future__ import annotations

from ..entries import ReceiveWindow, Transitions
from ..message import Message
from ..unicast2.entries import ConnState  # UNICAST2's two states: OPEN, then CLOSED when removed

TRANSITIONS: dict[tuple[ConnState, str], ConnState] = {
    (ConnState.OPEN, "left_view"): ConnState.CLOSED,
}

next_state = Transitions(TRANSITIONS)


class SenderEntry:
    """Send window to one peer: every message sent and not acked yet, with the time it was last
    sent. Seqnos are stored in increasing order, so the first key is the lowest unacked."""

    __slots__ = ("peer", "next_seqno", "msgs", "sent_at", "state")

    def __init__(self, peer: str):
        self.peer = peer
        self.next_seqno = 1
        self.msgs: dict[int, Message] = {}
        self.sent_at: dict[int, float] = {}
        self.state = ConnState.OPEN

    @property
    def hs(self) -> int:
        return self.next_seqno - 1

    @property
    def ha(self) -> int:
        """Everything up to this seqno is acked (JGroups' HA, "highest acked", cumulative)."""
        return next(iter(self.msgs)) - 1 if self.msgs else self.hs

    def check(self) -> None:
        assert self.msgs.keys() == self.sent_at.keys(), f"send window to {self.peer}: msgs and times differ"
        assert all(1 <= s <= self.hs for s in self.msgs), f"send window to {self.peer}: seqno outside 1..{self.hs}"


class ReceiverEntry(ReceiveWindow):
    """Receive window for one peer: delivered up to `delivered`, holding what came early."""

    __slots__ = ("state",)

    def __init__(self, peer: str):
        super().__init__(peer, 0)  # the original's first-message rule: a new window expects seqno 1
        self.state = ConnState.OPEN
