"""A stack of layers and the router between them.

Layers are ordered bottom (index 0, next to the transport) to top (next to the application).
An input enters at one end, and each action a layer returns is routed at once: Down to the layer
below, Up to the layer above, Log into the event buffer. What leaves the stack accumulates in
three outboxes that the driver drains with `take()`: messages for the transport, messages for
the application, and events for the log.
"""

from __future__ import annotations

from functools import partial
from typing import Any, TypeVar

from .events import DataEvents, unpack_events
from .layer import Action, Announce, Command, Down, DownBatch, Layer, Log, Query, Up
from .message import MCAST_DEST, Message
from .views import Membership

L = TypeVar("L", bound=Layer)


class Stack:
    def __init__(self, local: str, layers: list[Layer]):
        if not layers:
            raise ValueError("a stack needs at least one layer")
        self.local = local
        self.layers = layers
        self.to_transport: list[Message] = []
        self.to_app: list[Message] = []
        self.events: list[dict[str, Any] | DataEvents] = []
        # A layer's questions to the others (Layer.ask) come back through the stack.
        for idx, layer in enumerate(layers):
            layer.asker = partial(self._ask, idx)
        # The simulator checks invariants after every input: only layers that check something.
        # Layers that may block a sender (Layer.blocked), asked before each application send.
        self._blockers = [layer.blocked for layer in layers if type(layer).blocked is not Layer.blocked]
        self.may_block = bool(self._blockers)
        self.invariant_checks = [
            layer.check_invariants for layer in layers if type(layer).check_invariants is not Layer.check_invariants
        ]
        # A multicast goes straight to the first layer from the top that does something with it
        # (Layer.passes_multicasts, a class attribute): NAKACK2 under UNICAST3.
        self._top = top = len(layers) - 1
        while top > 0 and layers[top].passes_multicasts:
            top -= 1
        self._multicast_top = top
        # The drivers ask for the next deadline after every input: only layers that keep timers,
        # read as an attribute where the layer keeps one (Layer.deadline_clock), else called (the
        # simulator reads these lists itself: see harness/sim/simulator.py _after_input).
        timed = [layer for layer in layers if type(layer).next_deadline is not Layer.next_deadline]
        clocks = [layer.deadline_clock() for layer in timed]
        self.deadline_clocks = [clock for clock in clocks if clock is not None]
        self.deadline_sources = [layer.next_deadline for layer, clock in zip(timed, clocks) if clock is None]

    # ---- inputs -------------------------------------------------------------------------------

    def send(self, msg: Message, now: float) -> None:
        """The application sends a message (msg.dest set, msg.src = local). From here on the
        message belongs to the stack: layers add their headers in place and keep it for
        retransmission, so the caller must not reuse or change it."""
        top = self._multicast_top if msg.dest == MCAST_DEST else self._top
        self._route(top, self.layers[top].down(msg, now), now)

    def send_batch(self, msgs: list[Message], now: float) -> None:
        """send() each message, in order, with the same result. When every layer below the top
        one is `passing` (Layer.passing: e.g. a fault layer without rules), the top layer's Down
        actions go straight to the transport outbox: routing them through those layers would
        hand them on unchanged, one call and one action object per layer and message later. The top
        layer gets the whole batch (Layer.down_batch); a batch of multicasts goes to the first
        layer from the top that does not pass multicasts on (Layer.passes_multicasts), NAKACK2
        under UNICAST3. (For the asyncio runtime's bundled sends.)"""
        top = self._top
        if msgs and all(msg.dest == MCAST_DEST for msg in msgs):
            top = self._multicast_top
        for layer in self.layers[:top]:
            if not layer.passing:
                for msg in msgs:
                    self.send(msg, now)
                return
        to_transport, events = self.to_transport, self.events
        for action in self.layers[top].down_batch(msgs, now):
            if type(action) is DownBatch:
                to_transport.extend(action.msgs)
            elif type(action) is Down:
                to_transport.append(action.msg)
            elif type(action) is Log:
                events.append(action.event)
            else:
                self._route(top, [action], now)

    def receive(self, msgs: list[Message], now: float) -> None:
        """The transport received a batch of messages from one source."""
        if msgs:
            # The first layer from the bottom that does not pass through (inline: once per frame).
            layers = self.layers
            top = len(layers)
            idx = 0
            while idx < top and layers[idx].passing:
                idx += 1
            if idx == top:
                self.to_app.extend(msgs)
            else:
                actions = layers[idx].up(msgs, now)
                if actions:  # often none: a multicast held behind a gap
                    self._route(idx, actions, now)

    def command(self, cmd: Command, now: float) -> None:
        """Give a control input to every layer, top first. A layer that answers with an
        Announce(instead=True) takes the command over: the layers below it get the announced one
        (from the Announce) instead of this one."""
        for idx in range(len(self.layers) - 1, -1, -1):
            actions = self.layers[idx].command(cmd, now)
            self._route(idx, actions, now)
            if any(type(a) is Announce and a.instead for a in actions):
                return

    def next_deadline(self) -> float | None:
        best = None
        for clock in self.deadline_clocks:
            d = clock.earliest
            if d is not None and (best is None or d < best):
                best = d
        for next_deadline in self.deadline_sources:
            d = next_deadline()
            if d is not None and (best is None or d < best):
                best = d
        return best

    def on_timer(self, now: float) -> None:
        """Fire every layer whose deadline has come, bottom first (a fixed order, for replay)."""
        for idx, layer in enumerate(self.layers):
            deadline = layer.next_deadline()
            if deadline is not None and deadline <= now:
                self._route(idx, layer.on_timer(now), now)

    # ---- outputs ------------------------------------------------------------------------------

    def take(self) -> tuple[list[Message], list[Message], list[dict[str, Any]]]:
        """Drain the outboxes: (to transport, to application, events as dicts)."""
        out = (self.to_transport, self.to_app, unpack_events(self.events))
        self.to_transport, self.to_app, self.events = [], [], []
        return out

    def drain(self, log: list[dict[str, Any]]) -> tuple[list[Message], list[Message]]:
        """take() for a driver that keeps its own event log (the simulator, after every input):
        the events go straight into `log` as dicts, and only a non-empty outbox is replaced, so
        an empty list returned may still be the stack's own (test it, do not keep it)."""
        evs = self.events
        if evs:
            for ev in evs:
                if type(ev) is DataEvents:
                    log.extend(ev.dicts())
                else:
                    log.append(ev)  # type: ignore[arg-type]  # a dict: `type() is` does not narrow
            self.events = []
        out = self.to_transport
        if out:
            self.to_transport = []
        app = self.to_app
        if app:
            self.to_app = []
        return out, app

    def take_packed(self) -> tuple[list[Message], list[Message], list[dict[str, Any] | DataEvents]]:
        """take(), with the per-message events left as DataEvents records (node/events.py) for a
        writer that formats them itself (the daemon's event log)."""
        out = (self.to_transport, self.to_app, self.events)
        self.to_transport, self.to_app, self.events = [], [], []
        return out

    def layer(self, kind: type[L]) -> L:
        for layer in self.layers:
            if isinstance(layer, kind):
                return layer
        raise KeyError(kind.__name__)

    def blocked(self, dest: str) -> bool:
        """Would the application's send to `dest` block now (a layer's window is full)?"""
        return any(blocked(dest) for blocked in self._blockers)

    def membership(self) -> Membership | None:
        """The view of the first layer that keeps one (a membership protocol), or None."""
        for layer in self.layers:
            m = layer.membership()
            if m is not None:
                return m
        return None

    def check_invariants(self) -> None:
        for check in self.invariant_checks:
            check()

    # ---- queries ------------------------------------------------------------------------------

    def _ask(self, idx: int, query: Query) -> Any:
        """Layer idx asks the others, top first; the first answer that is not None."""
        for other in range(len(self.layers) - 1, -1, -1):
            if other != idx:
                answer = self.layers[other].answer(query)
                if answer is not None:
                    return answer
        return None

    # ---- routing ------------------------------------------------------------------------------

    def _down_from(self, idx: int) -> int:
        """The first layer at or below idx that does not pass through (-1: the transport)."""
        layers = self.layers
        while idx >= 0 and layers[idx].passing:
            idx -= 1
        return idx

    def _route(self, idx: int, actions: list[Action], now: float) -> None:
        layers = self.layers
        for action in actions:
            if type(action) is Log:
                self.events.append(action.event)
            elif type(action) is Down:
                # _down_from(idx - 1), inlined: one Down per message sent.
                below = idx - 1
                while below >= 0 and layers[below].passing:
                    below -= 1
                if below < 0:
                    self.to_transport.append(action.msg)
                else:
                    self._route(below, self.layers[below].down(action.msg, now), now)
            elif type(action) is DownBatch:
                below = self._down_from(idx - 1)
                if below < 0:
                    self.to_transport.extend(action.msgs)
                else:
                    for msg in action.msgs:
                        self._route(below, self.layers[below].down(msg, now), now)
            elif type(action) is Up:
                # The first layer above idx that does not pass through (inline: one Up per batch).
                above = idx + 1
                top = len(layers)
                while above < top and layers[above].passing:
                    above += 1
                if above == top:
                    self.to_app.extend(action.msgs)
                elif action.multicasts:
                    self._route(above, self.layers[above].up_multicasts(action.msgs, now), now)
                else:
                    self._route(above, self.layers[above].up(action.msgs, now), now)
            elif type(action) is Announce:
                for other in range(len(self.layers) - 1, -1, -1):
                    if other != idx:
                        self._route(other, self.layers[other].command(action.cmd, now), now)
            else:
                raise TypeError(f"layer {self.layers[idx].proto} returned {action!r}")
