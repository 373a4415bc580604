"""Named deadlines of one layer (aioquic's get_timer/handle_timer, TigerBeetle's Timeout).

A layer sets each of its timeouts by name; `next()` is the earliest of them (the layer's
`next_deadline()`), and the layer fires those that are due in the fixed order given here, so a
replay fires them in the same order. A deadline may be a lower bound: work that only postpones
a timeout (a message refreshing a connection's last activity) leaves it alone, and its handler,
finding nothing due yet, sets it again from the current state.
"""

from __future__ import annotations


class Deadlines:
    __slots__ = ("_at", "order")

    def __init__(self, *order: str) -> None:
        self.order = order
        self._at: dict[str, float] = {}

    def get(self, name: str) -> float | None:
        return self._at.get(name)

    def set(self, name: str, at: float | None) -> None:
        """Arm `name` at `at`, or cancel it (None)."""
        if name not in self.order:
            raise KeyError(f"unknown deadline {name!r} (known: {', '.join(self.order)})")
        if at is None:
            self._at.pop(name, None)
        else:
            self._at[name] = at

    def lower(self, name: str, at: float) -> None:
        """Arm `name` at `at` unless it is already armed earlier."""
        current = self._at.get(name)
        if current is None or at < current:
            self.set(name, at)

    def due(self, name: str, now: float) -> bool:
        at = self._at.get(name)
        return at is not None and at <= now

    def next(self) -> float | None:
        return min(self._at.values(), default=None)

    def as_dict(self) -> dict[str, float]:
        """The armed deadlines by name (for tests and debugging)."""
        return dict(self._at)
