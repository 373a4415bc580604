"""What the connection tables of the unicast protocols (UNICAST, UNICAST2, UNICAST3) share: a
connection state machine given as a table, and the invariants of their windows.

Each protocol lists its own allowed (state, cause) -> state changes; any other pair is a bug of
that layer, never caused by a peer, so it raises. A protocol's entry subclasses a window class,
which holds the fields its check() reads, and adds its own slots.
"""

from __future__ import annotations

from enum import Enum
from typing import Generic, TypeVar

from .errors import RunFailed
from .message import Message

S = TypeVar("S", bound=Enum)


class ConnStateError(RunFailed, RuntimeError):
    """An unlisted (state, cause) pair: a bug in this layer, never caused by a peer."""


class Transitions(Generic[S]):
    """A connection state machine: called with (state, cause), the new state."""

    __slots__ = ("table",)

    def __init__(self, table: dict[tuple[S, str], S]) -> None:
        self.table = table

    def __call__(self, state: S, cause: str) -> S:
        try:
            return self.table[(state, cause)]
        except KeyError:
            raise ConnStateError(f"no transition from {state.name} on {cause!r}") from None


class SendWindow:
    """A send window that keeps seqnos HA+1..HS (HA: highest acked or purged, HS: highest sent)."""

    __slots__ = ("peer", "next_seqno", "ha", "msgs")

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.next_seqno = 1
        self.ha = 0
        self.msgs: dict[int, Message] = {}  # HA+1..HS, as sent

    @property
    def hs(self) -> int:
        return self.next_seqno - 1

    def check(self) -> None:
        assert 0 <= self.ha <= self.hs, f"send window to {self.peer}: HA {self.ha} > HS {self.hs}"
        assert len(self.msgs) == self.hs - self.ha, (
            f"send window to {self.peer}: {len(self.msgs)} stored, HA {self.ha} HS {self.hs}"
        )


class ReceiveWindow:
    """A receive window: delivered up to `delivered`, holding what came early up to `highest`."""

    __slots__ = ("peer", "delivered", "highest", "msgs")

    def __init__(self, peer: str, delivered: int) -> None:
        self.peer = peer
        self.delivered = delivered  # highest seqno delivered (the window's low edge)
        self.highest = delivered  # highest seqno received
        self.msgs: dict[int, Message] = {}  # received, not yet deliverable (seqno > delivered)

    def check(self) -> None:
        assert 0 <= self.delivered <= self.highest, (
            f"recv window for {self.peer}: delivered {self.delivered}, highest {self.highest}"
        )
        assert self.delivered + 1 not in self.msgs, f"recv window for {self.peer}: deliverable message held"
        assert len(self.msgs) <= self.highest - self.delivered, f"recv window for {self.peer}: too many held"
