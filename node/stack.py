"""A stack of layers and the router between them.

Layers are ordered bottom (index 0, next to the transport) to top (next to the application).
An input enters at one end, and each action a layer returns is routed at once: Down to the layer
below, Up to the layer above, Log into the event buffer. What leaves the stack accumulates in
three outboxes that the driver drains with `take()`: messages for the transport, messages for
the application, and events for the log.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .layer import Action, Command, Down, Layer, Log, Up
from .message import Message

L = TypeVar("L", bound=Layer)


class Stack:
    def __init__(self, local: str, layers: list[Layer]):
        if not layers:
            raise ValueError("a stack needs at least one layer")
        self.local = local
        self.layers = layers
        self.to_transport: list[Message] = []
        self.to_app: list[Message] = []
        self.events: list[dict[str, Any]] = []

    # ---- inputs -------------------------------------------------------------------------------

    def send(self, msg: Message, now: float) -> None:
        """The application sends a message (msg.dest set, msg.src = local). From here on the
        message belongs to the stack: layers add their headers in place and keep it for
        retransmission, so the caller must not reuse or change it."""
        top = len(self.layers) - 1
        dest = msg.dest
        while top > 0 and self.layers[top].passes_dest(dest):
            top -= 1
        self._route(top, self.layers[top].down(msg, now), now)

    def send_batch(self, msgs: list[Message], now: float) -> None:
        """send() each message, in order, with the same result. When every layer below the top
        one reports `passes_through()` (e.g. a fault layer without rules), the top layer's Down
        actions go straight to the transport outbox: routing them through those layers would
        hand them on unchanged, one call and one action object per layer and message later.
        (Added for the asyncio runtime's bundled workload sends.)"""
        top = len(self.layers) - 1
        if msgs:
            # Layers at the top that pass this dest through (UNICAST3 and a multicast) are skipped.
            dest = msgs[0].dest
            while top > 0 and self.layers[top].passes_dest(dest) and all(m.dest == dest for m in msgs):
                top -= 1
        for layer in self.layers[:top]:
            passes = getattr(layer, "passes_through", None)
            if passes is None or not passes():
                for msg in msgs:
                    self.send(msg, now)
                return
        layer = self.layers[top]
        to_transport, events = self.to_transport, self.events
        for msg in msgs:
            for action in layer.down(msg, now):
                if type(action) is Down:
                    to_transport.append(action.msg)
                elif type(action) is Log:
                    events.append(action.event)
                else:
                    self._route(top, [action], now)

    def receive(self, msgs: list[Message], now: float) -> None:
        """The transport received a batch of messages from one source."""
        if msgs:
            self._route(0, self.layers[0].up(msgs, now), now)

    def command(self, cmd: Command, now: float) -> None:
        """Give a control input to every layer, top first."""
        for idx in range(len(self.layers) - 1, -1, -1):
            self._route(idx, self.layers[idx].command(cmd, now), now)

    def next_deadline(self) -> float | None:
        best = None
        for layer in self.layers:
            d = layer.next_deadline()
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
        """Drain the outboxes: (to transport, to application, events)."""
        out = (self.to_transport, self.to_app, self.events)
        self.to_transport, self.to_app, self.events = [], [], []
        return out

    def layer(self, kind: type[L]) -> L:
        for layer in self.layers:
            if isinstance(layer, kind):
                return layer
        raise KeyError(kind.__name__)

    def check_invariants(self) -> None:
        for layer in self.layers:
            layer.check_invariants()

    # ---- routing ------------------------------------------------------------------------------

    def _route(self, idx: int, actions: list[Action], now: float) -> None:
        layers = self.layers
        for action in actions:
            if type(action) is Down:
                # Skip the layers below that pass this message's dest through unchanged.
                below = idx - 1
                dest = action.msg.dest
                while below >= 0 and layers[below].passes_dest(dest):
                    below -= 1
                if below < 0:
                    self.to_transport.append(action.msg)
                else:
                    self._route(below, layers[below].down(action.msg, now), now)
            elif type(action) is Up:
                above = idx + 1
                msgs = action.msgs
                if above < len(layers) and msgs:
                    dest = msgs[0].dest
                    while above < len(layers) and layers[above].passes_dest(dest):
                        if not all(m.dest == dest for m in msgs):
                            break
                        above += 1
                if above == len(layers):
                    self.to_app.extend(msgs)
                else:
                    self._route(above, layers[above].up(msgs, now), now)
            elif type(action) is Log:
                self.events.append(action.event)
            else:
                raise TypeError(f"layer {self.layers[idx].proto} returned {action!r}")
