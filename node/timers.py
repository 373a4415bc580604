"""Named deadlines of one layer (aioquic's get_timer/handle_timer, TigerBeetle's Timeout).

A layer sets each of its timeouts by name; `earliest` is the earliest of them (the layer's
`next_deadline()`), and the layer fires those that are due in the fixed order given here, so a
replay fires them in the same order. A deadline may be a lower bound: work that only postpones
a timeout (a message refreshing a connection's last activity) leaves it alone, and its handler,
finding nothing due yet, sets it again from the current state. `FiredTimers` is that dispatch for
a layer with one handler per deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from .layer import Action


class Deadlines:
    """The armed deadlines by name, and the earliest of them kept as an attribute: the simulator
    reads it after every input, far more often than a deadline changes."""

    __slots__ = ("_known", "at", "earliest", "order")

    def __init__(self, *order: str) -> None:
        self.order = order
        self._known = frozenset(order)
        # name -> time; read it freely (a hot path may test `name in at`), change it only through
        # set() and lower(), which keep `earliest` right.
        self.at: dict[str, float] = {}
        # The earliest armed deadline, kept up to date by set(); read it freely, never assign it.
        self.earliest: float | None = None

    def get(self, name: str) -> float | None:
        return self.at.get(name)

    def set(self, name: str, at: float | None) -> None:
        """Arm `name` at `at`, or cancel it (None)."""
        if name not in self._known:
            raise KeyError(f"unknown deadline {name!r} (known: {', '.join(self.order)})")
        old = self.at.get(name)
        if at is None:
            self.at.pop(name, None)
        else:
            self.at[name] = at
        nxt = self.earliest
        if at is not None and (nxt is None or at <= nxt):
            self.earliest = at
        elif old is not None and old == nxt:  # the earliest moved later or went: look again
            self.earliest = min(self.at.values(), default=None)

    def lower(self, name: str, at: float) -> None:
        """Arm `name` at `at` unless it is already armed earlier."""
        current = self.at.get(name)
        if current is None or at < current:
            self.set(name, at)

    def due(self, name: str, now: float) -> bool:
        at = self.at.get(name)
        return at is not None and at <= now

    def as_dict(self) -> dict[str, float]:
        """The armed deadlines by name (for tests and debugging)."""
        return dict(self.at)


class FiredTimers:
    """The timer entry points of a layer (mixed in before its Layer base) that keeps its timeouts
    in `self.timers` and one handler per deadline name in `_FIRE`: handler(layer, now, out) fires
    that timeout and appends its actions to `out`, re-arming or cancelling the deadline itself."""

    __slots__ = ()
    timers: Deadlines
    _FIRE: ClassVar[Mapping[str, Callable[[Any, float, list[Action]], None]]]

    def next_deadline(self) -> float | None:
        return self.timers.earliest

    def deadline_clock(self) -> Deadlines:
        return self.timers

    def on_timer(self, now: float) -> list[Action]:
        """Fire every due deadline, in the order the Deadlines were named (a replay's order)."""
        out: list[Action] = []
        timers = self.timers
        for name in timers.order:
            if timers.due(name, now):
                self._FIRE[name](self, now, out)
        return out
