"""The contract between a protocol layer and the stack that drives it.

A layer is a sans-I/O state machine: it never reads a clock, opens a socket or starts a thread.
Every entry point takes `now` (float seconds on the driver's clock) and returns a list of
actions. Timers are data: a layer reports its next deadline and fires everything due in
`on_timer(now)`, so the asyncio runtime keeps one `call_at` and the simulator jumps to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .events import DataEvents, make_event
from .message import Message
from .views import Membership, Window

# ---- actions (outputs of a layer) -------------------------------------------------------------


class Action:
    """Base class of everything a layer hands back to the stack."""

    __slots__ = ()


# The actions built for every message are plain slotted dataclasses, not frozen ones (a frozen one
# costs about twice as much to build); nothing changes them after they are returned. Their first
# field may also be passed by position, as the hot paths do: a class called with a keyword builds a
# dict of keyword arguments for its __init__, about 60 % more per action.
@dataclass(slots=True)
class Down(Action):
    """Pass a message to the layer below (or to the transport from the bottom layer)."""

    msg: Message


@dataclass(slots=True)
class DownBatch(Action):
    """Pass messages, in order, to the layer below (or to the transport): what one Down per
    message would do, returned by a layer's down_batch for a run of messages it numbered."""

    msgs: list[Message]


@dataclass(slots=True)
class Up(Action):
    """Pass messages from one source to the layer above (or to the application from the top).
    `multicasts`: every message is a multicast the multicast layer delivers (dest MCAST_DEST, no
    header of the layers above), so the layer above takes them with Layer.up_multicasts."""

    msgs: list[Message]
    multicasts: bool = False


@dataclass(slots=True)
class Log(Action):
    """Record one event of the event-log schema (node/events.py), or a record of many send or
    deliver events (DataEvents)."""

    event: dict[str, Any] | DataEvents


@dataclass(frozen=True, slots=True, kw_only=True)
class Announce(Action):
    """Hand a command to every OTHER layer of the stack, top first (how GMS tells the layers
    above and below of a view it installed, and how its sub-layers talk: suspicions, discovery).
    `instead`, on an action returned from command(): the announced command replaces the one this
    layer was given, which the stack then hands to no further layer (GMS installing an injected
    view under its own view id)."""

    cmd: Command
    instead: bool = False


# ---- commands (inputs other than messages and timers) -----------------------------------------


class Command:
    """Base class of control inputs a driver or an admin gives to the whole stack."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ViewChange(Command):
    """Install a membership view (injected by a test or a scenario, or produced by GMS)."""

    members: tuple[str, ...]
    view_id: int
    # The coordinator ("" = the first member) and why the view came (inject, join, leave,
    # suspect, merge, singleton; "" = injected by a driver without GMS).
    coord: str = ""
    reason: str = ""
    # The highest seqno each member had multicast when the view was made, as (member, seqno)
    # pairs: a joiner's multicast layer starts its receive table for each sender there (JGroups'
    # join digest). Empty for unicast-only stacks and with static membership.
    digest: tuple[tuple[str, int], ...] = ()
    # True when the layer that installed the view already logged its `view` event.
    logged: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Bootstrap(Command):
    """A starting node with a membership protocol: the configured peers (JGroups TCPPING's
    initial_hosts) to discover a coordinator among, instead of a static view."""

    peers: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Leave(Command):
    """Graceful stop (SIGTERM): leave the group before the process exits."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BecomeServer(Command):
    """A joiner's join is complete (JGroups' BECOME_SERVER): a multicast layer replays what it
    queued meanwhile (become_server_queue) and from then on delivers what arrives."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncPeer(Command):
    """Admin operation: force a resync of this node's receive window for `peer` (a goal of the SYNC design)."""

    peer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetConfig(Command):
    """Change run-time settings of the layers that know them (e.g. xmit_interval)."""

    values: dict[str, Any]


# ---- queries (a layer asking the others for a value, answered at once) -------------------------


class Query:
    """Base class of questions one layer asks the rest of the stack through `Layer.ask` (JGroups'
    down(Event.GET_DIGEST), which returns a value). The stack hands the query to the other layers,
    top first, and the first answer that is not None wins; no layer holds a reference to another."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GetDigest(Query):
    """Membership -> the multicast layer: the highest seqno it knows of each sender, as (sender,
    seqno) pairs (its own: the last it multicast). A stack without a multicast layer answers None,
    so its join and merge digests stay empty."""


Digest = tuple[tuple[str, int], ...]


# ---- the layer base class ---------------------------------------------------------------------


class DeadlineClock(Protocol):
    """What Layer.deadline_clock returns: a layer's next deadline kept as an attribute."""

    earliest: float | None


class Layer:
    """A protocol layer. Subclasses override what they handle; the defaults pass through."""

    proto = "layer"
    local = ""  # the node's name; set by subclasses that log events
    # False when nothing reads the per-message events (send, deliver: the daemon without an event
    # log): a layer may then skip building them. Every other event is still returned.
    data_events = True
    # True when down() hands a multicast (dest MCAST_DEST) on unchanged, with nothing logged and
    # no state touched (UNICAST3 over NAKACK2): Stack.send_batch then gives a batch of multicasts
    # straight to the layer below that numbers them.
    passes_multicasts = False
    # True while down() and up() would hand every message on unchanged, logging nothing (a fault
    # layer without rules): the stack then routes around the layer. A layer that can pass through
    # keeps this attribute up to date itself; the stack reads it on every message, so it is not a
    # method call.
    passing = False
    # Set by the Stack that holds this layer: how it asks the other layers a Query (None outside
    # a stack, e.g. a layer driven alone in a test, where nobody answers).
    asker: Callable[[Query], Any] | None = None

    def ask(self, query: Query) -> Any:
        """The first answer of the other layers of the stack to `query`, or None."""
        return self.asker(query) if self.asker is not None else None

    def answer(self, query: Query) -> Any:
        """This layer's answer to another layer's query, or None (not its business)."""
        return None

    def down(self, msg: Message, now: float) -> list[Action]:
        return [Down(msg=msg)]

    def down_batch(self, msgs: list[Message], now: float) -> list[Action]:
        """down() for each message, in order, with the same result: a layer may override it to
        handle a batch of application sends at once (the runtime's bundled workload sends)."""
        out: list[Action] = []
        for msg in msgs:
            out.extend(self.down(msg, now))
        return out

    def up(self, msgs: list[Message], now: float) -> list[Action]:
        """A batch of messages from one source, in the order they arrived."""
        return [Up(msgs=msgs)]

    def up_multicasts(self, msgs: list[Message], now: float) -> list[Action]:
        """up() of multicasts delivered by the multicast layer below (Up.multicasts): the same
        actions, which a layer that only hands them on can give without looking at each one."""
        return self.up(msgs, now)

    def command(self, cmd: Command, now: float) -> list[Action]:
        return []

    def next_deadline(self) -> float | None:
        return None

    def deadline_clock(self) -> DeadlineClock | None:
        """An object whose `earliest` attribute is at all times what next_deadline() returns, or
        None. The stack asks once, when it is built; the drivers then read that attribute after
        every input instead of calling next_deadline() (two calls per input in the simulator)."""
        return None

    def on_timer(self, now: float) -> list[Action]:
        return []

    def check_invariants(self) -> None:
        """Raise AssertionError if internal state is inconsistent; the simulator calls it often."""

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able view of the layer's own state, in its own terms (admin GET /state, for
        people). Code outside node/ reads windows() and busy() instead."""
        return {}

    # ---- protocol-neutral views (node/views.py) ---------------------------------------------

    def windows(self) -> list[Window]:
        """Every send and receive window this layer keeps, in protocol-neutral terms."""
        return []

    def busy(self) -> list[str]:
        """What still keeps this layer from being settled (a resync in progress, an answer
        awaited...), one reason per item for people to read; empty when settled. Unacked
        messages are not listed: windows() shows them."""
        return []

    def unacked(self, peer: str) -> int:
        """Messages sent to `peer` and not acknowledged yet (the runtime's back-pressure)."""
        return 0

    def blocked(self, dest: str) -> bool:
        """Would the application's send to `dest` block now (MCAST's full window)? The simulator's
        workload and the runtime's streams do not send to `dest` while it is true."""
        return False

    def membership(self) -> Membership | None:
        """The group view this layer maintains (a membership protocol), or None."""
        return None

    def refusal(self, cmd: Command) -> str | None:
        """Why this layer cannot carry out an admin command (e.g. a resync it has no way to do),
        or None. The runtime asks before giving the command to the stack."""
        return None

    def window_events(self, now: float, final: bool = False) -> list[dict[str, Any]]:
        """`window` events for every window (final=true in the snapshots at the end of a run)."""
        return [w.event(now, self.local, self.proto, final) for w in self.windows()]


class CountingLayer(Layer):
    """A protocol layer that counts what it does by key (GET /state, /metrics) and logs its events
    under its own name; every `drop` event is also counted, by message type (`dropped_<TYPE>`)."""

    counters: dict[str, int]

    def _count(self, key: str, n: int = 1) -> None:
        self.counters[key] = self.counters.get(key, 0) + n

    def _log(self, now: float, kind: str, **fields: Any) -> Log:
        if kind == "drop":
            self._count(f"dropped_{fields.get('type') or 'unknown'}")
        return Log(make_event(now, self.local, self.proto, kind, **fields))
