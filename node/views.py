"""Protocol-neutral views of a layer's state, for everything outside node/.

The harness's settle test, the checkers, the admin API, metrics and the pipeline read windows
and busy reasons in these terms, never a protocol's own tables, so a new protocol needs no edit
outside its package to be observed.

A window is one end of a directed flow between two nodes:

- side "send": `low` = highest seqno the peer acknowledged, `high` = highest seqno sent;
- side "recv": `low` = highest seqno delivered in order, `high` = highest seqno received.

`conn_id` pairs a sender's window with its receiver's (a connection id or an epoch); two windows
with different ids are not the same flow. A pair is in sync when the sender has nothing unacked
(low == high) and the receiver, on the same conn_id, delivered up to the sender's high.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Protocol, TypeVar

from .events import make_event

SIDES = ("send", "recv")


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    peer: str
    side: str  # "send" | "recv"
    conn_id: int | None
    low: int
    high: int
    state: str  # the protocol's name for the window's state (e.g. OPEN, CLOSING)
    # send: messages kept for retransmission; recv: messages received but not deliverable yet.
    pending: int = 0
    # recv: seqnos known to be missing below `high`.
    missing: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def event(self, now: float, node: str, proto: str, final: bool = False) -> dict[str, Any]:
        """The `window` event of the event-log schema for this window."""
        return make_event(
            now,
            node,
            proto,
            "window",
            peer=self.peer,
            side=self.side,
            conn_id=self.conn_id,
            low=self.low,
            high=self.high,
            state=self.state,
            final=final or None,
        )


class SendEntryView(Protocol):
    """A sender entry of a windowed unicast protocol, as table_windows reads it (HA, HS)."""

    @property
    def ha(self) -> int: ...

    @property
    def hs(self) -> int: ...

    @property
    def state(self) -> Enum: ...

    @property
    def msgs(self) -> Sized: ...


class RecvEntryView(Protocol):
    """A receiver entry of a windowed unicast protocol, as table_windows reads it."""

    @property
    def delivered(self) -> int: ...

    @property
    def highest(self) -> int: ...

    @property
    def state(self) -> Enum: ...

    @property
    def msgs(self) -> Sized: ...


class _Counted(Protocol):
    def count(self) -> int: ...


R = TypeVar("R", bound=RecvEntryView)


def table_windows(
    send_table: Mapping[str, SendEntryView],
    recv_table: Mapping[str, R],
    missing: Callable[[R], _Counted],
    conn_id: Callable[[Any], int | None],
) -> list[Window]:
    """The windows of a protocol that keeps one sender entry and one receiver entry per peer
    (UNICAST, UNICAST2, UNICAST3): send windows first, then receive windows, each in its table's
    order; `missing` gives a receiver entry's missing seqnos, `conn_id` an entry's connection id."""
    out = [
        Window(peer=p, side="send", conn_id=conn_id(e), low=e.ha, high=e.hs, state=e.state.name, pending=len(e.msgs))
        for p, e in send_table.items()
    ]
    out.extend(
        Window(
            peer=p,
            side="recv",
            conn_id=conn_id(e),
            low=e.delivered,
            high=e.highest,
            state=e.state.name,
            pending=len(e.msgs),
            missing=missing(e).count(),
        )
        for p, e in recv_table.items()
    )
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Membership:
    """A membership protocol's current view, in neutral terms (admin GET /state, the sim driver's
    state, views_agree): `view_id` is the view counter, `coord` its coordinator (the first member),
    `suspects` the members this node suspects now, `is_coord` whether this node coordinates."""

    view_id: int
    coord: str
    members: tuple[str, ...]
    suspects: tuple[str, ...] = ()
    is_coord: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "view_id": self.view_id,
            "coord": self.coord,
            "members": list(self.members),
            "suspects": list(self.suspects),
            "is_coord": self.is_coord,
        }


def pair_problem(sender: str, receiver: str, send: dict[str, Any], recv: dict[str, Any] | None) -> str | None:
    """Why a send window and its receiver's window (dicts with Window's keys, or window events)
    are out of sync, or None if they are in sync. One rule for the live settle test and the
    windows_synced checker."""
    acked, sent = send.get("low"), send.get("high")
    # HA / HS: highest acked / highest sent, JGroups' names, which every windowed protocol shares.
    conn = "" if send.get("conn_id") is None else f"conn {send.get('conn_id')} "
    head = f"{sender} send {conn}HA={acked} HS={sent}"
    if recv is None:
        # No receive window and nothing outstanding is an idle pair, not a divergence.
        return None if acked == sent else f"{head}, {receiver} has no recv window"
    conn = "" if recv.get("conn_id") is None else f"conn {recv.get('conn_id')} "
    tail = f"{receiver} recv {conn}delivered={recv.get('low')} received={recv.get('high')}"
    if send.get("conn_id") != recv.get("conn_id"):
        return f"conn_id mismatch: {head}, {tail}"
    if acked != sent or recv.get("low") != sent:
        return f"{head}, {tail}"
    return None
